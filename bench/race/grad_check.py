#!/usr/bin/env python3
"""flywheel's RL steps against PyTorch + PEFT on the real model (issue 23).

Given a flywheel data dir in which STEPS RL jobs ran one after the other from step 0 of
a LoRA model on SmolLM2-135M-Instruct (bench/race/grad_check.sh makes one: per job, 8
prompts of the race task x 8 samples at temperature 1 from the latest step, with token
ids and logprobs), this recomputes every job independently: transformers loads the
same GGUF file (dequantised to float32), PEFT loads flywheel's adapter of the step the
job started from, the sequences are the chat template's prompt (apply_chat_template,
generation prompt) and the sampled token ids, and the loss is rl.md's, written out here
(group advantages over the population std, zero-advantage trajectories skipped, w =
1/token count normalised to mean 1, advantages over mean |A|·w, CISPO with the sampled
logprobs as old). Per job it compares:

- the loss, and the sampled log-probs flywheel returned against PyTorch's;
- the LoRA gradient, read back from flywheel's optimizer states (AdamW's first moment:
  m_k = β1·m_(k−1) + (1 − β1)·g_k);
- the step: torch's AdamW (rl.md: clip at global norm 1; the job's learning rate,
  betas 0.9/0.999, eps 1e-8, no decay), continuing from flywheel's saved optimizer
  state, against flywheel's next adapter.

Exits 1 when a loss differs by more than 1e-4 relatively, a gradient tensor's cosine is
below 0.9999, or an update differs by more than 1 % (relative norm).

    grad_check.py GGUF CHECKPOINTS_DIR WORK_DIR     (WORK_DIR/tgs-K.json, WORK_DIR/jobs.json)
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
from peft import PeftModel, set_peft_model_state_dict  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

LR = 5e-4  # the jobs' learning_rate (grad_check.sh)
B1, B2 = 0.9, 0.999


def sequences(tok, tgs):
    """(prompt ids, sampled ids, sampled logprobs, advantage) of every trained trajectory."""
    seqs = []
    for g in tgs:
        rs = [t["reward"] for t in g["trajectories"]]
        mu = sum(rs) / len(rs)
        sd = math.sqrt(sum((r - mu) ** 2 for r in rs) / len(rs))
        for t in g["trajectories"]:
            a = (t["reward"] - mu) / (sd + 1e-6)
            if a == 0:
                continue
            msgs, ch = t["messages_and_choices"][:-1], t["messages_and_choices"][-1]
            p = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if not isinstance(p, list):
                p = p["input_ids"]
            c = [int(x["token"].split(":")[1]) for x in ch["logprobs"]["content"]]
            seqs.append((list(p), c, [x["logprob"] for x in ch["logprobs"]["content"]], a))
    return seqs


def loss_backward(model, seqs):
    """rl.md's loss over seqs, its gradient accumulated into model; (loss, max |Δ log-prob|)."""
    T = sum(len(c) for _, c, _, _ in seqs)
    w = [1.0 / (len(c) + 1e-6) for _, c, _, _ in seqs]
    mw = sum(wi * len(c) for wi, (_, c, _, _) in zip(w, seqs)) / T
    w = [wi / mw for wi in w]
    ma = sum(abs(a) * wi * len(c) for wi, (_, c, _, a) in zip(w, seqs)) / T
    loss, maxd = 0.0, 0.0
    for wi, (p, c, old, a) in zip(w, seqs):
        logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1]
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(c)[:, None])[:, 0]
        maxd = max(maxd, max(abs(x - y) for x, y in zip(lp.tolist(), old)))
        rho = torch.exp(lp.detach() - torch.tensor(old)).clamp(0, 5)  # clip(ρ, 1 − ε, 1 + ε_high), ε = 1, ε_high = 4
        part = -(rho * (a / ma) * wi * lp).sum() / T
        part.backward()
        loss += part.item()
    return loss, maxd, T


def optimizer_state(ckdir, step):
    """flywheel's AdamW state saved with step-N: (tensors, optimizer step), None for step 0."""
    path = os.path.join(ckdir, f"step-{step}", "optimizer.safetensors")
    if not os.path.exists(path):
        return None, 0
    with safe_open(path, "pt") as f:
        n = int(f.metadata()["step"])
    return load_file(path), n


def check_step(model, tok, ckdir, work, k, fw_loss):
    """Job k (from step k−1 to step k); returns whether it matched."""
    lora = {name: prm for name, prm in model.named_parameters() if "lora_" in name}
    key = {name: name.replace(".default", "") for name in lora}
    start = load_file(os.path.join(ckdir, f"step-{k - 1}", "adapter_model.safetensors"))
    set_peft_model_state_dict(model, start)
    for name, prm in lora.items():
        if not torch.equal(prm.detach(), start[key[name]].reshape(prm.shape).float()):
            sys.exit(f"step {k}: {name} did not load")
    model.zero_grad()
    seqs = sequences(tok, json.load(open(os.path.join(work, f"tgs-{k}.json"))))
    loss, maxd, T = loss_backward(model, seqs)
    print(f"job {k} (step {k - 1} -> {k}): trajectories trained {len(seqs)}, trainable tokens {T}")
    print(f"  loss: PyTorch {loss:.8f}, flywheel {fw_loss:.8f}; max |log-prob - flywheel's sampled| {maxd:.2e}")

    prev, n_prev = optimizer_state(ckdir, k - 1)
    cur, n_cur = optimizer_state(ckdir, k)
    if n_cur != n_prev + 1:
        sys.exit(f"step {k}: optimizer step {n_prev} -> {n_cur}, want one gradient step")
    worst, dot, n1, n2, tensors = (2.0, ""), 0.0, 0.0, 0.0, 0
    for name, prm in lora.items():
        m_prev = prev[key[name] + ".exp_avg"] if prev else torch.zeros(prm.numel())
        fw = ((cur[key[name] + ".exp_avg"] - B1 * m_prev) / (1 - B1)).reshape(prm.shape)
        g = prm.grad if prm.grad is not None else torch.zeros_like(prm)
        if g.norm() == 0 and fw.norm() == 0:
            continue  # lora_A at step 0: B = 0 gives it no gradient on either side
        tensors += 1
        cos = torch.nn.functional.cosine_similarity(g.flatten(), fw.flatten(), dim=0).item()
        if cos < worst[0]:
            worst = (cos, name)
        dot += (g * fw).sum().item()
        n1 += (g * g).sum().item()
        n2 += (fw * fw).sum().item()
    print(f"  LoRA gradient tensors compared: {tensors}; lowest cosine {worst[0]:.7f} ({worst[1]}); "
          f"global cosine {dot / math.sqrt(n1 * n2):.7f}; norm PyTorch {math.sqrt(n1):.6f}, flywheel {math.sqrt(n2):.6f}")

    before = {name: prm.detach().clone() for name, prm in lora.items()}
    torch.nn.utils.clip_grad_norm_(list(lora.values()), 1.0)
    adam = torch.optim.AdamW(list(lora.values()), lr=LR, betas=(B1, B2), eps=1e-8, weight_decay=0.0)
    if prev:
        for name, prm in lora.items():
            adam.state[prm] = {"step": torch.tensor(float(n_prev)),
                               "exp_avg": prev[key[name] + ".exp_avg"].reshape(prm.shape).clone(),
                               "exp_avg_sq": prev[key[name] + ".exp_avg_sq"].reshape(prm.shape).clone()}
    adam.step()
    nxt = load_file(os.path.join(ckdir, f"step-{k}", "adapter_model.safetensors"))
    worst_u, off, total, dd, nn = 0.0, 0, 0, 0.0, 0.0
    for name, prm in lora.items():
        fw = nxt[key[name]].reshape(prm.shape).float()
        du_t, du_f = prm.detach() - before[name], fw - before[name]
        diff = (du_t - du_f).abs()
        worst_u = max(worst_u, diff.max().item() / LR)
        off += int((diff > LR / 10).sum().item())
        total += diff.numel()
        dd += (diff * diff).sum().item()
        nn += (du_t * du_t).sum().item()
    rel = math.sqrt(dd / nn)
    print(f"  AdamW step: |flywheel's update - torch's| / |torch's| {rel:.2e}; {off} of {total} LoRA weights "
          f"differ by more than lr/10 (largest {worst_u:.2f} x lr: Adam's steps are near lr x sign(g) early, "
          f"so a gradient element near 0 may flip)")
    return tensors > 0 and worst[0] >= 0.9999 and abs(loss - fw_loss) <= 1e-4 * abs(loss) and rel <= 1e-2


def main():
    gguf, ckdir, work = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.set_num_threads(2)
    d, f = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.hf_quantizer = None  # dequantised float32 tensors (see race_trl.py)
    model.is_quantized = False
    model = PeftModel.from_pretrained(model, os.path.join(ckdir, "step-0"), is_trainable=True)
    jobs = json.load(open(os.path.join(work, "jobs.json")))
    ok = all([check_step(model, tok, ckdir, work, k, loss) for k, loss in enumerate(jobs, 1)])
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
