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
trained model by name, penalties and logit_bias, structured outputs
(client.chat.completions.parse with pydantic models, json_object, a strict
tool), legacy completions (echo, logprobs, batched token-id prompts, vLLM's
prompt_logprobs, streaming) and responses (the Agents SDK's request shape: a
function tool, its output sent back with previous_response_id, streamed
events; retrieve and delete). Exits non-zero on any failure.
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

    def penalties_and_bias():
        # A +100 bias on one token makes greedy decoding pick it every time;
        # the penalties are accepted and reflected in the logprobs (their
        # numbers are checked against a float64 reference in Go's tests).
        r = client.chat.completions.create(
            model=MODEL, messages=MSGS, max_tokens=6, temperature=0, logit_bias={"65": 100}, logprobs=True,
            presence_penalty=0.5, frequency_penalty=0.1,
            extra_body={"repetition_penalty": 1.1, "ignore_eos": True, "return_tokens_as_token_ids": True})
        toks = [t.token for t in r.choices[0].logprobs.content]
        ensure(len(toks) == 6 and all(t == "token_id:65" for t in toks), toks)
        rejects(lambda: client.chat.completions.create(model=MODEL, messages=MSGS, frequency_penalty=3),
                openai.BadRequestError, "frequency_penalty out of range",
                lambda e: ensure(e.param == "frequency_penalty", e.param))

    def parse():
        from typing import Literal, Optional, Union

        from pydantic import BaseModel, ConfigDict

        class Forecast(BaseModel):
            city: str
            days: int

        r = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                          max_tokens=200, seed=1, response_format=Forecast)
        p = r.choices[0].message.parsed
        ensure(isinstance(p, Forecast), r)

        # The SDK turns the model into a strict schema ($defs, $ref, anyOf
        # with null, an enum of strings, additionalProperties: false).
        class Pet(BaseModel):
            model_config = ConfigDict(extra="forbid")
            kind: str

        class Person(BaseModel):
            model_config = ConfigDict(extra="forbid")
            name: str
            age: int
            tags: list[Literal["a", "b"]]
            pet: Optional[Union[Pet, None]]

        r = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "A person."}],
                                          max_tokens=80, n=4, temperature=1.5, seed=5, response_format=Person)
        for c in r.choices:
            p = c.message.parsed
            ensure(isinstance(p, Person) and all(t in ("a", "b") for t in p.tags), c.message)
            ensure(list(json.loads(c.message.content)) == ["name", "age", "tags", "pet"], c.message.content)

    def structured_outputs():
        o = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=40, temperature=1.5, seed=1,
                                           response_format={"type": "json_object"})
        v = json.loads(o.choices[0].message.content)
        ensure(isinstance(v, dict), o.choices[0].message.content)
        rejects(lambda: client.chat.completions.create(
            model=MODEL, messages=MSGS, response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "pattern": "^a"}}}),
            openai.BadRequestError, "a schema keyword outside the subset",
            lambda e: ensure(e.param == "response_format.json_schema.schema.pattern", e.param))
        # a forced call of a strict tool follows its schema
        fn = dict(WEATHER["function"], strict=True, parameters=dict(WEATHER["function"]["parameters"], additionalProperties=False))
        t = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather?"}], max_tokens=100, seed=3, temperature=1.5,
            tools=[{"type": "function", "function": fn}], tool_choice={"type": "function", "function": {"name": "get_weather"}})
        args = json.loads(t.choices[0].message.tool_calls[0].function.arguments)
        ensure(isinstance(args.get("city"), str) and isinstance(args.get("days"), int) and len(args) == 2, args)

    def completions():
        r = client.completions.create(model=MODEL, prompt="The flywheel", max_tokens=6, temperature=0, echo=True, logprobs=2)
        c = r.choices[0]
        ensure(r.object == "text_completion" and c.text.startswith("The flywheel"), r)
        lp = c.logprobs
        ensure(len(lp.tokens) == len(lp.token_logprobs) and lp.token_logprobs[0] is None and lp.text_offset[0] == 0, lp)
        ensure(all(x <= 0 for x in lp.token_logprobs[1:]) and len(lp.top_logprobs[-1]) == 2, lp)
        ensure(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)
        b = client.completions.create(model=MODEL, prompt=[[5, 6, 7], [8, 9]], max_tokens=3, n=2, seed=1,
                                      extra_body={"prompt_logprobs": 1})
        ensure([x.index for x in b.choices] == [0, 1, 2, 3], b)
        pl = b.choices[0].model_extra["prompt_logprobs"]
        ensure(len(pl) == 3 and pl[0] is None and "6" in pl[1] and pl[1]["6"]["logprob"] <= 0, pl)
        p = dict(model=MODEL, prompt="Once", max_tokens=8, seed=2, temperature=1)
        whole = client.completions.create(**p)
        text, usage = "", None
        for chunk in client.completions.create(**p, stream=True, stream_options={"include_usage": True}):
            text += "".join(x.text for x in chunk.choices)
            usage = chunk.usage or usage
        ensure(text == whole.choices[0].text and usage and usage.completion_tokens == whole.usage.completion_tokens,
               f"streamed {text!r} vs {whole.choices[0].text!r}")
        rejects(lambda: client.completions.create(model=MODEL, prompt="x", suffix="y"), openai.BadRequestError,
                "suffix", lambda e: ensure(e.param == "suffix", e.param))

    def responses():
        # The Agents SDK's shape: input items, function tools with strict, store.
        tool = {"type": "function", "name": "get_weather", "description": "Weather", "strict": True,
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                               "additionalProperties": False}}
        r1 = client.responses.create(
            model=MODEL, instructions="You are terse.", input=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[tool], tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60, store=True,
            parallel_tool_calls=False, truncation="disabled", include=[], text={"format": {"type": "text"}})
        call = next((o for o in r1.output if o.type == "function_call"), None)
        ensure(r1.object == "response" and call is not None and call.name == "get_weather"
               and isinstance(json.loads(call.arguments).get("city"), str), r1)
        r2 = client.responses.create(model=MODEL, previous_response_id=r1.id, tools=[tool], max_output_tokens=6,
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
        ensure(r2.previous_response_id == r1.id and isinstance(r2.output_text, str)
               and r2.usage.input_tokens > r1.usage.input_tokens, r2)
        # streamed events assemble the text
        text, done, kinds = "", None, []
        for ev in client.responses.create(model=MODEL, input="Hello", max_output_tokens=8, stream=True):
            kinds.append(ev.type)
            if ev.type == "response.output_text.delta":
                text += ev.delta
            if ev.type == "response.completed":
                done = ev.response
        ensure(kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds)
        ensure(done is not None and done.status and done.output[0].content[0].text == text, f"streamed {text!r} vs {done}")
        # stored: read back as created, deleted, then gone
        got = client.responses.retrieve(r2.id)
        ensure(got.id == r2.id and got.output_text == r2.output_text and got.previous_response_id == r1.id, got)
        client.responses.delete(r2.id)
        rejects(lambda: client.responses.retrieve(r2.id), openai.NotFoundError, "a deleted response")
        rejects(lambda: client.responses.create(model=MODEL, input="x", previous_response_id="resp_nope"),
                openai.NotFoundError, "an unknown previous_response_id",
                lambda e: ensure(e.param == "previous_response_id", e.param))

    return {"models": models, "plain": plain, "n_seed_logprobs": n_seed_logprobs, "streaming": streaming, "tools": tools,
            "files": files, "errors": errors, "trained_model": trained_model, "penalties_and_bias": penalties_and_bias, "parse": parse,
            "structured_outputs": structured_outputs, "completions": completions, "responses": responses}


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
