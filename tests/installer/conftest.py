# Fixtures for the installer tests (helpers are in installer_helpers.py). The project root goes on sys.path so
# `import installer` works however pytest is started.
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from installer_helpers import start_hub  # noqa: E402


@pytest.fixture
def hub(tmp_path):
    hub, server = start_hub(tmp_path)
    yield hub
    server.shutdown()
    server.server_close()
