#!/usr/bin/env bash
# The short chaos soak (internal/chaos, cmd/flywheel-soak): 3 `flywheel serve`
# nodes on one PostgreSQL server and one data dir, under mixed load and seeded
# faults (kill -9, SIGTERM, PostgreSQL restarts fast and immediate, a node
# paused past its lease, clients leaving mid-stream), then the invariants.
#
#   .ci/soak.sh [SEED [DURATION]]   default seed 1, 3m
#
# SOAK_KEEP_LOGS=DIR keeps the nodes' and PostgreSQL's whole logs in DIR when
# the soak fails (the work folder is removed).
#
# Starts its own PostgreSQL server (.ci/postgres.sh) so that it may restart it.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-1}
duration=${2:-3m}
work="$(mktemp -d)"
chmod o+x "$work"
trap '.ci/postgres.sh stop "$work/pg" || true; rm -rf "$work"' EXIT
dsn="$(.ci/postgres.sh start "$work/pg")"
psql -q "$dsn" -c 'CREATE DATABASE soak'
db="$(echo "$dsn" | sed 's#/postgres?#/soak?#')"
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
restart="$pgbin/pg_ctl -D $work/pg/data -l $work/pg/server.log -m {mode} -w restart"
if [ "$(id -u)" = 0 ]; then restart="runuser -u postgres -- $restart"; fi
go build -o "$work/flywheel" ./cmd/flywheel
go build -o "$work/flywheel-soak" ./cmd/flywheel-soak
mkdir "$work/run"
if ! "$work/flywheel-soak" --bin "$work/flywheel" --database "$db" --dir "$work/run" \
    --duration "$duration" --seed "$seed" --pg-restart "$restart"; then
    echo "soak failed (seed $seed); the nodes' logs:"
    tail -n 40 "$work"/run/node*.log
    if [ -n "${SOAK_KEEP_LOGS:-}" ]; then # a folder to keep the nodes' whole logs in
        mkdir -p "$SOAK_KEEP_LOGS" && cp "$work"/run/node*.log "$work"/pg/server.log "$SOAK_KEEP_LOGS"/
        echo "the nodes' and PostgreSQL's logs are in $SOAK_KEEP_LOGS"
    fi
    exit 1
fi
