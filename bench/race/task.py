#!/usr/bin/env python3
"""The race's task: short arithmetic, answered with the number alone.

A seeded generator of a fixed train set and a held-out eval set of prompts
("What is 37 + 48? Reply with the number only.") and the verifiable reward:
1.0 when the reply, stripped of surrounding whitespace and a final period, is
exactly the correct number, else 0.0. Both sides of the race (flywheel's
client, race_client.py; TRL, race_trl.py) import this module, so they train
and evaluate on the same items with the same reward.

    python3 bench/race/task.py [--seed 0] [--show 5]   prints a few items
"""
import argparse
import random
import re

SYSTEM = None  # no system message: the chat template's default is used on both sides
TRAIN_SIZE, EVAL_SIZE = 250, 150
MAX_TOKENS = 10
LO, HI = 1, 20
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _item(rng):
    a, b = rng.randint(LO, HI), rng.randint(LO, HI)
    return {"prompt": f"What is {a} + {b}? Reply with the number only.", "answer": str(a + b)}


def items(split, seed=0):
    """The split's items ("train" or "eval"), the same for a given seed on every machine.
    The eval set is drawn from its own stream and never shares a prompt with the train set."""
    rng = random.Random(f"race-{seed}")
    train, seen = [], set()
    while len(train) < TRAIN_SIZE:
        it = _item(rng)
        if it["prompt"] not in seen:
            seen.add(it["prompt"])
            train.append(it)
    if split == "train":
        return train
    ev = []
    while len(ev) < EVAL_SIZE:
        it = _item(rng)
        if it["prompt"] not in seen:
            seen.add(it["prompt"])
            ev.append(it)
    return ev


def train_order(seed):
    """The train set in the order a run with this seed visits it."""
    its = items("train")
    random.Random(seed).shuffle(its)
    return its


def messages(item):
    return [{"role": "user", "content": item["prompt"]}]


_NUM = re.compile(r"-?\d+")


def reward(reply, item):
    """1.0 when the last number in the reply is the answer, else 0.0."""
    nums = _NUM.findall(reply or "")
    return 1.0 if nums and nums[-1] == item["answer"] else 0.0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5)
    a = ap.parse_args()
    for split in ("train", "eval"):
        its = items(split, a.seed)
        print(split, len(its))
        for it in its[: a.show]:
            print("  ", it["prompt"], "->", it["answer"])
