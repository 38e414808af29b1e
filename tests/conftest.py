"""Shared fixtures: the real engine binary (CPU build) and the tiny models of engine/tools/make_tiny.py."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testing import engine_path, tiny  # noqa: E402


@pytest.fixture(scope="session")
def engine_bin() -> str:
    path = engine_path()
    if not os.path.exists(path):
        pytest.fail(f"engine binary {path} is missing: build it first (cmake -S . -B build && cmake --build build)")
    return path


@pytest.fixture(scope="session")
def tiny_models():
    """tiny_models(name) -> manifest dict (hf_dir, gguf{outtype: path}, mtp_gguf), built once and cached."""
    return tiny
