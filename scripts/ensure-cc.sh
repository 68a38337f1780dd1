#!/usr/bin/env bash
# The install builds one small C library (setup.py: analysis/diagnosis/_sweep.c, the idle painting's walk):
# it needs a C compiler, Debian's gcc when none is there.
set -euo pipefail
if ! command -v "${CC:-cc}" >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "installing gcc from Debian packages"
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc libc6-dev >/dev/null
fi
