# Makes engine/tools importable so the tests can import the demo_model package.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine" / "tools"))

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def original_qsa_indexer():
    """Training and evaluation code patch transformers' QSA indexer class with the vectorised one (demo_model/
    qsa_indexer.py); undo it after every test, or later suites in the same process (tests/oracle) would compare the
    engine against the patched class, whose sums differ in the last bits."""
    yield
    from demo_model import qsa_indexer
    qsa_indexer.unpatch_qsa_indexer()
