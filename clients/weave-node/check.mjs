// Runs Weave's TypeScript SDK (the `weave` package from npm, unmodified)
// against a built flywheel binary and checks what it logged:
//
//   FLYWHEEL_BIN=/path/to/flywheel node check.mjs
//
// It starts `flywheel serve` on a free loopback port with a temporary data
// dir, points the SDK at it (WF_TRACE_SERVER_URL, WANDB_API_KEY = the admin
// key the server writes at first start), logs ops through weave.op (a root
// op calling a child op, with token usage), and reads them back through
// /call/read and /calls/stream_query (raw HTTP and the SDK's own getCalls),
// the op object through /obj/read and the SDK's client.get, and the op's
// code through /file/content; then saves a weave.Dataset (its table read back
// through /table/query and client.get), runs a weave.Evaluation with two
// scorers and an EvaluationLogger, and finds their calls. Another user's key
// must get 403. Any mismatch exits non-zero.

import { spawn, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { freePort } from '../lib/net.mjs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const t0 = Date.now();
let passed = 0;
let failed = 0;

function check(name, cond, detail) {
  if (cond) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}${detail === undefined ? '' : ': ' + (typeof detail === 'string' ? detail : JSON.stringify(detail))}`);
  }
}

function deepEqual(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// pyDumps is Python's json.dumps (separators ", " and ": ", non-ASCII as
// \uXXXX, keys in order or sorted): the text whose byte length is a call's
// storage size, and (sorted) whose SHA-256 is an object's digest.
function pyDumps(v, sortKeys = false) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return JSON.stringify(v).replace(/[\u007f-\uffff]/g, c => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : String(v);
  if (typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return '[' + v.map(x => pyDumps(x, sortKeys)).join(', ') + ']';
  let keys = Object.keys(v);
  if (sortKeys) keys = keys.sort();
  return '{' + keys.map(k => pyDumps(k) + ': ' + pyDumps(v[k], sortKeys)).join(', ') + '}';
}

function weaveDigest(bytes) {
  return createHash('sha256').update(bytes).digest('base64url').replace(/-/g, 'X').replace(/_/g, 'Y').replace(/=/g, '');
}

const bin = process.env.FLYWHEEL_BIN;
if (!bin || !existsSync(bin)) {
  console.error('set FLYWHEEL_BIN to a built flywheel binary (go build -o /tmp/flywheel ./cmd/flywheel)');
  process.exit(2);
}
const tmp = mkdtempSync(path.join(os.tmpdir(), 'flywheel-weave-'));
const dataDir = path.join(tmp, 'data');
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const server = spawn(bin, ['serve', '--addr', `127.0.0.1:${port}`, '--data-dir', dataDir, '--workers', '1', '--log-level', 'error'], {
  stdio: ['ignore', 'inherit', 'inherit'],
  env: { ...process.env, FLYWHEEL_BOOTSTRAP_API_KEY: '' },
});
let serverExited = false;
server.on('exit', () => { serverExited = true; });

function cleanup() {
  if (!serverExited) server.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
}
// The server never outlives this script, whatever ends it.
process.on('exit', () => { if (!serverExited) server.kill('SIGKILL'); });
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { cleanup(); process.exit(1); });
}
// A watchdog: a hung SDK call fails the check instead of stalling CI.
const watchdog = setTimeout(() => {
  console.log('FAIL the check did not finish in 120 s');
  console.log(`${passed} passed, ${failed + 1} failed`);
  cleanup();
  process.exit(1);
}, 120_000);
watchdog.unref();

async function main() {
  // wait for the server (it writes the admin key at first start)
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (serverExited) throw new Error('flywheel serve exited before it was ready');
    try {
      const r = await fetch(`${base}/v1/health`);
      if (r.ok) break;
    } catch { /* not up yet */ }
    if (Date.now() > deadline) throw new Error('flywheel serve did not become ready in 60 s');
    await new Promise(r => setTimeout(r, 100));
  }
  const adminKey = readFileSync(path.join(dataDir, 'admin-api-key'), 'utf8').trim();
  const bobKey = execFileSync(bin, ['keys', 'create', '--data-dir', dataDir, '--user', 'bob'], { encoding: 'utf8' }).trim();

  const project = 'admin/weave-ci';
  const basic = key => 'Basic ' + Buffer.from(`api:${key}`).toString('base64');
  async function post(route, body, key = adminKey) {
    const r = await fetch(base + route, { method: 'POST', headers: { Authorization: basic(key), 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, text: await r.text(), type: r.headers.get('content-type') };
  }
  async function postJSON(route, body, key) {
    const r = await post(route, body, key);
    if (r.status !== 200) throw new Error(`${route}: ${r.status} ${r.text}`);
    return JSON.parse(r.text);
  }

  // The SDK, as a user configures it: the trace server URL and the key. HOME
  // is a temporary folder so login's netrc write stays there.
  process.env.HOME = tmp;
  writeFileSync(path.join(tmp, '.netrc'), '', { mode: 0o600 });
  process.env.WF_TRACE_SERVER_URL = base;
  process.env.WANDB_API_KEY = adminKey;
  // Preflight: the object and file routes authenticate like the call store
  // (a 401 here means the server does not authenticate /obj/*).
  const pre = await post('/objs/query', { project_id: project });
  if (pre.status !== 200) throw new Error(`/objs/query with the admin key: ${pre.status} ${pre.text}`);
  const weave = require('weave');

  // login probes GET /health with the key
  await weave.login(adminKey, `127.0.0.1:${port}`);
  check('weave.login (GET /health)', true);

  // a project price, so include_costs has something to report
  await postJSON('/cost/create', { project_id: project, costs: { 'gpt-4': { prompt_token_cost: 3e-05, completion_token_cost: 6e-05 } } });

  const client = await weave.init(project);
  const add = weave.op(function add(a, b) {
    return { sum: a + b, note: 'café' };
  }, { parameterNames: ['a', 'b'], summarize: () => ({ usage: { 'gpt-4': { prompt_tokens: 10, completion_tokens: 5 } } }) });
  const pipeline = weave.op(async function pipeline(x) {
    const r = await add(x, 3);
    return r.sum * 2;
  }, { parameterNames: ['x'] });
  const out = await pipeline(2);
  check('the ops ran', out === 10, out);
  const cfgRef = await client.publish({ b: 1, a: [1, 'é'], nested: { z: true, y: null } }, 'ci-config');
  await client.waitForBatchProcessing();

  // --- the op objects and their code
  const addObj = (await postJSON('/obj/read', { project_id: project, object_id: 'add', digest: 'latest' })).obj;
  check('/obj/read add: kind op', addObj.kind === 'op', addObj);
  check('/obj/read add: ObjSchema keys', deepEqual(Object.keys(addObj), ['project_id', 'object_id', 'created_at', 'deleted_at', 'digest',
    'version_index', 'is_latest', 'kind', 'base_object_class', 'leaf_object_class', 'val', 'platform_user_id', 'size_bytes']), Object.keys(addObj));
  check('/obj/read add: digest = sha256 of the sorted JSON', addObj.digest === weaveDigest(pyDumps(addObj.val, true)), addObj.digest);
  check('/obj/read add: version 0, latest', addObj.version_index === 0 && addObj.is_latest === 1, addObj);
  const fileDigest = addObj.val?.files?.['obj.py'];
  const code = await post('/file/content', { project_id: project, digest: fileDigest });
  check('/file/content: the op code', code.status === 200 && code.text.includes('a + b') && code.type === 'application/octet-stream', code);
  check('/file/content: digest = sha256 of the bytes', weaveDigest(Buffer.from(code.text)) === fileDigest, fileDigest);
  const byDigest = (await postJSON('/obj/read', { project_id: project, object_id: 'add', digest: addObj.digest })).obj;
  check('/obj/read by digest', byDigest.digest === addObj.digest && deepEqual(byDigest.val, addObj.val));
  const sdkVal = await client.get(new weave.ObjectRef(project, 'add', addObj.digest));
  check("the SDK's client.get reads the op object", deepEqual(sdkVal, addObj.val), sdkVal);
  const cfg = (await postJSON('/obj/read', { project_id: project, object_id: 'ci-config', digest: cfgRef.digest })).obj;
  check('published object: digest as Weave computes it', cfgRef.digest === weaveDigest('{"a": [1, "\\u00e9"], "b": 1, "nested": {"y": null, "z": true}}'), cfgRef.digest);
  check('published object: value and kind', deepEqual(cfg.val, { b: 1, a: [1, 'é'], nested: { z: true, y: null } }) && cfg.kind === 'object', cfg);
  const ops = (await postJSON('/objs/query', { project_id: project, filter: { is_op: true, latest_only: true }, sort_by: [{ field: 'object_id', direction: 'asc' }] })).objs;
  check('/objs/query is_op: add and pipeline', deepEqual(ops.map(o => o.object_id), ['add', 'pipeline']), ops.map(o => o.object_id));

  // --- the calls, through /calls/stream_query
  const addRef = `weave:///${project}/op/add:${addObj.digest}`;
  const sq = await post('/calls/stream_query', { project_id: project, filter: { op_names: [`weave:///${project}/op/add:*`] }, include_costs: true });
  const lines = sq.text.split('\n').filter(l => l.trim());
  check('/calls/stream_query: application/jsonl, one add call', sq.status === 200 && sq.type.startsWith('application/jsonl') && lines.length === 1, sq);
  const streamed = JSON.parse(lines[0]);
  const all = (await post('/calls/stream_query', { project_id: project, sort_by: [{ field: 'started_at', direction: 'asc' }] })).text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l));
  check('/calls/stream_query: two calls', all.length === 2, all.length);
  const root = all.find(c => c.parent_id === null);
  const sdkCalls = await client.getCalls({ trace_ids: [streamed.trace_id] });
  check("the SDK's getCalls sees both calls", sdkCalls.length === 2, sdkCalls.length);

  // --- /call/read of the child call: op reference, inputs, output, costs, sizes
  const call = (await postJSON('/call/read', { project_id: project, id: streamed.id, include_costs: true, include_storage_size: true, include_total_storage_size: true })).call;
  check('/call/read: op reference', call.op_name === addRef, call.op_name);
  check('/call/read: inputs', deepEqual(call.inputs, { a: 2, b: 3 }), call.inputs);
  check('/call/read: output', deepEqual(call.output, { sum: 5, note: 'café' }), call.output);
  check('/call/read: attributes from the SDK', call.attributes?.weave?.source === 'js-sdk', call.attributes);
  check('/call/read: parent and trace', root && call.parent_id === root.id && call.trace_id === root.trace_id, { call, root });
  check('/call/read: status success, trace_name add', call.summary.platform.status === 'success' && call.summary.platform.trace_name === 'add', call.summary.platform);
  const costs = call.summary.platform.costs?.['gpt-4'];
  check('/call/read: costs', costs && costs.prompt_tokens === 10 && costs.completion_tokens === 5 && costs.requests === 1 &&
    Math.abs(costs.prompt_tokens_total_cost - 3e-4) < 1e-12 && Math.abs(costs.completion_tokens_total_cost - 3e-4) < 1e-12 &&
    costs.pricing_level === 'project', costs);
  const { platform, ...storedSummary } = call.summary;
  const size = s => Buffer.byteLength(pyDumps(s));
  const want = size(call.attributes) + size(call.inputs) + size(call.output) + size(storedSummary);
  check('/call/read: storage_size_bytes', call.storage_size_bytes === want, { got: call.storage_size_bytes, want });
  check('/call/read: total_storage_size_bytes null on a child', call.total_storage_size_bytes === null, call.total_storage_size_bytes);
  const rootRead = (await postJSON('/call/read', { project_id: project, id: root.id, include_storage_size: true, include_total_storage_size: true })).call;
  check('/call/read root: total = root + child', rootRead.total_storage_size_bytes === rootRead.storage_size_bytes + call.storage_size_bytes, rootRead);
  check('/call/read root: child usage rolled up, output 10', rootRead.output === 10 && rootRead.summary.usage?.['gpt-4']?.prompt_tokens === 10, rootRead);
  const { storage_size_bytes: _a, total_storage_size_bytes: _b, ...streamedRest } = streamed;
  const { storage_size_bytes: _c, total_storage_size_bytes: _d, ...readRest } = call;
  check('/calls/stream_query row = /call/read', deepEqual(streamedRest, readRest), { streamedRest, readRest });

  // --- tenancy: another user's key
  for (const [route, body] of [['/call/read', { project_id: project, id: call.id }], ['/obj/read', { project_id: project, object_id: 'add', digest: 'latest' }],
    ['/file/content', { project_id: project, digest: fileDigest }], ['/objs/query', { project_id: project }]]) {
    const r = await post(route, body, bobKey);
    check(`${route} as another user: 403`, r.status === 403 && JSON.parse(r.text).reason, r);
  }
  const noKey = await fetch(`${base}/obj/read`, { method: 'POST', body: '{}' });
  check('/obj/read without a key: 401', noKey.status === 401, noKey.status);

  // --- datasets, evaluations, EvaluationLogger
  const rows = [{ q: '2+2', a: 4 }, { q: '3*3', a: 9 }, { q: '10-7', a: 3, tag: 'é' }];
  const dataset = new weave.Dataset({ id: 'arith', rows: rows.map(r => ({ ...r })) }); // the SDK marks the rows it is given
  const dsRef = await dataset.save();
  await client.waitForBatchProcessing();
  const dsObj = (await postJSON('/obj/read', { project_id: project, object_id: dsRef.objectId, digest: dsRef.digest })).obj;
  const rowsRef = dsObj.val?.rows;
  const rowDigests = rows.map(r => weaveDigest(pyDumps(r, true)));
  const tableDigest = createHash('sha256').update(rowDigests.join('')).digest('hex');
  check('Dataset.save: a Dataset object whose rows are a table ref', dsObj.kind === 'object' && rowsRef === `weave:///${project}/table/${tableDigest}`, dsObj.val);
  const tq = await postJSON('/table/query', { project_id: project, digest: tableDigest });
  check('/table/query: the rows, their digests as Weave computes them', deepEqual(tq.rows.map(r => [r.digest, r.val, r.original_index]),
    rows.map((r, i) => [rowDigests[i], r, i])), tq);
  const back = await client.get(dsRef);
  const backRows = [];
  for await (const r of back.rows) backRows.push(Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith('__'))));
  check("the SDK's client.get reads the dataset's rows back", deepEqual(backRows, rows), backRows);

  const calc = weave.op(async function calc({ datasetRow }) { return eval(datasetRow.q) + 1; });
  const exact = weave.op(function exact({ modelOutput, datasetRow }) { return { correct: modelOutput === datasetRow.a }; });
  const distance = weave.op(function distance({ modelOutput, datasetRow }) { return Math.abs(modelOutput - datasetRow.a); });
  const evaluation = new weave.Evaluation({ id: 'arith-eval', dataset, scorers: [exact, distance] });
  const summary = await evaluation.evaluate({ model: calc });
  await client.waitForBatchProcessing();
  check('Evaluation.evaluate: both scorers summarised', summary?.exact?.correct?.true_count === 0 && summary?.distance?.mean === 1, summary);
  const evalCalls = (await post('/calls/stream_query', { project_id: project, filter: { op_names: [`weave:///${project}/op/Evaluation.evaluate:*`] } }))
    .text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l));
  check('the evaluation call, its output the summary', evalCalls.length === 1 && deepEqual(evalCalls[0].output, summary), evalCalls.map(c => c.output));
  const perRow = (await post('/calls/stream_query', { project_id: project, filter: { parent_ids: [evalCalls[0]?.id] } }))
    .text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l)).filter(c => /predict_?and_?score/i.test(c.op_name));
  check('one predict_and_score call per row, with both scores', perRow.length === 3 && perRow.every(c => c.parent_id === evalCalls[0].id) &&
    perRow.every(c => c.output?.scores?.distance === 1 && c.output?.scores?.exact?.correct === false), perRow.map(c => c.output));

  const logger = new weave.EvaluationLogger({ name: 'logged-eval', dataset: 'arith-rows', model: { name: 'calc-v2' } });
  for (const r of rows) {
    const pred = logger.logPrediction({ q: r.q }, r.a);
    pred.logScore('exact', true);
    pred.finish();
  }
  await logger.logSummary();
  await client.waitForBatchProcessing();
  const logged = (await post('/calls/stream_query', { project_id: project, filter: { op_names: [`weave:///${project}/op/Evaluation.evaluate:*`] } }))
    .text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l));
  const loggedRoot = logged.find(c => c.id !== evalCalls[0]?.id);
  check('EvaluationLogger: a second evaluation call with the score summarised', logged.length === 2 && loggedRoot &&
    JSON.stringify(loggedRoot.output ?? {}).includes('exact'), logged.map(c => c.output));
  const lr = await post('/table/query', { project_id: project, digest: tableDigest }, bobKey);
  check('/table/query as another user: 403', lr.status === 403, lr);
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL ${e.stack || e}`);
} finally {
  cleanup();
}
console.log(`weave-node: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
