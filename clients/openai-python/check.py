"""OpenAI's Python SDK (`openai` from PyPI, unmodified; pinned by
clients/weave-python/requirements.txt, the lock of both Python SDK checks)
against a built flywheel binary:

    python check.py /path/to/flywheel

The same checks as clients/openai-node/check.mjs, through the Python SDK: it
starts `flywheel serve` on a free loopback port with a temporary data dir and
exercises models (list, retrieve), plain completions, n/seed/logprobs,
streaming with usage (raw and through the SDK's stream helper), tools (forced
and required, plain and streamed, then the tool result), files (upload,
retrieve, list, content, delete), errors as the SDK's typed exceptions, a
trained model by name, and client.chat.completions.parse (structured outputs)
when the server serves response_format json_schema. Exits non-zero on any
failure.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from flywheel_server import Checks, Server, watchdog  # noqa: E402

MODEL = "flywheel/tiny"
MSGS = [{"role": "user", "content": "Say something."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city", "days"]}}}


class Failed(Exception):
    pass


def ensure(cond: bool, msg: object) -> None:
    if not cond:
        raise Failed(str(msg)[:2000])


def rejects(fn, typ, what: str, check=None):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        ensure(isinstance(e, typ), f"{what}: got {type(e).__name__} ({getattr(e, 'status_code', None)}) {e}, want {typ.__name__}")
        if check:
            check(e)
        return e
    raise Failed(f"{what}: no error, want {typ.__name__}")


def make_checks(openai, client, base: str, key: str):
    def models():
        ids = [m.id for m in client.models.list()]
        ensure(MODEL in ids, f"models.list: {ids}")
        m = client.models.retrieve(MODEL)
        ensure(m.id == MODEL and m.object == "model", m)

    def plain():
        r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8)
        c = r.choices[0]
        ensure(r.object == "chat.completion" and c.message.role == "assistant" and isinstance(c.message.content, str), r)
        ensure(c.finish_reason in ("stop", "length"), c.finish_reason)
        u = r.usage
        ensure(u.total_tokens == u.prompt_tokens + u.completion_tokens and u.completion_tokens > 0, u)
        ensure(re.fullmatch(r"fp_[0-9a-f]+", r.system_fingerprint or ""), r.system_fingerprint)

    def n_seed_logprobs():
        p = dict(model=MODEL, messages=MSGS, max_tokens=8, n=3, seed=7, temperature=1, logprobs=True, top_logprobs=2)
        a = client.chat.completions.create(**p)
        b = client.chat.completions.create(**p)
        ensure(len(a.choices) == 3, f"n=3 gave {len(a.choices)}")
        for i, c in enumerate(a.choices):
            ensure(c.index == i, c.index)
            lp = c.logprobs.content
            ensure(lp and all(t.logprob <= 0 and isinstance(t.bytes, list) and len(t.top_logprobs) == 2 for t in lp), lp)
            ensure(c.message.content == b.choices[i].message.content, "same seed, different completions")
        ensure(a.usage.completion_tokens == sum(len(c.logprobs.content) for c in a.choices), "usage vs logprobs")

    def streaming():
        p = dict(model=MODEL, messages=MSGS, max_tokens=10, seed=3, temperature=1)
        whole = client.chat.completions.create(**p)
        text, usage, finish = "", None, None
        for chunk in client.chat.completions.create(**p, stream=True, stream_options={"include_usage": True}):
            ensure(chunk.object == "chat.completion.chunk" and chunk.system_fingerprint == whole.system_fingerprint, chunk)
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        ensure(text == whole.choices[0].message.content, f"streamed {text!r} vs {whole.choices[0].message.content!r}")
        ensure(finish == whole.choices[0].finish_reason, finish)
        ensure(usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage)
        # The SDK's stream helper assembles the same completion (it raises
        # LengthFinishReasonError, carrying it, when max_tokens cut it short).
        try:
            with client.chat.completions.stream(**p) as s:
                final = s.get_final_completion()
        except openai.LengthFinishReasonError as e:
            final = e.completion
        ensure(final.choices[0].message.content == whole.choices[0].message.content, "stream helper")

    def tools():
        forced = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=200, seed=1,
            tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
        c = forced.choices[0]
        ensure(c.finish_reason == "tool_calls" and c.message.tool_calls and len(c.message.tool_calls) == 1, forced)
        call = c.message.tool_calls[0]
        args = json.loads(call.function.arguments)
        ensure(call.type == "function" and call.function.name == "get_weather" and isinstance(args.get("city"), str)
               and isinstance(args.get("days"), int), call)
        with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "Weather?"}], max_tokens=200,
                                            seed=2, tools=[WEATHER], tool_choice="required") as s:
            streamed = s.get_final_completion()
        sc = (streamed.choices[0].message.tool_calls or [None])[0]
        ensure(sc is not None and sc.function.name == "get_weather" and json.loads(sc.function.arguments), streamed)
        nxt = client.chat.completions.create(model=MODEL, max_tokens=4, tools=[WEATHER], messages=[
            {"role": "user", "content": "Weather in Paris?"}, c.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
        ensure(len(nxt.choices) == 1, "tool result turn")

    def files():
        data = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
        f = client.files.create(file=("train.jsonl", data), purpose="fine-tune")
        ensure(f.id.startswith("file-") and f.object == "file" and f.bytes == len(data) and f.filename == "train.jsonl"
               and f.purpose == "fine-tune", f)
        got = client.files.retrieve(f.id)
        ensure(got.id == f.id and got.bytes == f.bytes, got)
        ensure(f.id in [x.id for x in client.files.list()], "files.list")
        ensure(f.id in [x.id for x in client.files.list(purpose="fine-tune", limit=1)], "files.list(purpose), paged one by one")
        ensure(client.files.content(f.id).content == data, "files.content")
        d = client.files.delete(f.id)
        ensure(d.id == f.id and d.deleted is True and d.object == "file", d)
        rejects(lambda: client.files.retrieve(f.id), openai.NotFoundError, "retrieve a deleted file")
        rejects(lambda: client.files.create(file=("x.jsonl", data), purpose="fine-tuning"), openai.BadRequestError,
                "an unknown purpose", lambda e: ensure(e.param == "purpose", e.param))

    def errors():
        rejects(lambda: client.chat.completions.create(model="no/such-model", messages=MSGS), openai.NotFoundError,
                "unknown model", lambda e: ensure(e.code == "model_not_found" and e.param == "model", (e.code, e.param)))
        rejects(lambda: client.models.retrieve("nope"), openai.NotFoundError, "models.retrieve unknown",
                lambda e: ensure(e.code == "model_not_found", e.code))
        rejects(lambda: client.chat.completions.create(model=MODEL, messages=MSGS, temperature=5), openai.BadRequestError,
                "temperature out of range", lambda e: ensure(e.param == "temperature", e.param))
        bad = openai.OpenAI(api_key="fw_wrong", base_url=f"{base}/v1", max_retries=0)
        rejects(lambda: bad.models.list(), openai.AuthenticationError, "a wrong key")

    def trained_model():
        m = client.post("/preview/models", body={"project": "sdk", "name": "m1", "base_model": MODEL}, cast_to=object)
        name = f"{m['entity']}/sdk/m1"
        r = client.chat.completions.create(model=f"{name}:step0", messages=MSGS, max_tokens=4)
        ensure(r.model == f"{name}:step0" and len(r.choices) == 1, r)
        card = client.models.retrieve(name)
        ensure(card.id == name and card.owned_by == m["entity"], card)

    def parse():
        from pydantic import BaseModel

        class Forecast(BaseModel):
            city: str
            days: int

        try:
            r = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                              max_tokens=200, seed=1, response_format=Forecast)
        except openai.BadRequestError as e:
            if "response_format" in str(e):
                return "skipped: this build does not serve response_format json_schema (" + str(e.message)[:200] + ")"
            raise
        p = r.choices[0].message.parsed
        ensure(isinstance(p, Forecast), r)

    return {"models": models, "plain": plain, "n_seed_logprobs": n_seed_logprobs, "streaming": streaming, "tools": tools,
            "files": files, "errors": errors, "trained_model": trained_model, "parse": parse}


def main(binary: str) -> int:
    import openai

    server = Server(binary)
    c = Checks()
    timer = watchdog(server, 150)
    try:
        client = openai.OpenAI(api_key=server.admin_key, base_url=f"{server.base}/v1", max_retries=0, timeout=60)
        for name, fn in make_checks(openai, client, server.base, server.admin_key).items():
            t0 = time.monotonic()
            try:
                note = fn()
                if note:
                    print(f"--   {name}: {note}", flush=True)
                else:
                    c.check(f"{name} ({(time.monotonic() - t0) * 1000:.0f} ms)", True)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                c.check(name, False, "".join(traceback.format_exception(e))[-3000:])
    finally:
        timer.cancel()
        if c.failed:
            print("--- the server's log\n" + server.tail(), flush=True)
        server.stop()
    print(f"the openai package {openai.__version__}, Python {sys.version.split()[0]}")
    print(f"openai-python: {c.passed} passed, {c.failed} failed", flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.exists(sys.argv[1]):
        print("usage: check.py /path/to/flywheel", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
