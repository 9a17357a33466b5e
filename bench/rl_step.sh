#!/usr/bin/env bash
# Side by side on this machine, in one run: flywheel's RL step and training
# step against the same steps in PyTorch (Debian python3-torch), with PyTorch
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
go test -c -o /tmp/flywheel-train.test ./internal/train >/dev/null

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
fw_rl=$(cd internal/train && /tmp/flywheel-train.test -test.run '^$' -test.bench 'RLStepSmolLM2_8x544/shared-prefix' -test.benchtime 2x -test.timeout 30m | grep -E '^Benchmark')
echo "flywheel RL step:    $fw_rl"
pt_rl=$(/usr/bin/python3 bench/torch_rl_step.py 2 2)
echo "PyTorch  RL step:    $pt_rl"
fw_tr=$(cd internal/train && /tmp/flywheel-train.test -test.run '^$' -test.bench 'TrainStepSmolLM2_135M_4x256$' -test.benchtime 2x -test.timeout 30m | grep -E '^Benchmark')
echo "flywheel 4x256 step: $fw_tr"
pt_tr=$(/usr/bin/python3 internal/train/testdata/torch_bench.py smol 2 2)
echo "PyTorch  4x256 step: $pt_tr"

field() { grep -oE "[0-9.]+ $1" <<<"$2" | head -1 | cut -d' ' -f1; }
pyfield() { grep -oE "$1=[0-9.]+" <<<"$2" | cut -d= -f2; }
a=$(field 's/step' "$fw_rl"); b=$(pyfield 'wall_s/step' "$pt_rl")
echo "RL step (8 x (480+64)): flywheel ${a}s, PyTorch ${b}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 's/step' "$fw_tr"); b=$(pyfield 'wall_s/step' "$pt_tr")
echo "Training step (4 x 256): flywheel ${a}s, PyTorch ${b}s, speed-up $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')x"
a=$(field 'peakRSS-MiB' "$fw_rl"); b=$(pyfield 'peakRSS_MiB' "$pt_rl")
echo "RL step peak RSS: flywheel ${a} MiB, PyTorch ${b} MiB"
