#!/usr/bin/env bash
# flywheel's RL steps on the real model against PyTorch + PEFT (issue 23): a flywheel server trains
# a fresh LoRA model (r=16, alpha=32, the seven projections) on SmolLM2-135M-Instruct.Q4_1.gguf for
# STEPS RL jobs, each on 8 prompts of bench/race/task.py x 8 samples at temperature 1 from the latest
# step, and bench/race/grad_check.py recomputes every job with PyTorch on the same file from
# flywheel's adapter and optimizer state of the step the job started from: the loss, the LoRA
# gradient and the AdamW step. Needs the venv bench/race/run.sh makes (torch, peft, transformers,
# gguf) and the model file as run.sh finds it.
#
#   bash bench/race/grad_check.sh [STEPS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
py="$cache/venv-trl/bin/python"
gguf="${FLYWHEEL_RACE_GGUF:-$cache/race-model/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -x "$py" ] && [ -f "$gguf" ] || { echo "grad_check: run bench/race/run.sh once (venv $py, model $gguf)" >&2; exit 1; }
work="$(mktemp -d)"
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/models" && ln -s "$(readlink -f "$gguf")" "$work/models/"
go build -o "$work/flywheel" ./cmd/flywheel
key=fw_grad_check_0123456789abcdefghijk
. bench/serve_lib.sh
FLYWHEEL_BOOTSTRAP_API_KEY=$key flywheel_serve "$work/flywheel" "$work/serve.log" --data-dir "$work/data" \
	--models-dir "$work/models"
python3 - "http://127.0.0.1:$port" "$key" "$(basename "$gguf")" "$work" "$steps" <<'PY'
import json, sys, time, urllib.request
sys.path.insert(0, "bench/race")
import task
url, key, base, work = sys.argv[1:5]
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
m = call("POST", "/v1/preview/models", {"project": "grad", "name": "check", "base_model": base,
    "lora": {"rank": 16, "alpha": 32, "target_modules": task.LORA_TARGETS}})
full = f"{m['entity']}/{m['project']}/{m['name']}"
steps = int(sys.argv[5])
losses = []
for k in range(1, steps + 1):
    tgs = []
    for gi, it in enumerate(task.train_order(0)[(k - 1) * 8:k * 8]):
        r = call("POST", "/v1/chat/completions", {"model": f"{full}:step{k - 1}", "messages": task.messages(it),
            "n": 8, "max_tokens": task.MAX_TOKENS, "temperature": 1, "logprobs": True,
            "return_tokens_as_token_ids": True, "seed": 1000 + 64 * k + 8 * gi})
        tgs.append({"trajectories": [{"messages_and_choices": task.messages(it) + [ch],
                                      "reward": task.reward(ch["message"]["content"], it)} for ch in r["choices"]]})
    json.dump(tgs, open(f"{work}/tgs-{k}.json", "w"))
    job = call("POST", "/v1/preview/training-jobs", {"model_id": m["id"], "trajectory_groups": tgs,
                                                     "experimental_config": {"learning_rate": 5e-4}})
    while (j := call("GET", f"/v1/preview/training-jobs/{job['id']}"))["status"] not in ("COMPLETED", "FAILED", "CANCELLED"):
        time.sleep(0.1)
    if j["status"] != "COMPLETED":
        sys.exit(f"job {j['status']}: {j.get('error_message')}")
    gs = [e["data"] for e in call("GET", f"/v1/preview/training-jobs/{job['id']}/events")["data"] if e["type"] == "gradient_step"]
    if len(gs) != 1:
        sys.exit(f"want one gradient step per job, got {gs}")
    print(f"job {k}: reward {j.get('reward')} grad_norm {gs[0]['grad_norm']:.4f}")
    losses.append(gs[0]["loss"])
json.dump(losses, open(f"{work}/jobs.json", "w"))
open(f"{work}/model", "w").write(m["id"] + "\n")
PY
read -r id <"$work/model"
"$py" bench/race/grad_check.py "$gguf" "$work/data/checkpoints/$id" "$work" 2>&1 | grep -v -i -E 'warn|loading weights|de-quantizing'
