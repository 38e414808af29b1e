#!/usr/bin/env bash
# Installs Debian's Chromium for the page tests when /usr/bin/chromium is missing; Playwright (pip package) drives
# it through executable_path, so no browser is ever downloaded by Playwright itself.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "Installing Debian's chromium for the browser tests ..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version 2>/dev/null || true
