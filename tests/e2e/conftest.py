# Fixtures for the end-to-end tests (helpers in e2e_helpers.py): real gateways on the real engine (engine_bin and
# tiny_models come from tests/conftest.py): one on a tiny model shared by the page and terminal-chat tests, one on
# the demo model.
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from e2e_helpers import ARTIFACTS_DIR, DEMO_CONTEXT, DEMO_MODEL, DEMO_MTP, TEST_MODEL_CONFIG, Gateway  # noqa: E402
from installer.launcher import DEMO_MODEL_NAME  # noqa: E402


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


@pytest.fixture(scope="module")
def demo_gateway(engine_bin, artifacts_dir):
    """The shipped demo model with its MTP head drafting, as the installer starts it."""
    server = Gateway(DEMO_MODEL, Path(engine_bin), artifacts_dir / "e2e-demo-gateway.log",
                     "--engine-arg=--mtp", f"--engine-arg={DEMO_MTP}", "--model-name", DEMO_MODEL_NAME,
                     context=DEMO_CONTEXT)
    yield server
    server.close()
