#!/usr/bin/env bash
# flywheel's RL gradient on the real model against PyTorch + PEFT (issue 23): a flywheel server
# samples 8 prompts of bench/race/task.py x 8 at temperature 1 from a fresh LoRA model (r=16,
# alpha=32, the seven projections) on SmolLM2-135M-Instruct.Q4_1.gguf, trains one RL job on them,
# and bench/race/grad_check.py recomputes that step's loss and LoRA gradient with PyTorch on the
# same file and flywheel's step-0 adapter. Needs the venv bench/race/run.sh makes (torch, peft,
# transformers, gguf) and the model file as run.sh finds it.
#
#   bash bench/race/grad_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flywheel-ci"
py="$cache/venv-trl/bin/python"
gguf="${FLYWHEEL_RACE_GGUF:-$cache/race-model/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -x "$py" ] && [ -f "$gguf" ] || { echo "grad_check: run bench/race/run.sh once (venv $py, model $gguf)" >&2; exit 1; }
work="$(mktemp -d)"
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/models" && ln -s "$(readlink -f "$gguf")" "$work/models/"
go build -o "$work/flywheel" ./cmd/flywheel
key=fw_grad_check_0123456789abcdefghijk port=$((20000 + RANDOM % 20000))
FLYWHEEL_BOOTSTRAP_API_KEY=$key "$work/flywheel" serve --addr "127.0.0.1:$port" --data-dir "$work/data" \
	--models-dir "$work/models" >"$work/serve.log" 2>&1 &
srv=$!
for _ in $(seq 150); do curl -sf "127.0.0.1:$port/v1/health" >/dev/null && break; sleep 0.2; done
python3 - "http://127.0.0.1:$port" "$key" "$(basename "$gguf")" "$work" <<'PY'
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
tgs = []
for gi, it in enumerate(task.train_order(0)[:8]):
    r = call("POST", "/v1/chat/completions", {"model": f"{full}:step0", "messages": task.messages(it), "n": 8,
        "max_tokens": task.MAX_TOKENS, "temperature": 1, "logprobs": True, "return_tokens_as_token_ids": True,
        "seed": 1000 + gi})
    tgs.append({"trajectories": [{"messages_and_choices": task.messages(it) + [ch],
                                  "reward": task.reward(ch["message"]["content"], it)} for ch in r["choices"]]})
json.dump(tgs, open(f"{work}/tgs.json", "w"))
job = call("POST", "/v1/preview/training-jobs", {"model_id": m["id"], "trajectory_groups": tgs,
                                                 "experimental_config": {"learning_rate": 5e-4}})
while (j := call("GET", f"/v1/preview/training-jobs/{job['id']}"))["status"] not in ("COMPLETED", "FAILED", "CANCELLED"):
    time.sleep(0.1)
if j["status"] != "COMPLETED":
    sys.exit(f"job {j['status']}: {j.get('error_message')}")
steps = [e["data"] for e in call("GET", f"/v1/preview/training-jobs/{job['id']}/events")["data"] if e["type"] == "gradient_step"]
if len(steps) != 1 or steps[0]["grad_norm"] >= 1:
    sys.exit(f"want one gradient step below the clip, got {steps}")
open(f"{work}/model", "w").write(f"{m['id']} {steps[0]['loss']!r}\n")
PY
read -r id loss <"$work/model"
"$py" bench/race/grad_check.py "$gguf" "$work/data/checkpoints/$id" "$work/tgs.json" "$loss" 2>&1 | grep -v -i -E 'warn|loading weights|de-quantizing'
