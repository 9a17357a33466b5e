#!/usr/bin/env bash
# Weave's Python SDK and OpenAI's Python SDK (`weave` and `openai` from PyPI, unmodified, pinned
# with every dependency by clients/weave-python/requirements.txt) against the built binary:
# clients/weave-python/check.py twice, on the embedded SQLite and on the PostgreSQL server of
# $FLYWHEEL_TEST_POSTGRES (a fresh database of it), then clients/openai-python/check.py. Each
# check starts `flywheel serve` on a loopback port with a temp data dir and exits non-zero on any
# mismatch. The venv is cached under ${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci keyed by the
# lock's hash. Called by .ci/run; runs alone too (needs Go, and PyPI once per lock; without
# FLYWHEEL_TEST_POSTGRES the PostgreSQL run is skipped, saying so).
set -euo pipefail
. "$(dirname "$0")/pyvenv.sh"
cd "$(dirname "$0")/.."

py=""
for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
        "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        py="$(command -v "$cand")"
        break
    fi
done
if [ -z "$py" ]; then
    echo "the Python SDK checks need Python >= 3.10 with venv"
    exit 1
fi
echo "Python: $py ($("$py" -V 2>&1))"

req=clients/weave-python/requirements.txt
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
venv="$(ci_venv "$py" "$req" "$cache" python-sdks)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
go build -o "$work/flywheel" ./cmd/flywheel
mkdir -p "$work/tmp"
run() { (cd "$work" && env -u WANDB_API_KEY -u WANDB_BASE_URL -u WF_TRACE_SERVER_URL -u OPENAI_API_KEY \
    -u OPENAI_BASE_URL PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TMPDIR="$work/tmp" timeout 240 "$venv/bin/python" "$@" "$work/flywheel"); }

echo "-- Weave Python SDK on SQLite"
run "$OLDPWD/clients/weave-python/check.py"
if [ -n "${FLYWHEEL_TEST_POSTGRES:-}" ]; then
    echo "-- Weave Python SDK on PostgreSQL"
    psql -q "$FLYWHEEL_TEST_POSTGRES" -c 'DROP DATABASE IF EXISTS weave_python_check' -c 'CREATE DATABASE weave_python_check'
    FLYWHEEL_DATABASE="$(echo "$FLYWHEEL_TEST_POSTGRES" | sed 's#/postgres?#/weave_python_check?#')" \
        run "$OLDPWD/clients/weave-python/check.py"
else
    echo "-- FLYWHEEL_TEST_POSTGRES is not set: the PostgreSQL run is skipped"
fi
if [ -f clients/openai-python/check.py ]; then
    echo "-- OpenAI Python SDK"
    run "$OLDPWD/clients/openai-python/check.py"
fi
