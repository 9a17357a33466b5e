#!/usr/bin/python3
"""PyTorch-on-CPU reference for flywheel's RL step (BenchmarkRLStepSmolLM2_8x544).

One GRPO-style gradient step for one group of 8 trajectories, each a
480-token prompt plus 64 sampled tokens (B=8, T=544), as a plain PyTorch
training loop runs it: the whole batch forward, logits only at the 64
completion positions (the positions the loss needs), the policy loss
-A * logprob averaged over the trainable tokens, backward to the LoRA
parameters (r=16, alpha=32, all seven projections), clip_grad_norm_(1.0),
AdamW. The model is torch_bench.py's (same shape and layers as flywheel's
benchmark). Prints seconds per step, CPU seconds and peak RSS.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_rl_step.py [steps=2] [threads=2]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "internal", "train", "testdata"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_bench import SHAPES, Model, timed  # noqa: E402

PROMPT, COMPLETION, GROUP = 480, 64, 8


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    torch.manual_seed(0)
    c = SHAPES["smol"]
    m = Model(c)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    prompt = torch.randint(0, c["vocab"], (1, PROMPT)).expand(GROUP, PROMPT)
    toks = torch.cat((prompt, torch.randint(0, c["vocab"], (GROUP, COMPLETION))), dim=1)
    adv = torch.tensor([(-1.0) ** (k + 1) for k in range(GROUP)])[:, None]

    def step():
        opt.zero_grad(set_to_none=True)
        h = m.hidden(toks)[:, PROMPT - 1:-1]  # the rows that predict the completion
        logits = F.linear(h, m.embed)
        lp = logits.log_softmax(-1).gather(-1, toks[:, PROMPT:, None])[..., 0]
        loss = -(adv * lp).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    wall, cpu, rss = timed(step, steps)
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} rl_step group={GROUP}x({PROMPT}+{COMPLETION}) "
          f"wall_s/step={wall:.3f} cpu_s/step={cpu:.3f} peakRSS_MiB={rss:.0f}")


if __name__ == "__main__":
    main()
