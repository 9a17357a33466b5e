#!/usr/bin/python3
"""PyTorch-on-CPU reference for flywheel's sampling benchmarks (BenchmarkSample*).

The SmolLM2-135M shape of torch_bench.py (random weights, float32, no LoRA),
decoding with a KV cache as a hand-written PyTorch loop does (Debian's
python3-torch has no transformers): `n8` prefills a 480-token prompt once,
copies its keys and values to a batch of 8 and samples 64 tokens for each
(a batch-8 generate that, like flywheel's n choices, does not prefill the
same prompt eight times; Hugging Face's num_return_sequences=8 would); `one` samples
128 tokens for one stream after a 16-token prompt. Multinomial sampling at
temperature 1 under torch.no_grad(). Prints seconds and tokens/s.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_generate.py n8|one [threads=2]
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "internal", "train", "testdata"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_bench import SHAPES, Model, rotate_half  # noqa: E402


def lin(layer, x):
    return F.linear(x, layer.weight)  # the base model: LoRA B is zero


def step(m, toks, cache, pos0):
    """Run toks [B, T] at positions pos0.. through the model, appending to
    cache (per layer [k, v]); return the last position's logits [B, V]."""
    B, T = toks.shape
    x = F.embedding(toks, m.embed)
    ang = torch.outer(torch.arange(pos0, pos0 + T).float(), m.inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    for i, b in enumerate(m.blocks):
        h = b.n1(x)
        q = lin(b.q, h).view(B, T, b.nh, b.D).transpose(1, 2)
        k = lin(b.k, h).view(B, T, b.nkv, b.D).transpose(1, 2)
        v = lin(b.v, h).view(B, T, b.nkv, b.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache[i] is not None:
            k = torch.cat((cache[i][0], k), dim=2)
            v = torch.cat((cache[i][1], v), dim=2)
        cache[i] = (k, v)
        rep = b.nh // b.nkv
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ kk.transpose(-1, -2)) / math.sqrt(b.D)
        if T > 1:
            P = kk.shape[2]
            att = att + torch.full((T, P), float("-inf")).triu(P - T + 1)
        y = (att.softmax(-1) @ vv).transpose(1, 2).reshape(B, T, -1)
        x = x + lin(b.o, y)
        h = b.n2(x)
        x = x + lin(b.down, F.silu(lin(b.gate, h)) * lin(b.up, h))
    return F.linear(m.norm(x[:, -1]), m.embed)


def generate(m, prompt, n, batch):
    """Prefill prompt [1, T] once, then sample n tokens for each of batch
    rows (the prompt's keys and values copied to every row, as flywheel
    does for n choices)."""
    cache = [None] * len(m.blocks)
    logits = step(m, prompt, cache, 0)
    if batch > 1:
        cache = [(k.expand(batch, -1, -1, -1).contiguous(), v.expand(batch, -1, -1, -1).contiguous()) for k, v in cache]
        logits = logits.expand(batch, -1)
    pos = prompt.shape[1]
    for _ in range(n):
        nxt = torch.multinomial(logits.softmax(-1), 1)
        logits = step(m, nxt, cache, pos)
        pos += 1


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "n8"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    torch.manual_seed(0)
    c = SHAPES["smol"]
    m = Model(c)
    batch, plen, n = (8, 480, 64) if mode == "n8" else (1, 16, 128)
    prompt = torch.randint(0, c["vocab"], (1, plen))
    with torch.no_grad():
        generate(m, prompt[:, :8], 2, batch)  # warm-up
        t0 = time.perf_counter()
        generate(m, prompt, n, batch)
        el = time.perf_counter() - t0
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} generate mode={mode} batch={batch} "
          f"prompt={plen} tokens={n} wall_s={el:.3f} tok/s={batch * n / el:.1f}")


if __name__ == "__main__":
    main()
