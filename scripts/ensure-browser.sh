#!/usr/bin/env bash
# Browser tests drive Debian's Chromium (Playwright cannot download browsers here).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "installing chromium from Debian packages"
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
