#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python packages (filled in per part).
set -euo pipefail

# PostgreSQL for tests/db (AUTOTUNE_TEST_PG_URL, default postgresql+psycopg://postgres@127.0.0.1:54329/autotune_test).
# A failure here is not fatal: the postgres tests then skip, or fail when CI=true.
bash "$(dirname "$0")/start-postgres.sh" >/dev/null || echo "test-services: PostgreSQL not started; postgres tests will skip (fail under CI=true)" >&2

# Headless Chromium + chromedriver for tests/service/test_service_browser.py (Debian packages).
# A failure here is not fatal: the browser test then skips, or fails when CI=true.
bash "$(dirname "$0")/install-browser.sh" >/dev/null || echo "test-services: chromium not installed; browser tests will skip (fail under CI=true)" >&2
