#!/usr/bin/env bash
# Start a private local PostgreSQL server for tests/system/test_postgres.py.
#
#   .ci/postgres.sh            # install (Debian package, needs root) if missing, start, create the db
#   .ci/postgres.sh stop       # stop it again
#   .ci/postgres.sh status     # exit 0 if it is running (installs and starts nothing)
#
# Its own data directory ($SYNTHLAB_PG_DIR, default /tmp/synthlab-pg) and port
# ($SYNTHLAB_PG_PORT, default 54329): the machine's own clusters are never touched. Trust
# authentication on 127.0.0.1 only. Idempotent. The last stdout line is the storage URL:
#   postgresql://synthlab@127.0.0.1:54329/synthlab
# Sourced (`source .ci/postgres.sh`), it exports SYNTHLAB_PG_URL instead and returns 1 on
# failure without exiting the caller; a server it started is stopped when the calling shell
# exits (an EXIT trap, unless the caller has one). The test reads $SYNTHLAB_PG_URL when set,
# otherwise runs this script itself; a pytest session stops a server it started
# (tests/conftest.py).

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # sourced (e.g. by .ci/run): run as a child, export SYNTHLAB_PG_URL, never exit the caller
    _synthlab_pg_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
    _synthlab_pg_was_running=0
    bash "$_synthlab_pg_script" status && _synthlab_pg_was_running=1
    if SYNTHLAB_PG_URL="$(bash "$_synthlab_pg_script" "$@" | tail -n 1)" && [[ "$SYNTHLAB_PG_URL" == postgresql://* ]]; then
        export SYNTHLAB_PG_URL
        if [[ "$_synthlab_pg_was_running" == 0 && -z "$(trap -p EXIT)" ]]; then
            trap "bash '$_synthlab_pg_script' stop" EXIT
        fi
        return 0
    fi
    unset SYNTHLAB_PG_URL
    return 1
fi

set -euo pipefail

PORT="${SYNTHLAB_PG_PORT:-54329}"
DIR="${SYNTHLAB_PG_DIR:-/tmp/synthlab-pg}"
DB_USER=synthlab
DB_NAME=synthlab

find_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
    done
    command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
    return 1
}

BIN="$(find_bin || true)"
if [ "${1:-start}" = status ]; then
    pid="$(head -n 1 "$DIR/data/postmaster.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && exit 0
    exit 1
fi
if [ "${1:-start}" = stop ] && [ -z "$BIN" ]; then
    exit 0  # nothing installed: nothing runs
fi
if [ -z "$BIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "postgres.sh: PostgreSQL is not installed and installing it needs root (apt-get install postgresql)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
    BIN="$(find_bin)"
fi

# the server refuses to run as root: run it as the `postgres` user when we are root
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    AS=(runuser -u postgres --)
    mkdir -p "$DIR" && chown postgres "$DIR" && chmod 700 "$DIR"
else
    AS=()
    mkdir -p "$DIR" && chmod 700 "$DIR"
fi

if [ "${1:-start}" = stop ]; then
    "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true
    exit 0
fi

if [ ! -f "$DIR/data/PG_VERSION" ]; then
    "${AS[@]}" "$BIN/initdb" -D "$DIR/data" -U "$DB_USER" -A trust -E UTF8 >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; exit 1; }
fi
if ! "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
    "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null \
        || { tail -20 "$DIR/server.log" >&2; exit 1; }
fi
if ! "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U "$DB_USER" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" | grep -q 1; then
    "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U "$DB_USER" "$DB_NAME"
fi
echo "postgresql://$DB_USER@127.0.0.1:$PORT/$DB_NAME"
