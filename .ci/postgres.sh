#!/usr/bin/env bash
# Starts (or stops) a throwaway PostgreSQL server on loopback for the tests.
#
#   .ci/postgres.sh start DIR   initdb in DIR, start on 127.0.0.1:${PGTEST_PORT:-the first free port from 55432}, print the DSN
#   .ci/postgres.sh stop DIR    stop it (DIR may then be removed)
#
# Tests read the DSN from FLYWHEEL_TEST_POSTGRES (internal/pgtest makes one fresh
# database per test). Installs Debian's postgresql when it is missing and we are root.
# As root the server runs as the postgres user (PostgreSQL refuses to run as root).
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?data directory}
port=${PGTEST_PORT:-}

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
    if [ -z "$(bindir)" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "installing postgresql" >&2
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
        else
            echo "PostgreSQL is not installed (apt-get install postgresql)" >&2
            exit 1
        fi
    fi
    bin="$(bindir)"
    if [ -z "$port" ]; then
        # the first free port from 55432 (another server, a developer's, may hold one)
        port=55432
        while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$dir"
        chmod o+x "$(dirname "$dir")" # let the postgres user reach a mktemp -d folder
    fi
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 >/dev/null
    # fsync off: a test server holds nothing worth a crash-safe disk write.
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=300" start >&2
    echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
    ;;
stop)
    bin="$(bindir)"
    [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
    ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
