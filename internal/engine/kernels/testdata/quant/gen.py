"""Writes the reference blocks TestDequantGGUF and TestQuantizeGGUF compare with.

Run with the gguf Python package (llama.cpp's own numpy implementation of
ggml's block formats) and numpy installed:

    python gen.py      # in this folder; gguf 0.19.0, numpy 2.x

For each format NAME it writes NAME.q (the quantized blocks) and NAME.f32
(gguf.quants.dequantize of them, little-endian float32). Q8_0, Q4_0 and
Q4_1 (and Q5_0, Q5_1, written last from a generator of their own so the
others' files stay as they were) are quantized by gguf.quants.quantize
from NAME.src.f32 (seeded
random values with edge cases: an all-zero block, a constant block, a
block whose largest magnitude is negative, tiny and large scales); the
K-quants, for which gguf has no quantizer, are random bytes with the f16
scales set to finite values of realistic size.
"""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize
from gguf.constants import GGML_QUANT_SIZES

rng = np.random.default_rng(20261126)


def src_values(n):
    x = rng.standard_normal(n).astype(np.float32) * np.float32(0.05)
    x[0:32] = 0                      # all-zero block
    x[32:64] = np.float32(0.25)      # constant block
    x[64:96] = rng.standard_normal(32).astype(np.float32) * np.float32(0.01)
    x[64 + 7] = np.float32(-0.9)     # largest magnitude negative
    x[96:128] *= np.float32(1e-4)    # tiny scale
    x[128:160] *= np.float32(300.0)  # large scale
    return x


def write_quantized(t):
    x = src_values(32 * 24)
    q = quantize(x.reshape(1, -1), t).reshape(-1)
    y = dequantize(q, t).astype("<f4").reshape(-1)
    x.astype("<f4").tofile(f"{t.name}.src.f32")
    q.tofile(f"{t.name}.q")
    y.tofile(f"{t.name}.f32")


for t in (T.Q8_0, T.Q4_0, T.Q4_1):
    write_quantized(t)

for t, d_offsets in ((T.Q4_K, (0, 2)), (T.Q5_K, (0, 2)), (T.Q6_K, (208,))):
    block, size = GGML_QUANT_SIZES[t]
    nblocks = 6
    q = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    for i in range(nblocks):
        for off in d_offsets:
            d = np.float16(rng.uniform(-1, 1) * 10.0 ** rng.integers(-5, 0))
            q[i, off:off + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    q = q.reshape(-1)
    y = dequantize(q, t).astype("<f4").reshape(-1)
    q.tofile(f"{t.name}.q")
    y.tofile(f"{t.name}.f32")

rng = np.random.default_rng(20261127)
for t in (T.Q5_0, T.Q5_1):
    write_quantized(t)
