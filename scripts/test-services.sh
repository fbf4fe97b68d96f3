#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python packages (filled in per part).
set -euo pipefail
