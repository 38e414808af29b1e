# Fixtures for the converter tests: engine/tools on sys.path, the tiny models (built once, cached by make_tiny).
import pathlib

import pytest

from strata_testing import build_dir as _build_dir  # noqa: E402


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return pathlib.Path(_build_dir())
