#!/usr/bin/env bash
# One stream over HTTP from a trained LoRA checkpoint against the engine's
# own decode of the same weights, on the real binary (issue 24 item 2;
# results in docs/benchmarks/). BenchmarkHTTPStreamFromCheckpoint
# (cmd/flywheel/httpstream_bench_test.go) builds ./cmd/flywheel, writes a
# SmolLM2-135M-shaped model folder (random float32 weights, GPT-2's real
# tokenizer), runs `flywheel serve` on a temp data dir (SQLite store, call
# store on), creates a model with LoRA rank 16 on every module, trains it one
# RL step to get checkpoint step 1, then in ROUNDS rounds streams 128 tokens
# (temperature 1, logprobs on) from the checkpoint and from the base model,
# each next to the engine's decode of the same model and adapter, alternating
# which goes first, and once more with both running at the same time. It
# prints each round, the mean tok/s of each side, the median HTTP/engine
# ratios (one after the other; at the same time, which compares even when
# other work on the machine moves the wall times), the CPU milliseconds per
# token of each side, the CPU model and the load.
#
#   ROUNDS=6 bash bench/http_stream.sh
#   FLYWHEEL_BIN=/path/to/flywheel bash bench/http_stream.sh   # a given build
#   FLYWHEEL_HTTP_GGUF=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf bash bench/http_stream.sh   # a GGUF base
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6}
echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), load before $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(go test ./cmd/flywheel -run '^$' -bench 'BenchmarkHTTPStreamFromCheckpoint' -benchtime "${ROUNDS}x" -timeout 60m -v 2>&1) || {
	echo "$out" >&2
	exit 1
}
grep -E 'kernels:|round [0-9]+ |CPU of the client' <<<"$out" | sed 's/^ *[a-z_]*\.go:[0-9]*: //'
line=$(grep -E '^BenchmarkHTTPStreamFromCheckpoint/rounds' <<<"$out")
metric() { awk -v m="$1" '{ for (i = 2; i <= NF; i++) if ($i == m) { print $(i - 1); exit } }' <<<"$line"; }
echo "$line"
for side in lora base; do
	printf '%s: HTTP %s tok/s (wall %s, first token %s ms), engine %s tok/s, median ratio %sx; at the same time %sx; CPU ms/token HTTP %s, engine %s\n' \
		"$side" "$(metric "$side-http-tok/s")" "$(metric "$side-http-wall-tok/s")" "$(metric "$side-ttft-ms")" \
		"$(metric "$side-engine-tok/s")" "$(metric "$side-http/engine")" "$(metric "$side-http/engine-together")" \
		"$(metric "$side-http-cpu-ms/tok")" "$(metric "$side-engine-cpu-ms/tok")"
done
echo "== load after $(cut -d' ' -f1-3 /proc/loadavg)"
