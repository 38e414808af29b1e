# `python -m installer [options]`: what setup.sh and START-HERE.bat run (see installer/cli.py for the options).
import sys

from installer.main import main

sys.exit(main())
