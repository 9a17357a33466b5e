#!/usr/bin/env bash
# OpenPipe ART (the `openpipe-art` package from PyPI, unmodified) against the built binary:
# for each clients/art-python/requirements-<version>.txt (a full pip lock; 0.5.17 and the
# newest release), a venv of Python >= 3.12 (ART's requires-python) cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci keyed by the lock's hash, then check.py, which
# starts `flywheel serve` on a loopback port with a temp data dir and drives ART's
# ServerlessBackend through an RL loop, SFT and the checkpoint/model lifecycle. Exits non-zero
# on any mismatch; every step is under a timeout and check.py stops its server however it ends.
# Called by .ci/run; runs alone too (needs Go, and PyPI once per lock).
set -euo pipefail
. "$(dirname "$0")/pyvenv.sh"
cd "$(dirname "$0")/.."

# A real 3.12+ interpreter: ART 0.5.23 has 3.12-only syntax (PEP 695) and its lock pins
# packages that need 3.12, so no --ignore-requires-python on 3.11 (docs/compatibility.md).
py=""
for cand in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
        "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        py="$(command -v "$cand")"
        break
    fi
done
if [ -z "$py" ]; then
    echo "ART needs Python >= 3.12 with venv (python3.12 on PATH, or pyenv install 3.12)"
    exit 1
fi
echo "Python: $py ($("$py" -V 2>&1))"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci/art-python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
go build -o "$work/flywheel" ./cmd/flywheel

for req in clients/art-python/requirements-*.txt; do
    name="$(basename "$req" .txt)"
    venv="$(ci_venv "$py" "$req" "$cache" "$name")"
    echo "-- $name"
    # No W&B, no hub: the serverless path must need neither. W&B's own hosts are never
    # tried: WANDB_BASE_URL is a closed loopback port here, and check.py points it at the
    # server (whose W&B artifact API model.train_sft uses, the one call it runs with
    # WANDB_MODE=online). The cwd is a temp dir so that ART's load_dotenv(), its .art/
    # defaults and wandb's run dir see nothing of the repo; TMPDIR too, so that even a
    # killed check leaves nothing outside $work.
    mkdir -p "$work/tmp"
    (cd "$work" && env -u WANDB_API_KEY -u OPENAI_API_KEY \
        WANDB_MODE=disabled WANDB_BASE_URL=http://127.0.0.1:9 WANDB_SILENT=true \
        WANDB_DIR="$work/tmp" WANDB_CONFIG_DIR="$work/tmp/wandb-config" WANDB_CACHE_DIR="$work/tmp/wandb-cache" \
        WANDB_DATA_DIR="$work/tmp/wandb-data" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        LITELLM_LOCAL_MODEL_COST_MAP=True TQDM_DISABLE=1 PYTHONUNBUFFERED=1 \
        FLYWHEEL_ART_CHECK_TIMEOUT=240 TMPDIR="$work/tmp" \
        timeout 300 "$venv/bin/python" "$OLDPWD/clients/art-python/check.py" "$work/flywheel" </dev/null)
done
