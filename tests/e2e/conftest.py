# Fixtures for the end-to-end tests (helpers in e2e_helpers.py): one real gateway on the real engine (engine_bin
# and tiny_models come from tests/conftest.py), shared by the page and terminal-chat tests.
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from e2e_helpers import ARTIFACTS_DIR, TEST_MODEL_CONFIG, Gateway  # noqa: E402


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS_DIR


@pytest.fixture(scope="session")
def gateway(engine_bin, tiny_models, artifacts_dir):
    server = Gateway(Path(tiny_models(TEST_MODEL_CONFIG)["gguf"]["f32"]), Path(engine_bin),
                     artifacts_dir / "e2e-gateway.log")
    yield server
    server.close()
