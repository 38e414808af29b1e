# Fixtures for the converter tests: engine/tools on sys.path, the tiny models (built once, cached by make_tiny).
import os
import pathlib
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "engine" / "tools"
sys.path.insert(0, str(TOOLS))

import make_tiny  # noqa: E402

_built = {}


def tiny(name: str) -> dict:
    if name not in _built:
        _built[name] = make_tiny.build(name)
    return _built[name]


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("STRATA_BUILD", "/work/main/build"))
