#!/usr/bin/env python3
"""TRL's side of the race: GRPOTrainer (PyPI trl, PyTorch on CPU) on the same
task, weights and settings as race_client.py drives flywheel with.

The model is the same GGUF file, loaded by transformers with gguf_file= (which
dequantises every tensor to float32: the same weights flywheel computes with,
held as floats). Same prompts in the same order (shuffle_dataset=False over
task.train_order(seed)), --groups prompts x --group-size completions per step
(one generation batch and one optimizer step per step, as one flywheel job),
temperature 1, max tokens, learning rate, LoRA rank/alpha/targets, AdamW
(0.9, 0.999, 1e-8, no weight decay), gradient clipping at 1.0, no KL term
(beta=0), rewards scaled by the group's std, and TRL's "grpo" loss: each
completion's per-token losses averaged over its own tokens, then averaged
over the completions, the weighting rl.md gives every trajectory (w = 1/its
token count). With one optimizer step per batch of fresh samples the ratio
is 1, so the clip of "grpo" (and the cap of flywheel's CISPO) is inert and
the gradient is flywheel's, up to the global scale of rl.md's advantage
normalisation. (TRL's "cispo" averages over all tokens of the batch instead,
weighting long completions more: a different algorithm.)
torch.set_num_threads(2), OMP_WAIT_POLICY=PASSIVE (set before torch loads).

Greedy eval accuracy on the held-out set at step 0 and every --eval-every
steps (HF generate, left-padded batches, not counted in the wall-clock).
Seconds per step are split into sampling (TRL's _generate) and the rest
(scoring, log-probs, backward, optimizer). Writes a JSON log like
race_client.py's, with this process's peak RSS.

    bench/race/race_trl.py --gguf path/SmolLM2-135M-Instruct.Q4_1.gguf --steps 20 --out trl.json
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=task.MAX_TOKENS)
    ap.add_argument("--learning-rate", type=float, default=5e-6)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-targets", default=",".join(task.LORA_TARGETS))
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-size", type=int, default=task.EVAL_SIZE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rl-md-scale", action="store_true",
                    help="divide each step's loss by the batch's mean |advantage|: rl.md's normalisation "
                         "(A / mean(|A|·w), zero-advantage trajectories skipped), which TRL's grpo loss lacks")
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    d, f = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    # gguf_file= dequantises every tensor to float32 but leaves the model marked "quantized
    # with GGUF", which the Trainer refuses to train; the weights are plain float32 tensors
    # now, so drop the mark (the model is then what it would be loaded from safetensors).
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    train = task.train_order(a.seed)
    n = a.steps * a.groups
    rows = [{"prompt": task.messages(train[i % len(train)]), "answer": train[i % len(train)]["answer"]}
            for i in range(n)]
    ds = Dataset.from_list(rows)
    evals = task.items("eval")[: a.eval_size]

    def reward(completions, answer, **kw):
        return [task.reward(c[0]["content"] if isinstance(c, list) else c, {"answer": ans})
                for c, ans in zip(completions, answer)]

    batch = a.groups * a.group_size
    cfg = GRPOConfig(
        output_dir="/tmp/race-trl-out", report_to="none", use_cpu=True, seed=a.seed,
        max_steps=a.steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        generation_batch_size=batch, num_generations=a.group_size, num_iterations=1,
        shuffle_dataset=False, temperature=1.0, top_p=1.0, max_completion_length=a.max_tokens,
        learning_rate=a.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, loss_type="grpo", scale_rewards="group",
        logging_steps=1, save_strategy="no", bf16=False, fp16=False, dataloader_num_workers=0,
    )
    lora = LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                      target_modules=a.lora_targets.split(","), task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds,
                          processing_class=tok, peft_config=lora)

    timing = {"sample": 0.0}
    orig = trainer._generate

    def timed_generate(*args, **kw):
        t = time.monotonic()
        try:
            return orig(*args, **kw)
        finally:
            timing["sample"] += time.monotonic() - t
    trainer._generate = timed_generate

    if a.rl_md_scale:
        # With one micro-batch of all 64 completions per step, TRL's grpo loss times
        # 64 / (N_kept · mean_kept |A|) is rl.md's (the std's n vs n−1 cancels in the ratio);
        # that factor is 1 / the mean |advantage| over the batch, zero advantages included.
        orig_loss = trainer.compute_loss

        def rl_md_loss(model, inputs, *args, **kw):
            loss = orig_loss(model, inputs, *args, **kw)
            return loss / inputs["advantages"].abs().mean().clamp(min=1e-6)
        trainer.compute_loss = rl_md_loss

    log = {"side": "trl", "args": vars(a), "steps": [], "evals": []}
    state = {"wall": 0.0, "t": None, "rewards": []}

    def evaluate(step):
        m = trainer.model
        was = m.training
        m.eval()
        ts = time.monotonic()
        replies = []
        with torch.no_grad():
            for i in range(0, len(evals), 32):
                chunk = evals[i:i + 32]
                texts = [tok.apply_chat_template(task.messages(it), tokenize=False, add_generation_prompt=True)
                         for it in chunk]
                enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                out = m.generate(**enc, max_new_tokens=a.max_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
                replies += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        if was:
            m.train()
        acc = sum(task.reward(t, it) for t, it in zip(replies, evals)) / len(evals)
        log["evals"].append({"step": step, "accuracy": acc, "eval_s": time.monotonic() - ts,
                             "wall_s": state["wall"], "examples": replies[:3]})
        print(f"eval step {step}: accuracy {acc:.3f} ({time.monotonic() - ts:.1f}s) e.g. {replies[:3]!r}", flush=True)

    class CB(TrainerCallback):
        def on_step_begin(self, args, st, control, **kw):
            timing["sample"] = 0.0
            state["t"] = time.monotonic()

        def on_log(self, args, st, control, logs=None, **kw):
            if logs and "reward" in logs:
                state["rewards"].append(logs["reward"])

        def on_step_end(self, args, st, control, **kw):
            dt = time.monotonic() - state["t"]
            state["wall"] += dt
            step = st.global_step
            log["steps"].append({"step": step, "sample_s": timing["sample"], "train_s": dt - timing["sample"],
                                 "wall_s": state["wall"]})
            print(f"step {step}: sample {timing['sample']:.1f}s train {dt - timing['sample']:.1f}s "
                  f"wall {state['wall']:.1f}s", flush=True)
            if step % a.eval_every == 0 or step == a.steps:
                evaluate(step)

    trainer.add_callback(CB())
    evaluate(0)
    trainer.train()
    # TRL logs each step's mean reward after the step ends; attach them in order
    for s, r in zip(log["steps"], state["rewards"]):
        s["reward"] = r
    log["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {log['peak_rss_mib']:.0f} MiB", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(log, fh, indent=1)


if __name__ == "__main__":
    main()
