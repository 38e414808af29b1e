#!/usr/bin/env bash
# Linux entry point: finds Python >= 3.10 (offers to install it with apt-get, asking first), makes .venv in this
# folder, installs requirements.txt into it, then runs the installer (python -m installer) with the same arguments.
set -euo pipefail
cd "$(dirname "$0")"
PROJECT_DIR=$(pwd)
VENV="$PROJECT_DIR/.venv"

ASSUME_YES=0
for arg in "$@"; do
  case "$arg" in --yes|-y) ASSUME_YES=1 ;; esac
done

say() { printf '%s\n' "$*"; }

python_is_new_enough() {
  "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' >/dev/null 2>&1
}

find_python() {
  for candidate in python3.13 python3.12 python3.11 python3.10 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && python_is_new_enough "$candidate"; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

# Asks before running apt-get; --yes answers yes. Without a terminal and without --yes it does not install.
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    say "This system has no apt-get. Install Python 3.10 or newer with venv support yourself, then run ./setup.sh again."
    exit 1
  fi
  local answer="y"
  if [ "$ASSUME_YES" != 1 ]; then
    if [ ! -t 0 ]; then
      say "Python packages ($*) are needed. Run ./setup.sh --yes to install them with apt-get, or install them yourself."
      exit 1
    fi
    read -r -p "Install $* with apt-get now (needs administrator rights)? [Y/n] " answer
  fi
  case "${answer:-y}" in
    y|Y|yes|YES) ;;
    *) say "Not installed. Install $* yourself, then run ./setup.sh again."; exit 1 ;;
  esac
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo apt-get install -y "$@"
}

if [ -x "$VENV/bin/python" ] && python_is_new_enough "$VENV/bin/python"; then
  PYTHON="$VENV/bin/python"
else
  if ! SYSTEM_PYTHON=$(find_python); then
    say "Python 3.10 or newer was not found."
    apt_install python3 python3-venv
    SYSTEM_PYTHON=$(find_python) || { say "Python 3.10 or newer is still missing after the install."; exit 1; }
  fi
  say "Making the Python environment in $VENV (with $SYSTEM_PYTHON) ..."
  rm -rf "$VENV"
  if ! "$SYSTEM_PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    version=$("$SYSTEM_PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    say "Python $version cannot make a virtual environment (the venv package is missing)."
    apt_install "python$version-venv"
    "$SYSTEM_PYTHON" -m venv "$VENV"
  fi
  PYTHON="$VENV/bin/python"
fi

"$PYTHON" -m installer.ensure_packages
exec "$PYTHON" -m installer "$@"
