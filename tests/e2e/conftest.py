# Fixtures for the end-to-end tests (helpers in e2e_helpers.py): the engine binary, the tiny model and one real
# gateway shared by the page and terminal-chat tests.
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from e2e_helpers import ARTIFACTS_DIR, Gateway, engine_binary, tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def engine_path() -> Path:
    return engine_binary()


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    return tiny_model()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS_DIR


@pytest.fixture(scope="session")
def gateway(engine_path, tiny_model_path, artifacts_dir):
    server = Gateway(tiny_model_path, engine_path, artifacts_dir / "e2e-gateway.log")
    yield server
    server.close()
