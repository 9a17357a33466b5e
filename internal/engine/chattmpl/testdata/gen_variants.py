#!/usr/bin/env python3
"""Regenerates variants.json.gz: every template of hfjs_e2e_cases.json and the
five main templates rendered by Python Jinja2 (transformers' environment, see
gen_reference.py) with extra conversations: the generation prompt flipped,
tricky message contents, a standard multi-turn chat, a chat without system
message and, for tool-aware templates, tools + tool calls + tool results.

Run from this directory:  python3 gen_variants.py
"""
import copy
import gzip
import io
import json
import random
import os
from datetime import datetime

import jinja2

import gen_reference

gen_reference.env.globals["strftime_now"] = lambda f: datetime(2025, 7, 10, 12, 0, 0).strftime(f)
env = gen_reference.env

TRICKY = [
    "  leading and trailing spaces \n",
    "quotes \"x\" 'y' {{ z }} {% w %} \\ backslash",
    "unicode é 世界 🦙\ttab — “curly”",
    "line1\n\nline2\n",
    "",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city. Returns °C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
]

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! Who are you?"},
    {"role": "assistant", "content": "An assistant."},
    {"role": "user", "content": "What's 2+2?"},
    {"role": "assistant", "content": "4"},
]

TOOL_CHAT = [
    {"role": "system", "content": "Use tools when needed."},
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    {"role": "assistant", "content": "It is 21.5 °C and clear."},
]


def trickify(messages):
    out = copy.deepcopy(messages)
    n = 0
    for m in out:
        c = m.get("content")
        if isinstance(c, str):
            m["content"] = TRICKY[n % len(TRICKY)]
            n += 1
        elif isinstance(c, list):
            for blk in c:
                if isinstance(blk, dict) and isinstance(blk.get("text"), str):
                    blk["text"] = TRICKY[n % len(TRICKY)]
                    n += 1
    return out


def random_chat(rng, with_tools):
    """A random but well-formed conversation (fixed seed, so reproducible)."""
    pieces = ["hi", " ", "\n", "\t", "é", "世界", "🦙", "\"", "'", "{{", "%}", "\\", "  ", "ok.", "<|im_end|>", "\u2028", "a\r\nb"]

    def text():
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))

    msgs = []
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": text()})
    for turn in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": text()})
        if with_tools and rng.random() < 0.4:
            args = {"city": text(), "days": rng.randint(1, 7)}
            if rng.random() < 0.5:
                args["unit"] = rng.choice(["celsius", None, True, 2.5])
            msgs.append({"role": "assistant", "content": rng.choice(["", None, text()]),
                         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": args}}]})
            msgs.append({"role": "tool", "name": "get_weather", "content": text()})
        if turn < 3 or rng.random() < 0.5:
            msgs.append({"role": "assistant", "content": text()})
    return msgs


def render(src, ctx):
    try:
        return {"output": env.from_string(src).render(**ctx)}
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__, "message": str(e)}


def main():
    with open("hfjs_e2e_cases.json", encoding="utf-8") as f:
        h = json.load(f)
    with open("render_contexts.json", encoding="utf-8") as f:
        rc = json.load(f)
    templates = {}
    bases = {}
    for group in ("default", "custom"):
        for name, c in h[group].items():
            src = c["chat_template"]
            key = next((k for k, v in templates.items() if v == src), None)
            if key is None:
                key = name
                templates[key] = src
                bases[key] = c["data"]
    for fn in sorted(os.listdir(".")):
        if fn.endswith(".chat_template.jinja"):
            model = fn[: -len(".chat_template.jinja")]
            with open(fn, encoding="utf-8") as f:
                templates[fn] = f.read()
            base = {k: v for k, v in rc["special_tokens"][model].items()}
            base["messages"] = CHAT[:2]
            bases[fn] = base

    cases = []
    for key, src in templates.items():
        base = bases[key]
        specials = {k: v for k, v in base.items() if k.endswith("_token")}
        variants = {}
        d = copy.deepcopy(base)
        d["add_generation_prompt"] = not base.get("add_generation_prompt", False)
        variants["agp_flipped"] = d
        d = copy.deepcopy(base)
        d["messages"] = trickify(base.get("messages", []))
        variants["tricky"] = d
        variants["chat"] = dict(specials, messages=CHAT, add_generation_prompt=True)
        variants["chat_nosys"] = dict(specials, messages=CHAT[1:], add_generation_prompt=False)
        variants["chat_tricky"] = dict(specials, messages=trickify(CHAT), add_generation_prompt=True)
        if "tools" in src:
            variants["tools"] = dict(specials, messages=TOOL_CHAT, tools=TOOLS, add_generation_prompt=True)
            variants["tools_only"] = dict(specials, messages=CHAT[1:2], tools=TOOLS, add_generation_prompt=True)
        if key.endswith(".chat_template.jinja"):
            rng = random.Random(key)
            for i in range(12):
                tools = "tools" in src and rng.random() < 0.5
                ctx = dict(specials, messages=random_chat(rng, tools), add_generation_prompt=rng.random() < 0.5)
                if tools:
                    ctx["tools"] = TOOLS
                variants["random%02d" % i] = ctx
        for vname, ctx in variants.items():
            case = {"template": key, "variant": vname, "context": ctx}
            case.update(render(src, ctx))
            cases.append(case)
    with open("variants.json.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        json.dump({"_note": "generated by gen_variants.py with jinja2 " + jinja2.__version__ + "; clock 2025-07-10T12:00:00",
                   "templates": templates, "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    ok = sum(1 for c in cases if "output" in c)
    print(f"{len(templates)} templates, {len(cases)} cases, {ok} rendered, {len(cases) - ok} errors")


if __name__ == "__main__":
    main()
