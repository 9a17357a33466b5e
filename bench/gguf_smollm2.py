"""Write a SmolLM2-135M-shaped Llama model with random weights as GGUF, for
llama-bench (the side-by-side decode comparison in docs/benchmarks.md).

    PYTHONPATH=/path/to/llama.cpp/gguf-py /usr/bin/python3 bench/gguf_smollm2.py OUT.gguf f32|f16

Uses llama.cpp's gguf-py package (not part of this repository) and numpy.
The vocabulary is "no_vocab" with 49152 entries: llama-bench feeds random
token ids, so no tokenizer is needed. Norm weights are always F32, as
llama.cpp's converter writes them.
"""

import sys
import types

import numpy as np

# gguf-py imports sentencepiece for its vocabulary helpers, which this script
# does not use; Debian's python3 has no sentencepiece, so stand in for it.
if "sentencepiece" not in sys.modules:
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        sys.modules["sentencepiece"] = types.SimpleNamespace(SentencePieceProcessor=None)

import gguf  # noqa: E402

H, I, L, NH, NKV, D, V = 576, 1536, 30, 9, 3, 64, 49152


def main():
    out, kind = sys.argv[1], sys.argv[2]
    dt = {"f32": np.float32, "f16": np.float16}[kind]
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}[kind]
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(8192)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(I)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_file_type(ftype)
    w.add_tokenizer_model("no_vocab")

    def mat(name, rows, cols):
        w.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(dt))

    def norm(name, n):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32))

    mat("token_embd.weight", V, H)  # tied: no output.weight
    norm("output_norm.weight", H)
    for l in range(L):
        p = f"blk.{l}."
        norm(p + "attn_norm.weight", H)
        mat(p + "attn_q.weight", NH * D, H)
        mat(p + "attn_k.weight", NKV * D, H)
        mat(p + "attn_v.weight", NKV * D, H)
        mat(p + "attn_output.weight", H, NH * D)
        norm(p + "ffn_norm.weight", H)
        mat(p + "ffn_gate.weight", I, H)
        mat(p + "ffn_up.weight", I, H)
        mat(p + "ffn_down.weight", H, I)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
