"""llama.cpp's reference outputs on a GGUF model, for flywheel's real-model check (.ci/gguf.sh).

Usage: gguf_ref.py MODEL.gguf OUT.json

For each prompt: llama.cpp's tokens (special tokens parsed, BOS as the file says),
the top-20 next-token log-probabilities after the prompt, and the greedy
continuation of 64 tokens (argmax at every step, no sampling, stopping only
at the length). Runs llama-cpp-python on the CPU with 2 threads and a float32
KV cache (type_k = type_v = GGML_TYPE_F32): llama.cpp's default F16 cache alone
moves this model's log-probabilities by up to ~0.17.
"""
import json
import os
import sys

# llama.cpp's OpenMP threads spin while waiting by default, which collapses its
# speed (and this script's time) on a busy machine; passive waiting changes no
# number it computes.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
from llama_cpp import Llama  # noqa: E402

CHAT = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [
    CHAT.format("What is the capital of France?"),
    CHAT.format("Write a haiku about the sea."),
    CHAT.format("List three prime numbers greater than 100."),
    "The quick brown fox jumps over the lazy dog. Once upon a time,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In 1969, Neil Armstrong",
]


def logprobs(logits):
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def main():
    model, out = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False, seed=0,
                type_k=0, type_v=0)
    res = []
    for p in PROMPTS:
        toks = llm.tokenize(p.encode(), add_bos=llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true", special=True)
        llm.reset()
        llm.eval(toks)
        lp = logprobs(np.array(llm.scores[len(toks) - 1]))
        top = np.argsort(-lp)[:20]
        greedy = []
        cur = list(toks)
        for _ in range(64):
            nxt = int(np.argmax(np.array(llm.scores[len(cur) - 1])))
            greedy.append(nxt)
            cur.append(nxt)
            llm.eval([nxt])
        res.append({
            "prompt": p,
            "tokens": [int(t) for t in toks],
            "top": [[int(i), float(lp[i])] for i in top],
            "greedy": greedy,
            "text": llm.detokenize(greedy).decode("utf-8", "replace"),
        })
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
