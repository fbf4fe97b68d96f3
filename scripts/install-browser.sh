#!/usr/bin/env bash
# Installs Debian's headless Chromium and its WebDriver for the dashboard browser tests.
# Idempotent: does nothing when both are already on PATH. Needs root (or sudo) for apt-get.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then SUDO="sudo -n"; else
        echo "install-browser: not root and no sudo; cannot install chromium" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
have chromium && have chromedriver
