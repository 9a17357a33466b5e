#!/usr/bin/env python3
"""flywheel's side of the race: the RL loop over HTTP, as ART drives it.

Registers a model on a base model (POST /v1/preview/models, LoRA rank and
targets given), then per step: samples one group of --group-size completions
per prompt at temperature 1 with logprobs from the latest checkpoint
(POST /v1/chat/completions, n, logprobs, the model named
entity/project/name:stepN), scores them with task.reward, posts the groups as
an RL training job (POST /v1/preview/training-jobs) and polls it until it
ends. Every --eval-every steps (and at step 0) it evaluates greedy accuracy
on the held-out set and logs it to the model (POST /v1/preview/models/{id}/log,
split "val": the dashboard's val/reward chart is the eval curve; the
training jobs' reward is its train/reward chart).

Writes a JSON log (--out) of per-step reward, eval accuracy, sampling and
training seconds and wall-clock, and prints a line per step. Standard library
only (urllib, threads), so it runs on any Python 3.

    python3 bench/race/race_client.py --url http://127.0.0.1:8080 --api-key KEY \
        --base-model SmolLM2-135M-Instruct.Q4_1.gguf --steps 20 --out fw.json
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402


class Client:
    def __init__(self, url, key):
        self.url, self.key = url.rstrip("/"), key

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self.key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise SystemExit(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}")


def peak_rss_mib(pid):
    """VmHWM of pid (the server's peak resident memory), in MiB; None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("FLYWHEEL_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--api-key", default=os.environ.get("FLYWHEEL_API_KEY"))
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=8, help="prompts (trajectory groups) per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=task.MAX_TOKENS)
    ap.add_argument("--learning-rate", type=float, default=None)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-targets", default=",".join(task.LORA_TARGETS))
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-size", type=int, default=task.EVAL_SIZE)
    ap.add_argument("--seed", type=int, default=0, help="data order and sampling seed")
    ap.add_argument("--server-pid", type=int, default=None, help="read the server's peak RSS from /proc")
    ap.add_argument("--out", default=None, help="JSON log")
    a = ap.parse_args()
    if not a.api_key:
        raise SystemExit("no API key: --api-key or FLYWHEEL_API_KEY")
    c = Client(a.url, a.api_key)
    train = task.train_order(a.seed)
    evals = task.items("eval")[: a.eval_size]
    name = a.name or f"race-{int(time.time())}-s{a.seed}"
    m = c.call("POST", "/v1/preview/models", {
        "project": "race", "name": name, "base_model": a.base_model,
        "lora": {"rank": a.lora_rank, "alpha": a.lora_alpha, "target_modules": a.lora_targets.split(",")}})
    full = f"{m['entity']}/{m['project']}/{m['name']}"
    print(f"model {full} ({m['id']}) on {a.base_model}", flush=True)
    pool = ThreadPoolExecutor(max(a.groups, 16))
    log = {"side": "flywheel", "args": vars(a), "steps": [], "evals": []}
    t0 = time.monotonic()

    def evaluate(step):
        ts = time.monotonic()

        def one(it):
            r = c.call("POST", "/v1/chat/completions", {
                "model": f"{full}:step{step}", "messages": task.messages(it),
                "max_tokens": a.max_tokens, "temperature": 0})
            return r["choices"][0]["message"]["content"]
        replies = list(pool.map(one, evals))
        rs = [task.reward(t, it) for t, it in zip(replies, evals)]
        acc = sum(rs) / len(rs)
        # the eval set as the "val" split of this step: the dashboard charts val/reward
        c.call("POST", f"/v1/preview/models/{m['id']}/log", {"split": "val", "trajectory_groups": [
            {"trajectories": [{"messages_and_choices": task.messages(it) + [{"role": "assistant", "content": t}],
                               "reward": r}]} for it, t, r in zip(evals, replies, rs)]})
        e = {"step": step, "accuracy": acc, "eval_s": time.monotonic() - ts,
             "wall_s": t0_train[0], "examples": replies[:3]}
        log["evals"].append(e)
        print(f"eval step {step}: accuracy {acc:.3f} ({time.monotonic() - ts:.1f}s) e.g. {replies[:3]!r}", flush=True)

    t0_train = [0.0]  # wall-clock spent training so far (sampling + jobs), eval excluded
    evaluate(0)
    for step in range(a.steps):
        ts = time.monotonic()
        prompts = [train[(step * a.groups + g) % len(train)] for g in range(a.groups)]

        # Choice i of a request seeded s samples with seed s+i (as vLLM does), so the requests'
        # seeds are n apart: consecutive seeds would give all groups of a step the same few random
        # streams, and the 64 samples of a step far fewer independent ones.
        def sample(gi):
            it = prompts[gi]
            r = c.call("POST", "/v1/chat/completions", {
                "model": f"{full}:step{step}", "messages": task.messages(it), "n": a.group_size,
                "max_tokens": a.max_tokens, "temperature": 1, "logprobs": True,
                "seed": a.seed * 1_000_003 + (step * a.groups + gi) * a.group_size})
            return r["choices"]
        groups = list(pool.map(sample, range(a.groups)))
        sample_s = time.monotonic() - ts
        tgs, rewards = [], []
        for it, choices in zip(prompts, groups):
            trajs = []
            for ch in choices:
                r = task.reward(ch["message"]["content"], it)
                rewards.append(r)
                trajs.append({"messages_and_choices": task.messages(it) + [ch], "reward": r})
            tgs.append({"trajectories": trajs})
        tt = time.monotonic()
        body = {"model_id": m["id"], "trajectory_groups": tgs}
        if a.learning_rate is not None:
            body["experimental_config"] = {"learning_rate": a.learning_rate}
        job = c.call("POST", "/v1/preview/training-jobs", body)
        while True:
            j = c.call("GET", f"/v1/preview/training-jobs/{job['id']}")
            if j["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.05)
        if j["status"] != "COMPLETED":
            raise SystemExit(f"training job {job['id']} {j['status']}: {j.get('error_message')}")
        train_s = time.monotonic() - tt
        t0_train[0] += time.monotonic() - ts
        mean = sum(rewards) / len(rewards)
        log["steps"].append({"step": step + 1, "reward": mean, "sample_s": sample_s, "train_s": train_s,
                             "wall_s": t0_train[0]})
        print(f"step {step + 1}: reward {mean:.3f} sample {sample_s:.1f}s train {train_s:.1f}s "
              f"wall {t0_train[0]:.1f}s", flush=True)
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            evaluate(step + 1)
    if a.server_pid:
        log["peak_rss_mib"] = peak_rss_mib(a.server_pid)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(log, f, indent=1)


if __name__ == "__main__":
    main()
