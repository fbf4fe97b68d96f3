#!/usr/bin/env bash
# Starts a private PostgreSQL cluster for the test suite and prints its URL.
# Idempotent: installs PostgreSQL when missing (Debian), reuses a running cluster.
# Overridable: AUTOTUNE_PG_DIR (data dir), AUTOTUNE_PG_PORT, AUTOTUNE_PG_DB.
set -euo pipefail

PGDIR="${AUTOTUNE_PG_DIR:-/tmp/autotune-pg}"
PORT="${AUTOTUNE_PG_PORT:-54329}"
DB="${AUTOTUNE_PG_DB:-autotune_test}"
URL="postgresql+psycopg://postgres@127.0.0.1:${PORT}/${DB}"

log() { echo "start-postgres: $*" >&2; }

# Concurrent callers (parallel test runs) would race on initdb; serialize them.
exec 9>"${PGDIR%/}.lock"
flock 9

find_bindir() {
    # Newest installed major version wins; Debian puts server binaries off PATH.
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
        echo "$d"
    fi
}

BINDIR="$(find_bindir)"
if [[ -z "$BINDIR" ]]; then
    if [[ "$(id -u)" -ne 0 ]]; then
        log "PostgreSQL server binaries missing and not root: install 'postgresql' first"
        exit 1
    fi
    log "installing postgresql via apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # The package's own cluster is not used; only its binaries are.
    apt-get install -y -qq postgresql >&2
    BINDIR="$(find_bindir)"
    [[ -n "$BINDIR" ]] || { log "postgresql installed but initdb not found"; exit 1; }
fi

if [[ "$(id -u)" -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
    as_pg() { runuser -u postgres -- "$@"; }
else
    # Non-root: the cluster is owned by whoever runs this script.
    as_pg() { "$@"; }
fi

ready() { "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres; }

if ! ready; then
    if [[ ! -s "$PGDIR/PG_VERSION" ]]; then
        log "initdb in $PGDIR"
        rm -rf "$PGDIR"
        mkdir -p "$PGDIR"
        [[ "$(id -u)" -eq 0 ]] && chown postgres: "$PGDIR"
        chmod 700 "$PGDIR"
        as_pg "$BINDIR/initdb" -D "$PGDIR" -U postgres --auth=trust -E UTF8 --no-instructions >/dev/null
    fi
    # A stale pid file from a killed server (e.g. a machine restart) blocks startup.
    if [[ -f "$PGDIR/postmaster.pid" ]]; then
        pid="$(head -n 1 "$PGDIR/postmaster.pid")"
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PGDIR/postmaster.pid"
        fi
    fi
    log "starting server on 127.0.0.1:$PORT"
    # Socket dir inside the data dir: /var/run/postgresql may not exist or be writable.
    # The daemonized server must hold none of the descriptors above 2 it would inherit:
    # this script's lock (fd 9), a lock its caller took around the tests (flock), a pipe a
    # CI runner reads to its end; each would stay held for the server's whole life.
    ( for fd in /proc/"$BASHPID"/fd/*; do
          fd=${fd##*/}; [[ "$fd" -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null
      done
      as_pg "$BINDIR/pg_ctl" -D "$PGDIR" -l "$PGDIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGDIR -c fsync=off -c max_connections=200" \
        start >/dev/null ) || { log "server failed to start; tail of log:"; tail -n 20 "$PGDIR/server.log" >&2; exit 1; }
    for _ in $(seq 1 30); do ready && break; sleep 1; done
    ready || { log "server not accepting connections"; exit 1; }
fi

exists="$("$BINDIR/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '${DB}'")"
if [[ "$exists" != "1" ]]; then
    "$BINDIR/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB" 2>/dev/null || {
        # Lost a race with a concurrent caller: fine if the database now exists.
        exists="$("$BINDIR/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc \
            "SELECT 1 FROM pg_database WHERE datname = '${DB}'")"
        [[ "$exists" == "1" ]] || { log "could not create database $DB"; exit 1; }
    }
fi

echo "$URL"
