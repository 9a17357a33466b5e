#!/usr/bin/env python3
"""flywheel's RL gradient against PyTorch + PEFT on the real model (issue 23).

Given a flywheel data dir in which one RL job ran from step 0 of a LoRA model on
SmolLM2-135M-Instruct (bench/race/grad_check.sh makes one: 8 prompts of the race task
x 8 samples at temperature 1, with token ids and logprobs), this recomputes that job's
first gradient step independently: transformers loads the same GGUF file (dequantised
to float32), PEFT loads flywheel's step-0 adapter (its A initialisation, B = 0), the
sequences are the chat template's prompt (apply_chat_template, generation prompt) and
the sampled token ids, and the loss is rl.md's, written out here (group advantages
over the population std, zero-advantage trajectories skipped, w = 1/token count
normalised to mean 1, advantages over mean |A|·w, CISPO with the sampled logprobs as
old). Flywheel's gradient is read back from the step-1 optimizer state (AdamW's first
moment after one step is (1 − β1)·g; the job's grad_norm was below the clip of 1).

Prints the loss on both sides, the largest log-prob difference against flywheel's
sampled ones, and the cosine and norm of every LoRA gradient tensor; exits 1 when
the losses differ by more than 1e-4 relatively or any tensor's cosine is below 0.9999.

    grad_check.py GGUF CHECKPOINTS_DIR TRAJECTORIES_JSON LOSS
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def main():
    gguf, ckdir, tgs_path, fw_loss = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    torch.set_num_threads(2)
    d, f = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.hf_quantizer = None  # dequantised float32 tensors (see race_trl.py)
    model.is_quantized = False
    model = PeftModel.from_pretrained(model, os.path.join(ckdir, "step-0"), is_trainable=True)

    seqs = []  # (prompt ids, sampled ids, sampled logprobs, advantage)
    for g in json.load(open(tgs_path)):
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
    T = sum(len(c) for _, c, _, _ in seqs)
    w = [1.0 / (len(c) + 1e-6) for _, c, _, _ in seqs]
    mw = sum(wi * len(c) for wi, (_, c, _, _) in zip(w, seqs)) / T
    w = [wi / mw for wi in w]
    ma = sum(abs(a) * wi * len(c) for wi, (_, c, _, a) in zip(w, seqs)) / T

    model.zero_grad()
    loss, maxd = 0.0, 0.0
    for wi, (p, c, old, a) in zip(w, seqs):
        logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1]
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(c)[:, None])[:, 0]
        maxd = max(maxd, max(abs(x - y) for x, y in zip(lp.tolist(), old)))
        rho = torch.exp(lp.detach() - torch.tensor(old)).clamp(0, 5)  # clip(ρ, 1 − ε, 1 + ε_high), ε = 1, ε_high = 4
        part = -(rho * (a / ma) * wi * lp).sum() / T
        part.backward()
        loss += part.item()
    print(f"trajectories trained: {len(seqs)}, trainable tokens: {T}")
    print(f"loss: PyTorch {loss:.8f}, flywheel {fw_loss:.8f}; max |log-prob - flywheel's sampled| {maxd:.2e}")

    opt = load_file(os.path.join(ckdir, "step-1", "optimizer.safetensors"))
    worst, dot, n1, n2, tensors = (2.0, ""), 0.0, 0.0, 0.0, 0
    for name, prm in model.named_parameters():
        if "lora_" not in name:
            continue
        fw = (opt[name.replace(".default", "") + ".exp_avg"] / 0.1).reshape(prm.shape)
        g = prm.grad if prm.grad is not None else torch.zeros_like(prm)
        if g.norm() == 0 and fw.norm() == 0:
            continue  # lora_A: B = 0 gives it no gradient on either side
        tensors += 1
        cos = torch.nn.functional.cosine_similarity(g.flatten(), fw.flatten(), dim=0).item()
        if cos < worst[0]:
            worst = (cos, name)
        dot += (g * fw).sum().item()
        n1 += (g * g).sum().item()
        n2 += (fw * fw).sum().item()
    print(f"LoRA gradient tensors compared: {tensors}; lowest cosine {worst[0]:.7f} ({worst[1]}); "
          f"global cosine {dot / math.sqrt(n1 * n2):.7f}; norm PyTorch {math.sqrt(n1):.6f}, flywheel {math.sqrt(n2):.6f}")
    ok = tensors > 0 and worst[0] >= 0.9999 and abs(loss - fw_loss) <= 1e-4 * abs(loss)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
