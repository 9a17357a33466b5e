"""An independent float64 reference of a llama-architecture GGUF model: numpy, with
the weights dequantised by the `gguf` package (llama.cpp's own Python reader).

Usage: gguf_f64.py MODEL.gguf REF.json   (REF.json from gguf_ref.py, updated in place)

For each prompt of REF.json (llama.cpp's tokens), adds "top_f64": the float64
next-token log-probabilities of llama.cpp's top-20 tokens; "greedy_f64": the
float64 greedy continuation, as long as llama.cpp's; and "top_q8": the same
with every input of a product with a quantized matrix first rounded to 8 bits
per block of 32 the way llama.cpp's CPU backend does (quantize_row_q8_0/q8_1:
scale amax/127 stored as f16; for the K-quants' matrices per block of 256,
quantize_row_q8_K: scale −max/127 in float32), which measures how much of llama.cpp's
difference from the exact model that rounding explains. RoPE is applied
ggml's way (adjacent pairs) on the file's q/k rows as stored, so the reference
does not share flywheel's undoing of the converter's row permutation.
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    path, refpath = sys.argv[1], sys.argv[2]
    r = GGUFReader(path)
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
    arch = kv["general.architecture"]
    assert arch == "llama", arch
    H = kv[arch + ".embedding_length"]
    L = kv[arch + ".block_count"]
    nh = kv[arch + ".attention.head_count"]
    nkv = kv[arch + ".attention.head_count_kv"]
    eps = float(np.float32(kv[arch + ".attention.layer_norm_rms_epsilon"]))
    base = float(np.float32(kv[arch + ".rope.freq_base"]))
    D = H // nh
    W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(list(reversed([int(x) for x in t.shape]))) for t in r.tensors}
    emb = W["token_embd.weight"]
    head_name = "output.weight" if "output.weight" in W else "token_embd.weight"

    qtypes = {t.name: t.tensor_type.name for t in r.tensors}

    def q8(x):  # llama.cpp's 8-bit rounding of a product's input, per block of 32
        b = x.reshape(*x.shape[:-1], -1, 32)
        d = np.abs(b).max(-1, keepdims=True) / 127
        q = np.round(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
        return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)

    def q8k(x):  # the same for the K-quants' products (quantize_row_q8_K): per block of 256,
        # the scale -max/127 in float32, max the value of largest magnitude
        b = x.reshape(*x.shape[:-1], -1, 256)
        mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)
        iscale = np.divide(-127.0, mx, out=np.zeros_like(mx), where=mx != 0)
        q = np.minimum(127, np.round(b * iscale))
        d = np.divide(1.0, iscale, out=np.zeros_like(iscale), where=iscale != 0)
        return (q * d.astype(np.float32).astype(np.float64)).reshape(x.shape)

    def norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):  # x [T, heads, D], ggml "normal" mode: pairs (2i, 2i+1)
        inv = base ** (-np.arange(0, D, 2) / D)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(toks, emulate, cache=None):
        """The log-probabilities after toks. With cache (a list, per layer, of the
        keys and values so far; filled here) toks continue the cached sequence."""
        T = len(toks)
        start = 0 if not cache else cache[0][0].shape[0]
        pos = np.arange(start, start + T, dtype=np.float64)
        x = emb[toks]
        mask = np.triu(np.full((T, start + T), -np.inf), start + 1)

        def mm(x, name):
            if emulate and qtypes[name] not in ("F32", "F16", "BF16"):
                x = q8k(x) if qtypes[name].endswith("_K") else q8(x)
            return x @ W[name].T

        for l in range(L):
            p = f"blk.{l}."
            h = norm(x, W[p + "attn_norm.weight"])
            q = rope(mm(h, p + "attn_q.weight").reshape(T, nh, D), pos)
            k = rope(mm(h, p + "attn_k.weight").reshape(T, nkv, D), pos)
            v = mm(h, p + "attn_v.weight").reshape(T, nkv, D)
            if cache is not None:
                if len(cache) <= l:
                    cache.append((k, v))
                else:
                    k, v = np.concatenate([cache[l][0], k]), np.concatenate([cache[l][1], v])
                    cache[l] = (k, v)
            k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
            s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = np.einsum("htu,uhd->thd", s, v).reshape(T, nh * D)
            x = x + mm(a, p + "attn_output.weight")
            h = norm(x, W[p + "ffn_norm.weight"])
            g = mm(h, p + "ffn_gate.weight")
            u = mm(h, p + "ffn_up.weight")
            x = x + mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight")
        z = mm(norm(x[-1:], W["output_norm.weight"]), head_name)[0]
        return z - (z.max() + np.log(np.exp(z - z.max()).sum()))

    refs = json.load(open(refpath))
    for ref in refs:
        toks = list(ref["tokens"])
        lp8 = forward(toks, True)
        ref["top_q8"] = [[i, float(lp8[i])] for i, _ in ref["top"]]
        cache = []
        lp = forward(toks, False, cache)
        ref["top_f64"] = [[i, float(lp[i])] for i, _ in ref["top"]]
        greedy = []
        for _ in range(len(ref["greedy"])):
            nxt = int(np.argmax(lp))
            greedy.append(nxt)
            lp = forward([nxt], False, cache)
        ref["greedy_f64"] = greedy
    json.dump(refs, open(refpath, "w"), indent=1)


if __name__ == "__main__":
    main()
