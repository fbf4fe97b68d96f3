#!/usr/bin/env bash
# Installs a Compose client (Debian's docker-compose) when neither `docker compose` nor
# `docker-compose` answers: tests/test_compose.py validates docker-compose.yml with it.
# No Docker engine is needed for `config`.
set -euo pipefail
if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
    echo "install-compose: not root; install docker-compose by hand" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq docker-compose >&2
