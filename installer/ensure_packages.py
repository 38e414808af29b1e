# Installs requirements.txt into the running Python (the project's .venv) when it changed since the last install.
# Standard library only: setup.sh and START-HERE.bat run it before any package is there.
# Usage: python -m installer.ensure_packages
import hashlib
import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
REQUIREMENTS = PROJECT_DIR / "requirements.txt"


def main() -> int:
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = Path(sys.prefix) / ".requirements.sha256"
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return 0
    print("Installing the Python packages (requirements.txt) into the project's environment ...", flush=True)
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                             "-r", str(REQUIREMENTS)])
    if result.returncode != 0:
        print("Installing the Python packages failed (see the messages above). Check the internet connection "
              "and run the setup again; packages already installed are kept.", flush=True)
        return result.returncode
    stamp.write_text(wanted + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
