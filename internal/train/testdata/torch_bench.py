#!/usr/bin/python3
"""PyTorch-on-CPU reference for flywheel's training benchmark.

The same step as internal/train's BenchmarkTrainStep*: a Llama-family
decoder (random frozen base weights, float32), LoRA r=16 alpha=32 on
q,k,v,o,gate,up,down, a batch of 4 x 256 random tokens, cross-entropy on
every next token, backward to the LoRA parameters, clip_grad_norm_(1.0),
AdamW. Prints tokens/s (wall), CPU seconds per step and peak RSS.

    /usr/bin/python3 internal/train/testdata/torch_bench.py smol   # SmolLM2-135M shape
    /usr/bin/python3 internal/train/testdata/torch_bench.py small  # hidden 256, 4 layers

Written for the Debian python3-torch package (PyTorch 1.13, no transformers).
"""
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    "smol": dict(hidden=576, inter=1536, layers=30, heads=9, kv=3, vocab=49152, theta=100000.0),
    "small": dict(hidden=256, inter=768, layers=4, heads=4, kv=2, vocab=49152, theta=100000.0),
}


class LoRALinear(nn.Module):
    def __init__(self, inp, out, r=16, alpha=32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out, inp) * 0.02, requires_grad=False)
        self.A = nn.Parameter(torch.empty(r, inp).uniform_(-1 / math.sqrt(inp), 1 / math.sqrt(inp)))
        self.B = nn.Parameter(torch.zeros(out, r))
        self.s = alpha / r

    def forward(self, x):
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.A), self.B) * self.s


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I, nh, nkv = c["hidden"], c["inter"], c["heads"], c["kv"]
        D = H // nh
        self.nh, self.nkv, self.D = nh, nkv, D
        self.n1, self.n2 = RMSNorm(H), RMSNorm(H)
        self.q, self.k, self.v = LoRALinear(H, nh * D), LoRALinear(H, nkv * D), LoRALinear(H, nkv * D)
        self.o = LoRALinear(nh * D, H)
        self.gate, self.up, self.down = LoRALinear(H, I), LoRALinear(H, I), LoRALinear(I, H)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(B, T, self.nh, self.D).transpose(1, 2)
        k = self.k(h).view(B, T, self.nkv, self.D).transpose(1, 2)
        v = self.v(h).view(B, T, self.nkv, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.D) + mask
        att = att.softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.o(y)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed = nn.Parameter(torch.randn(c["vocab"], c["hidden"]) * 0.02, requires_grad=False)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        D = c["hidden"] // c["heads"]
        self.inv = 1.0 / (c["theta"] ** (torch.arange(0, D, 2).float() / D))

    def hidden(self, toks):
        """The final-normed hidden states: forward without the lm head."""
        B, T = toks.shape
        x = F.embedding(toks, self.embed)
        ang = torch.outer(torch.arange(T).float(), self.inv)
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.norm(x)

    def forward(self, toks):
        return F.linear(self.hidden(toks), self.embed)  # tied lm_head


def timed(step, steps):
    """Runs step once to warm up, then steps times; returns wall and CPU
    seconds per step and the process's peak RSS in MiB."""
    step()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = (time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    shape = sys.argv[1] if len(sys.argv) > 1 else "small"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    torch.manual_seed(0)
    c = SHAPES[shape]
    m = Model(c)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    toks = torch.randint(0, c["vocab"], (4, 256))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = m(toks)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, c["vocab"]), toks[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    wall, cpu, rss = timed(step, steps)
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} shape={shape} batch=4x256 "
          f"lora_params={sum(p.numel() for p in params)} "
          f"wall_s/step={wall:.3f} tokens/s={4 * 256 / wall:.1f} cpu_s/step={cpu:.3f} peakRSS_MiB={rss:.0f}")


if __name__ == "__main__":
    main()
