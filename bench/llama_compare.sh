#!/usr/bin/env bash
# Decode and prefill, flywheel against llama.cpp, in one run on this machine
# (issue 15; results in docs/benchmarks.md). Both run the SmolLM2-135M shape
# with random weights on 2 threads: flywheel in float32 and BF16
# (BenchmarkInference135M), llama.cpp on the same shape written as GGUF F32
# and F16 by bench/gguf_smollm2.py. The rounds alternate flywheel and
# llama.cpp so both see the same machine.
#
#   LLAMA=/path/to/llama.cpp ROUNDS=2 bash bench/llama_compare.sh
#
# LLAMA is a llama.cpp source tree built with
#   cmake -B build -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF
#   cmake --build build --target llama-bench llama-batched-bench
# Its gguf-py/ package writes the GGUF files (numpy from Debian's python3).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=${LLAMA:-/work/peer/llama.cpp}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-$(mktemp -d)}
for k in f32 f16; do
	if [ ! -s "$OUT/smol-$k.gguf" ]; then
		PYTHONPATH="$LLAMA/gguf-py" /usr/bin/python3 bench/gguf_smollm2.py "$OUT/smol-$k.gguf" "$k"
	fi
done
go test -c -o "$OUT/engine.test" ./internal/engine
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	echo "== round $r: flywheel ($(date -u +%H:%M:%S) UTC)"
	"$OUT/engine.test" -test.run '^$' -test.bench 'Inference135M' -test.benchtime 3x | grep -E '^Benchmark'
	echo "== round $r: llama.cpp ($(date -u +%H:%M:%S) UTC)"
	"$LLAMA/build/bin/llama-bench" -m "$OUT/smol-f32.gguf" -m "$OUT/smol-f16.gguf" -t 2 -p 512 -n 64 -r 3 2>/dev/null
	for k in f32 f16; do
		"$LLAMA/build/bin/llama-batched-bench" -m "$OUT/smol-$k.gguf" -t 2 -c 4096 -b 2048 -ub 512 \
			-npp 128 -ntg 32 -npl 1,8 2>/dev/null | grep -E '^\|' | sed "s/^/$k /"
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
