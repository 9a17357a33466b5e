"""Batch-1 decode speed of llama.cpp (llama-cpp-python) on GGUF files, for
the side-by-side comparison in bench/llama_compare.sh.

    python bench/llama_decode.py THREADS FILE.gguf [FILE.gguf ...]

For each file: a 128-token prompt is evaluated, then 64 single-token
decode steps are timed (llama_eval of one token: the logits of the next
position, as flywheel's Forward of one token per sequence). Prints one
line per file: "<name> decode <tok/s> tok/s".

    python bench/llama_decode.py --quantize IN.gguf OUT.gguf q8_0|q4_k_m|q5_k_m|f16|f32

writes IN requantized (dequantised, then written) as Q8_0, Q4_K_M, Q5_K_M,
F16 or F32 with llama.cpp's own quantizer: the files of the comparison
(bench/llama_compare.sh) and of .ci/gguf.sh's checks of the K-quant mixes.
Q4_K_M is llama.cpp's mix of Q4_K and Q6_K where a row is whole 256-value
super-blocks, their fallbacks Q5_0 and Q8_0 where not (SmolLM2-135M's
576-value rows); Q5_K_M of Q5_K and Q6_K, with Q5_1 and Q8_0.
"""
import os
import sys
import time

import llama_cpp
from llama_cpp import Llama


@llama_cpp.llama_log_callback
def _quiet(level, text, user_data):
    pass


FTYPES = {
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q5_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16,
    "f32": llama_cpp.LLAMA_FTYPE_ALL_F32,
}


def quantize(src, dst, kind):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPES[kind]
    p.allow_requantize = True
    p.nthread = 2
    llama_cpp.llama_log_set(_quiet, None)
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p) != 0:
        sys.exit(f"quantize {src} -> {dst} failed")


def decode(path, threads, steps=64, prompt_len=128):
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=512,
                n_batch=512, verbose=False)
    prompt = [(i * 7919) % 1000 + 10 for i in range(prompt_len)]
    llm.reset()
    llm.eval(prompt)
    llm.eval([42])  # warm-up step
    t = time.perf_counter()
    for i in range(steps):
        llm.eval([100 + i])
    el = time.perf_counter() - t
    return steps / el


def main():
    if sys.argv[1] == "--quantize":
        quantize(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "q8_0")
        return
    threads = int(sys.argv[1])
    for path in sys.argv[2:]:
        print(f"{os.path.basename(path)} decode {decode(path, threads):.1f} tok/s", flush=True)


if __name__ == "__main__":
    main()
