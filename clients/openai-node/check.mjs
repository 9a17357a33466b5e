// Runs the official OpenAI Node SDK (the `openai` package, unmodified)
// against a flywheel binary: `node check.mjs /path/to/flywheel`.
//
// It starts `flywheel serve` on a free loopback port with a temporary data
// dir, then exercises through the SDK: models (list, retrieve), plain
// completions, n/seed/logprobs, streaming with usage (raw and through the
// SDK's stream helper), tools (forced and required, plain and streamed;
// strict), penalties and logit_bias, structured outputs (json_object,
// json_schema through chat.completions.parse), legacy completions (text and
// token-id prompts, echo, logprobs, streaming, vLLM's prompt_logprobs),
// responses (the Agents SDK's request shape, tools across turns with
// previous_response_id, streamed events; retrieve, delete),
// files (upload, retrieve, list, content, delete) and errors, which must
// arrive as the SDK's typed exceptions. Exits non-zero on any failure.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { freePort } from "../lib/net.mjs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { File as NodeFile } from "node:buffer";

globalThis.File ??= NodeFile; // Node 18 has File only in node:buffer
const { default: OpenAI, toFile, NotFoundError, AuthenticationError, BadRequestError } = await import("openai");

const bin = process.argv[2];
if (!bin) {
  console.error("usage: node check.mjs /path/to/flywheel");
  process.exit(2);
}
const KEY = "fw_openai_node_check_0123456789abcdef";
const MODEL = "flywheel/tiny";

const dir = mkdtempSync(join(tmpdir(), "flywheel-openai-node-"));
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
let log = "";
const proc = spawn(bin, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"), "--log-level", "warn"], {
  env: { ...process.env, FLYWHEEL_BOOTSTRAP_API_KEY: KEY },
  stdio: ["ignore", "pipe", "pipe"],
});
proc.stdout.on("data", (d) => (log += d));
proc.stderr.on("data", (d) => (log += d));
let exited = false;
proc.on("exit", () => (exited = true));

function cleanup() {
  if (!exited) proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}

const watchdog = setTimeout(() => {
  console.error("check timed out after 100 s\n--- server log ---\n" + log);
  cleanup();
  process.exit(1);
}, 100_000);

async function waitHealthy() {
  for (let i = 0; i < 300; i++) {
    if (exited) throw new Error("flywheel serve exited:\n" + log);
    try {
      const r = await fetch(`${base}/v1/health`);
      if (r.ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("flywheel serve did not become healthy in 30 s:\n" + log);
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function rejects(promise, Type, check, what) {
  try {
    await promise;
  } catch (e) {
    assert(e instanceof Type, `${what}: got ${e?.constructor?.name} (${e?.status}) ${e?.message}, want ${Type.name}`);
    if (check) check(e);
    return e;
  }
  throw new Error(`${what}: no error, want ${Type.name}`);
}

const client = new OpenAI({ apiKey: KEY, baseURL: `${base}/v1`, maxRetries: 0, timeout: 60_000 });
const msgs = [{ role: "user", content: "Say something." }];
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather forecast",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city", "days"],
    },
  },
};

const checks = {
  async models() {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert(ids.includes(MODEL), `models.list: ${ids}`);
    const m = await client.models.retrieve(MODEL); // the SDK escapes the slash
    assert(m.id === MODEL && m.object === "model", `models.retrieve: ${JSON.stringify(m)}`);
  },

  async plain() {
    const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 8 });
    const c = r.choices[0];
    assert(r.object === "chat.completion" && c.message.role === "assistant" && typeof c.message.content === "string", JSON.stringify(r));
    assert(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens && r.usage.completion_tokens > 0, JSON.stringify(r.usage));
    assert(/^fp_[0-9a-f]+$/.test(r.system_fingerprint), `system_fingerprint ${r.system_fingerprint}`);
  },

  async nSeedLogprobs() {
    const p = { model: MODEL, messages: msgs, max_tokens: 8, n: 3, seed: 7, temperature: 1, logprobs: true, top_logprobs: 2 };
    const a = await client.chat.completions.create(p);
    const b = await client.chat.completions.create(p);
    assert(a.choices.length === 3, `n=3 gave ${a.choices.length}`);
    for (const [i, c] of a.choices.entries()) {
      assert(c.index === i, `index ${c.index}`);
      const lp = c.logprobs.content;
      assert(lp.length > 0 && lp.every((t) => t.logprob <= 0 && Array.isArray(t.bytes) && t.top_logprobs.length === 2), JSON.stringify(lp));
      assert(c.message.content === b.choices[i].message.content, "same seed, different completions");
    }
    assert(a.usage.completion_tokens === a.choices.reduce((s, c) => s + c.logprobs.content.length, 0), "usage vs logprobs");
  },

  async streaming() {
    const p = { model: MODEL, messages: msgs, max_tokens: 10, seed: 3, temperature: 1 };
    const whole = await client.chat.completions.create(p);
    const stream = await client.chat.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      assert(chunk.object === "chat.completion.chunk" && chunk.system_fingerprint === whole.system_fingerprint, JSON.stringify(chunk));
      for (const c of chunk.choices) {
        text += c.delta.content ?? "";
        finish = c.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert(text === whole.choices[0].message.content, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].message.content)}`);
    assert(finish === whole.choices[0].finish_reason, `finish ${finish}`);
    assert(usage && usage.completion_tokens === whole.usage.completion_tokens, `usage ${JSON.stringify(usage)}`);
    // The SDK's stream helper assembles the same completion.
    const final = await client.chat.completions.stream(p).finalChatCompletion();
    assert(final.choices[0].message.content === whole.choices[0].message.content, "stream helper");
  },

  async tools() {
    const forced = await client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 200, seed: 1,
      tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const c = forced.choices[0];
    assert(c.finish_reason === "tool_calls" && c.message.tool_calls?.length === 1, JSON.stringify(forced));
    const call = c.message.tool_calls[0];
    const args = JSON.parse(call.function.arguments);
    assert(call.type === "function" && call.function.name === "get_weather" && typeof args.city === "string" && Number.isInteger(args.days), JSON.stringify(call));
    // "required", streamed through the helper; then the tool result goes back.
    const streamed = await client.chat.completions
      .stream({ model: MODEL, messages: [{ role: "user", content: "Weather?" }], max_tokens: 200, seed: 2, tools: [weather], tool_choice: "required" })
      .finalChatCompletion();
    const sc = streamed.choices[0].message.tool_calls?.[0];
    assert(sc?.function.name === "get_weather" && JSON.parse(sc.function.arguments), JSON.stringify(streamed));
    const next = await client.chat.completions.create({
      model: MODEL, max_tokens: 4, tools: [weather],
      messages: [{ role: "user", content: "Weather in Paris?" }, c.message, { role: "tool", tool_call_id: call.id, content: "sunny" }],
    });
    assert(next.choices.length === 1, "tool result turn");
  },

  async penaltiesAndBias() {
    // A +100 bias on one token makes greedy decoding pick it every time;
    // the penalties are accepted and reflected in the logprobs (their
    // numbers are checked against a float64 reference in Go's tests).
    const r = await client.chat.completions.create({
      model: MODEL, messages: msgs, max_tokens: 6, temperature: 0, logit_bias: { "65": 100 }, logprobs: true,
      presence_penalty: 0.5, frequency_penalty: 0.1, repetition_penalty: 1.1, ignore_eos: true, return_tokens_as_token_ids: true,
    });
    const toks = r.choices[0].logprobs.content.map((t) => t.token);
    assert(toks.length === 6 && toks.every((t) => t === "token_id:65"), JSON.stringify(toks));
    await rejects(client.chat.completions.create({ model: MODEL, messages: msgs, frequency_penalty: 3 }), BadRequestError,
      (e) => assert(e.param === "frequency_penalty", `param ${e.param}`), "frequency_penalty out of range");
  },

  async structuredOutputs() {
    const schema = {
      type: "object",
      properties: {
        name: { type: "string" },
        age: { type: "integer" },
        tags: { type: "array", items: { type: "string", enum: ["a", "b"] } },
        pet: { anyOf: [{ type: "null" }, { $ref: "#/$defs/pet" }] },
      },
      required: ["name", "age", "tags", "pet"],
      additionalProperties: false,
      $defs: { pet: { type: "object", properties: { kind: { type: "string" } }, required: ["kind"], additionalProperties: false } },
    };
    const r = await client.chat.completions.parse({
      model: MODEL, messages: [{ role: "user", content: "A person." }], max_tokens: 80, n: 4, temperature: 1.5, seed: 5,
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } },
    });
    for (const c of r.choices) {
      const p = c.message.parsed;
      assert(p && typeof p.name === "string" && Number.isInteger(p.age) && Array.isArray(p.tags) && p.tags.every((t) => t === "a" || t === "b"), JSON.stringify(c.message));
      assert(p.pet === null || typeof p.pet.kind === "string", JSON.stringify(p));
      assert(Object.keys(p).join() === "name,age,tags,pet", JSON.stringify(p));
    }
    const o = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 40, temperature: 1.5, seed: 1, response_format: { type: "json_object" } });
    const v = JSON.parse(o.choices[0].message.content);
    assert(v && typeof v === "object" && !Array.isArray(v), o.choices[0].message.content);
    await rejects(
      client.chat.completions.create({ model: MODEL, messages: msgs, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } } }),
      BadRequestError, (e) => assert(e.param === "response_format.json_schema.schema.pattern", `param ${e.param}`), "a schema keyword outside the subset",
    );
    // a forced call of a strict tool follows its schema
    const strictTool = { type: "function", function: { ...weather.function, strict: true, parameters: { ...weather.function.parameters, additionalProperties: false } } };
    const t = await client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Weather?" }], max_tokens: 100, seed: 3, temperature: 1.5,
      tools: [strictTool], tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const args = JSON.parse(t.choices[0].message.tool_calls[0].function.arguments);
    assert(typeof args.city === "string" && Number.isInteger(args.days) && Object.keys(args).length === 2, JSON.stringify(args));
  },

  async completions() {
    const r = await client.completions.create({ model: MODEL, prompt: "The flywheel", max_tokens: 6, temperature: 0, echo: true, logprobs: 2 });
    const c = r.choices[0];
    assert(r.object === "text_completion" && c.text.startsWith("The flywheel"), JSON.stringify(r));
    const lp = c.logprobs;
    assert(lp.tokens.length === lp.token_logprobs.length && lp.token_logprobs[0] === null && lp.text_offset[0] === 0, JSON.stringify(lp));
    assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, JSON.stringify(r.usage));
    const b = await client.completions.create({ model: MODEL, prompt: [[5, 6, 7], [8, 9]], max_tokens: 3, n: 2, seed: 1, prompt_logprobs: 1 });
    assert(b.choices.length === 4 && b.choices.map((x) => x.index).join() === "0,1,2,3", JSON.stringify(b));
    assert(b.choices[0].prompt_logprobs.length === 3 && b.choices[0].prompt_logprobs[0] === null && b.choices[0].prompt_logprobs[1]["6"], JSON.stringify(b.choices[0].prompt_logprobs));
    const p = { model: MODEL, prompt: "Once", max_tokens: 8, seed: 2, temperature: 1 };
    const whole = await client.completions.create(p);
    let text = "";
    let usage = null;
    for await (const chunk of await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } })) {
      for (const x of chunk.choices) text += x.text;
      if (chunk.usage) usage = chunk.usage;
    }
    assert(text === whole.choices[0].text && usage?.completion_tokens === whole.usage.completion_tokens, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].text)}`);
    await rejects(client.completions.create({ model: MODEL, prompt: "x", suffix: "y" }), BadRequestError, (e) => assert(e.param === "suffix", `param ${e.param}`), "suffix");
  },

  async responses() {
    // The Agents SDK's shape: input items, function tools with strict, store.
    const tool = { type: "function", name: "get_weather", description: "Weather", strict: true,
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false } };
    const r1 = await client.responses.create({
      model: MODEL, instructions: "You are terse.", input: [{ role: "user", content: "Weather in Paris?" }],
      tools: [tool], tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 60, store: true,
      parallel_tool_calls: false, truncation: "disabled", include: [], text: { format: { type: "text" } },
    });
    const call = r1.output.find((o) => o.type === "function_call");
    assert(r1.object === "response" && call?.name === "get_weather" && typeof JSON.parse(call.arguments).city === "string", JSON.stringify(r1));
    const r2 = await client.responses.create({
      model: MODEL, previous_response_id: r1.id, tools: [tool], max_output_tokens: 6,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
    });
    assert(r2.previous_response_id === r1.id && typeof r2.output_text === "string" && r2.usage.input_tokens > r1.usage.input_tokens, JSON.stringify(r2));
    // streamed events assemble the text
    const stream = await client.responses.create({ model: MODEL, input: "Hello", max_output_tokens: 8, stream: true });
    let text = "";
    let done = null;
    for await (const ev of stream) {
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed") done = ev.response;
    }
    const final = done?.output?.[0]?.content?.[0]?.text;
    assert(done?.status && final === text, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(final)}`);
    // stored: read back as created, deleted, then gone
    const got = await client.responses.retrieve(r2.id);
    assert(got.id === r2.id && got.output_text === r2.output_text && got.previous_response_id === r1.id, JSON.stringify(got));
    await client.responses.delete(r2.id);
    await rejects(client.responses.retrieve(r2.id), NotFoundError, null, "a deleted response");
    await rejects(client.responses.create({ model: MODEL, input: "x", previous_response_id: "resp_nope" }), NotFoundError,
      (e) => assert(e.param === "previous_response_id", `param ${e.param}`), "an unknown previous_response_id");
  },

  async files() {
    const data = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n';
    const f = await client.files.create({ file: await toFile(Buffer.from(data), "train.jsonl"), purpose: "fine-tune" });
    assert(f.id.startsWith("file-") && f.object === "file" && f.bytes === data.length && f.filename === "train.jsonl" && f.purpose === "fine-tune", JSON.stringify(f));
    const got = await client.files.retrieve(f.id);
    assert(got.id === f.id && got.bytes === f.bytes, JSON.stringify(got));
    const ids = [];
    for await (const x of client.files.list()) ids.push(x.id);
    assert(ids.includes(f.id), `files.list: ${ids}`);
    const ft = [];
    for await (const x of client.files.list({ purpose: "fine-tune", limit: 1 })) ft.push(x.id); // paged one by one
    assert(ft.includes(f.id), `files.list(purpose): ${ft}`);
    const content = await (await client.files.content(f.id)).text();
    assert(content === data, `files.content: ${JSON.stringify(content)}`);
    const del = await client.files.delete(f.id);
    assert(del.id === f.id && del.deleted === true && del.object === "file", JSON.stringify(del));
    await rejects(client.files.retrieve(f.id), NotFoundError, null, "retrieve a deleted file");
    await rejects(
      client.files.create({ file: await toFile(Buffer.from(data), "x.jsonl"), purpose: "fine-tuning" }),
      BadRequestError, (e) => assert(e.param === "purpose", `param ${e.param}`), "an unknown purpose",
    );
  },

  async errors() {
    await rejects(client.chat.completions.create({ model: "no/such-model", messages: msgs }), NotFoundError,
      (e) => assert(e.code === "model_not_found" && e.param === "model", `code ${e.code} param ${e.param}`), "unknown model");
    await rejects(client.models.retrieve("nope"), NotFoundError, (e) => assert(e.code === "model_not_found", `code ${e.code}`), "models.retrieve unknown");
    await rejects(client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 5 }), BadRequestError,
      (e) => assert(e.param === "temperature", `param ${e.param}`), "temperature out of range");
    const bad = new OpenAI({ apiKey: "fw_wrong", baseURL: `${base}/v1`, maxRetries: 0 });
    await rejects(bad.models.list(), AuthenticationError, null, "a wrong key");
  },

  async trainedModel() {
    // A trained model (created through the preview API with the SDK's generic
    // post) is sampled by entity/project/name and retrieved by id.
    const m = await client.post("/preview/models", { body: { project: "sdk", name: "m1", base_model: MODEL } });
    const name = `${m.entity}/sdk/m1`;
    const r = await client.chat.completions.create({ model: `${name}:step0`, messages: msgs, max_tokens: 4 });
    assert(r.model === `${name}:step0` && r.choices.length === 1, JSON.stringify(r));
    const card = await client.models.retrieve(name);
    assert(card.id === name && card.owned_by === m.entity, JSON.stringify(card));
  },
};

let failed = 0;
let passed = 0;
try {
  await waitHealthy();
  for (const [name, fn] of Object.entries(checks)) {
    const t0 = Date.now();
    try {
      await fn();
      passed++;
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e?.stack ?? e}`);
    }
  }
} catch (e) {
  failed++;
  console.log(`FAIL setup: ${e?.stack ?? e}`);
}
if (failed > 0) console.log("--- server log ---\n" + log);
console.log(`the openai package ${(await import("openai/version")).VERSION}, node ${process.version}`);
console.log(`openai-node: ${passed} passed, ${failed} failed`);
clearTimeout(watchdog);
cleanup();
process.exit(failed > 0 ? 1 : 0);
