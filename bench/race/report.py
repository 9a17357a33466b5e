#!/usr/bin/env python3
"""Reads race_client.py's and race_trl.py's JSON logs and writes the race's
side-by-side table (markdown, printed and spliced into docs/benchmarks/race.md
between the race markers) and the PNG plot (reward and eval accuracy against
step and against wall-clock).

    report.py fw.json trl.json --png docs/benchmarks/race.png --md docs/benchmarks/race.md --cpu "..." --cmd "..."
"""
import argparse
import json
import os
import re
import statistics


def first_common(fw, trl):
    """The first accuracy both sides reach (the smaller of their best after step 0, floored at
    above both bases), and the wall-clock at which each first reaches it."""
    target = min(max(e["accuracy"] for e in fw["evals"]), max(e["accuracy"] for e in trl["evals"]))
    base = max(fw["evals"][0]["accuracy"], trl["evals"][0]["accuracy"])
    if target <= base:
        return None, None, None

    def when(log):
        for e in log["evals"]:
            if e["step"] > 0 and e["accuracy"] >= target:
                return e["wall_s"], e["step"]
        return None
    return target, when(fw), when(trl)


def table(fw, trl):
    acc = lambda log: {e["step"]: e["accuracy"] for e in log["evals"]}  # noqa: E731
    fa, ta = acc(fw), acc(trl)
    rows = ["| step | flywheel eval accuracy | TRL eval accuracy |", "|---:|---:|---:|"]
    for s in sorted(set(fa) & set(ta)):
        rows.append(f"| {s} | {fa[s]:.3f} | {ta[s]:.3f} |")
    med = lambda log, k: statistics.median(x[k] for x in log["steps"])  # noqa: E731
    target, fwt, trt = first_common(fw, trl)
    out = "\n".join(rows) + "\n\n| | flywheel | TRL | ratio (TRL / flywheel) |\n|---|---:|---:|---:|\n"
    for name, k in (("sampling s/step (median)", "sample_s"), ("training s/step (median)", "train_s")):
        a, b = med(fw, k), med(trl, k)
        out += f"| {name} | {a:.2f} | {b:.2f} | {b / a:.1f}x |\n"
    a, b = fw["steps"][-1]["wall_s"], trl["steps"][-1]["wall_s"]
    out += f"| wall-clock of {len(fw['steps'])} steps, s (eval excluded) | {a:.0f} | {b:.0f} | {b / a:.1f}x |\n"
    if target is not None and fwt and trt:
        out += (f"| wall-clock to eval accuracy ≥ {target:.3f}, s (step) | {fwt[0]:.0f} ({fwt[1]}) | "
                f"{trt[0]:.0f} ({trt[1]}) | {trt[0] / fwt[0]:.1f}x |\n")
    else:
        out += "| wall-clock to a common accuracy | — | — | no accuracy above both bases reached by both |\n"
    pa, pb = fw.get("peak_rss_mib"), trl.get("peak_rss_mib")
    if pa and pb:
        out += f"| peak RSS, MiB (flywheel server / TRL process) | {pa:.0f} | {pb:.0f} | {pb / pa:.1f}x |\n"
    return out


def spread_table(pairs):
    """Eval accuracy at each step both sides evaluated, over the seeds' runs: mean and range per side,
    and whether flywheel's mean lies within TRL's range (the issue's "within the seed spread")."""
    if len(pairs) < 2:
        return ""
    acc = lambda log: {e["step"]: e["accuracy"] for e in log["evals"]}  # noqa: E731
    fws, trls = [acc(f) for f, _ in pairs], [acc(t) for _, t in pairs]
    steps = sorted(set.intersection(*(set(x) for x in fws + trls)))
    rows = [f"Over {len(pairs)} seeds (each side once per seed): held-out greedy accuracy, mean [min–max].\n",
            "| step | flywheel | TRL | flywheel mean within TRL's range |", "|---:|---:|---:|---|"]
    fmt = lambda v: f"{statistics.mean(v):.3f} [{min(v):.2f}–{max(v):.2f}]"  # noqa: E731
    for s in steps:
        f, t = [x[s] for x in fws], [x[s] for x in trls]
        m = statistics.mean(f)
        verdict = "yes" if min(t) <= m <= max(t) else ("above" if m > max(t) else "below")
        rows.append(f"| {s} | {fmt(f)} | {fmt(t)} | {verdict} |")
    return "\n".join(rows) + "\n"


def plot(fw, trl, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for log, color, name in ((fw, "tab:blue", "flywheel"), (trl, "tab:orange", "TRL GRPOTrainer")):
        st = [s["step"] for s in log["steps"]]
        rw = [s.get("reward") for s in log["steps"]]
        wall = [s["wall_s"] for s in log["steps"]]
        es = [e["step"] for e in log["evals"]]
        ea = [e["accuracy"] for e in log["evals"]]
        ew = [e["wall_s"] for e in log["evals"]]
        ax[0][0].plot(st, rw, color=color, label=name)
        ax[0][1].plot(wall, rw, color=color, label=name)
        ax[1][0].plot(es, ea, "o-", color=color, label=name)
        ax[1][1].plot(ew, ea, "o-", color=color, label=name)
    ax[0][0].set(title="train reward (mean of the step's samples)", xlabel="step")
    ax[0][1].set(title="train reward", xlabel="wall-clock s (eval excluded)")
    ax[1][0].set(title="held-out greedy accuracy", xlabel="step")
    ax[1][1].set(title="held-out greedy accuracy", xlabel="wall-clock s (eval excluded)")
    for a in ax.flat:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fw")
    ap.add_argument("trl")
    ap.add_argument("--seed-logs", nargs=2, action="append", default=[], metavar=("FW", "TRL"),
                    help="one seed's two logs; repeat per seed for the seed-spread table")
    ap.add_argument("--png")
    ap.add_argument("--md")
    ap.add_argument("--cpu", default="")
    ap.add_argument("--cmd", default="bash bench/race/run.sh")
    a = ap.parse_args()
    fw, trl = json.load(open(a.fw)), json.load(open(a.trl))
    t = table(fw, trl)
    spread = spread_table([(json.load(open(f)), json.load(open(r))) for f, r in a.seed_logs])
    if spread:
        t += "\n" + spread
    print(t)
    if a.png:
        plot(fw, trl, a.png)
    if a.md:
        args = fw["args"]
        # the plot's path as the markdown file sees it
        img = os.path.relpath(a.png or "docs/benchmarks/race.png", os.path.dirname(os.path.abspath(a.md)))
        body = (f"<!-- race:begin (written by bench/race/run.sh) -->\n"
                f"Command: `{a.cmd}`. Machine: {a.cpu}.\n"
                f"Task: bench/race/task.py (\"What is a + b? Reply with the number only.\", a, b in 1..20; reward 1 "
                f"when the reply's last number is the sum), {args['eval_size']} held-out items, greedy. Settings on both "
                f"sides: {args['groups']} prompts x {args['group_size']} samples per step, temperature 1, "
                f"max {args['max_tokens']} tokens, learning rate {args['learning_rate']}, LoRA r={args['lora_rank']} "
                f"alpha={args['lora_alpha']:g} on all seven projections, {len(fw['steps'])} steps.\n\n"
                f"{t}\n![reward and eval accuracy, flywheel vs TRL]({img})\n"
                f"<!-- race:end -->")
        doc = open(a.md).read() if os.path.exists(a.md) else ""
        if "<!-- race:begin" in doc:
            doc = re.sub(r"<!-- race:begin.*?<!-- race:end -->", lambda m: body, doc, flags=re.S)
        else:
            doc += "\n## RL on a real task: flywheel vs TRL (bench/race)\n\n" + body + "\n"
        open(a.md, "w").write(doc)


if __name__ == "__main__":
    main()
