# Makes engine/tools importable so the tests can import the demo_model package.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine" / "tools"))
