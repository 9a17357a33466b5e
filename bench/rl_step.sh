#!/usr/bin/env bash
# Side by side on this machine, in one run: flywheel's RL step, training
# step, n=8 sampling and one-stream decode against the same work in PyTorch
# (Debian python3-torch), with PyTorch
# configured fairly: 2 threads, OMP_WAIT_POLICY=PASSIVE (without it OpenMP
# spins on 2 cores and PyTorch looks ~8x slower than it is), logits only
# where the loss needs them. Prints each side and the ratios.
#
#   bash bench/rl_step.sh            (apt-get install -y python3-torch first)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c 'import torch' 2>/dev/null || {
	echo "PyTorch missing: apt-get install -y python3-torch" >&2
	exit 1
}
export OMP_WAIT_POLICY=PASSIVE
# Debian's OpenBLAS 0.3.21 does not recognise this VM's CPU and falls back to SSE3 ("Prescott")
# kernels, which slows PyTorch's BLAS calls several-fold; point it at the CPU's real kernel set
# (checked to compute correct products here) so PyTorch runs as fast as it can.
# Only PyTorch's processes get it: flywheel picks its kernels itself, as it does for its users.
torch_core="${OPENBLAS_CORETYPE:-}"
if [ -z "$torch_core" ]; then
	if grep -qw avx512f /proc/cpuinfo; then torch_core=SkylakeX
	elif grep -qw avx2 /proc/cpuinfo; then torch_core=Haswell
	fi
fi
py() { OPENBLAS_CORETYPE="$torch_core" /usr/bin/python3 "$@"; }
go test -c -o /tmp/flywheel-train.test ./internal/train >/dev/null
go test -c -o /tmp/flywheel-engine.test ./internal/engine >/dev/null

echo "== PyTorch with OPENBLAS_CORETYPE=${torch_core:-unset}; flywheel with its own choice of kernels"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
# both ways of training the group: as a prefix tree (what the trainer does) and as eight full
# sequences (what the PyTorch step does), so the ratio of the engine alone is printed too
fw_rl_all=$(cd internal/train && /tmp/flywheel-train.test -test.run '^$' -test.bench 'RLStepSmolLM2_8x544' -test.benchtime 2x -test.timeout 30m | grep -E '^Benchmark')
fw_rl=$(grep shared-prefix <<<"$fw_rl_all")
fw_rl_full=$(grep /full <<<"$fw_rl_all")
echo "flywheel RL step:    $fw_rl"
echo "flywheel RL step, full sequences: $fw_rl_full"
pt_rl=$(py bench/torch_rl_step.py 2 2)
echo "PyTorch  RL step:    $pt_rl"
fw_tr=$(cd internal/train && /tmp/flywheel-train.test -test.run '^$' -test.bench 'TrainStepSmolLM2_135M_4x256$' -test.benchtime 2x -test.timeout 30m | grep -E '^Benchmark')
echo "flywheel 4x256 step: $fw_tr"
pt_tr=$(py internal/train/testdata/torch_bench.py smol 2 2)
echo "PyTorch  4x256 step: $pt_tr"

fw_n8=$(cd internal/engine && /tmp/flywheel-engine.test -test.run '^$' -test.bench 'SampleN8_480x64' -test.benchtime 2x | grep -E '^Benchmark')
echo "flywheel n=8 x 64:   $fw_n8"
pt_n8=$(py bench/torch_generate.py n8 2)
echo "PyTorch  n=8 x 64:   $pt_n8"
fw_one=$(cd internal/engine && /tmp/flywheel-engine.test -test.run '^$' -test.bench 'SampleOne128|DecodeVsBandwidth135M' -test.benchtime 3x | grep -E '^Benchmark')
echo "flywheel one stream: $fw_one"
pt_one=$(py bench/torch_generate.py one 2)
echo "PyTorch  one stream: $pt_one"

field() { grep -oE "[0-9.]+ $1" <<<"$2" | head -1 | cut -d' ' -f1; }
pyfield() { grep -oE "$1=[0-9.]+" <<<"$2" | cut -d= -f2; }
a=$(field 's/step' "$fw_rl"); b=$(pyfield 'wall_s/step' "$pt_rl")
echo "RL step (8 x (480+64)): flywheel ${a}s, PyTorch ${b}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 's/step' "$fw_rl_full")
echo "RL step trained as 8 full sequences (no shared prefix, as PyTorch does): flywheel ${a}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 's/step' "$fw_tr"); b=$(pyfield 'wall_s/step' "$pt_tr")
echo "Training step (4 x 256): flywheel ${a}s, PyTorch ${b}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 'peakRSS-MiB' "$fw_rl"); b=$(pyfield 'peakRSS_MiB' "$pt_rl")
echo "RL step peak RSS: flywheel ${a} MiB, PyTorch ${b} MiB"
a=$(field 's/request' "$fw_n8"); b=$(pyfield 'wall_s' "$pt_n8")
echo "Sampling n=8 x 64 on a 480-token prompt: flywheel ${a}s, PyTorch ${b}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 'tok/s' "$(grep SampleOne <<<"$fw_one")"); b=$(pyfield 'tok/s' "$pt_one"); l=$(field 'limit-tok/s' "$fw_one")
echo "One stream, 128 tokens: flywheel ${a} tok/s, PyTorch ${b} tok/s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}')x; bandwidth limit ${l} tok/s (flywheel at $(awk -v a="$a" -v l="$l" 'BEGIN{printf "%.2f", a/l}') of it)"
