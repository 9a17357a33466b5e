// Browser test of the dashboard (/ui/): playwright-core drives Debian's
// chromium (headless) against a flywheel binary:
//   node check.mjs /path/to/flywheel [screenshot dir] [seeded data dir]
//
// It starts `flywheel serve` on a free loopback port with a temporary data
// dir, then: a wrong key and a revoked key get a sign-in error; another
// tenant's key sees none of admin's models; admin signs in, creates a model,
// `flywheel demo` trains it step by step while the model page's reward chart
// grows by one point per step; a checkpoint's trajectories lead to the call
// that sampled a choice; a queued job is cancelled from the UI; the
// playground streams a reply with logprobs on hover; the calls page filters.
// With a seeded data dir (go test ./internal/app -run TestSeedDashboardDataDir
// writes one: a model of 1,000 steps and a project of 100,000 calls) a second
// server serves it: the model page draws all 1,000 points and the calls page
// pages back, every list request a page (limit <= 100), never a full load;
// the times are printed. Any console error or page error fails the test.
// Screenshots of each page go to the screenshot dir (default: a temp dir,
// printed). Exits non-zero on any failure.

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, mkdirSync } from "node:fs";
import { freePort } from "../lib/net.mjs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: node check.mjs /path/to/flywheel [screenshot dir]");
  process.exit(2);
}
const KEY = "fw_ui_browser_check_0123456789abcdefgh";
const STEPS = 3;
const seeded = process.argv[4];

const dir = mkdtempSync(join(tmpdir(), "flywheel-ui-browser-"));
const shots = process.argv[3] || join(dir, "screenshots");
mkdirSync(shots, { recursive: true });
const dataDir = join(dir, "data");
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
let log = "";
let exited = false;
const procs = [];
function serve(data, addr) {
  const p = spawn(bin, ["serve", "--addr", addr, "--data-dir", data, "--log-level", "warn", "--workers", "1"], {
    env: { ...process.env, FLYWHEEL_BOOTSTRAP_API_KEY: KEY },
    stdio: ["ignore", "pipe", "pipe"],
  });
  p.stdout.on("data", (d) => (log += d));
  p.stderr.on("data", (d) => (log += d));
  p.on("exit", () => (exited = true));
  procs.push(p);
  return p;
}
serve(dataDir, `127.0.0.1:${port}`);
let browser;

async function cleanup() {
  if (browser) await browser.close().catch(() => {});
  for (const p of procs) if (p.exitCode === null) p.kill("SIGTERM");
  // the temp dir goes, unless it holds the screenshots (no dir was given)
  rmSync(process.argv[3] ? dir : dataDir, { recursive: true, force: true });
}

const watchdog = setTimeout(async () => {
  console.error("check timed out after 150 s\n--- server log ---\n" + log);
  await cleanup();
  process.exit(1);
}, 150_000);

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function waitHealthy(url = base) {
  for (let i = 0; i < 300; i++) {
    if (exited) throw new Error("flywheel serve exited:\n" + log);
    try {
      if ((await fetch(`${url}/v1/health`)).ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("flywheel serve did not become healthy in 30 s:\n" + log);
}

async function api(method, path, body, key = KEY, url = base) {
  const r = await fetch(url + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const t = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${t}`);
  return JSON.parse(t);
}

function keys(sub, ...args) {
  return execFileSync(bin, ["keys", sub, "--data-dir", dataDir, ...args], { encoding: "utf8" }).trim();
}

const errors = [];
async function newPage(ctx) {
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

// expected 401 responses of the sign-in checks log a console error in
// chromium ("Failed to load resource"); they are the point of those checks.
function dropExpected(status) {
  for (let i = errors.length - 1; i >= 0; i--) if (errors[i].includes(`status of ${status}`)) errors.splice(i, 1);
}

async function signIn(page, key) {
  await page.goto(`${base}/ui/`);
  await page.fill("#apikey", key);
  await page.click("#signin button[type=submit]");
}

// scaleChecks serves the seeded data dir and opens the model of 1,000 steps
// and the project of 100,000 calls, checking that every list request is a
// page and printing how long each page took to show.
async function scaleChecks() {
  const sport = await freePort();
  const sbase = `http://127.0.0.1:${sport}`;
  serve(seeded, `127.0.0.1:${sport}`);
  await waitHealthy(sbase);
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await newPage(ctx);
  const unpaged = [];
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname === "/calls/query") {
      const b = JSON.parse(r.postData() || "{}");
      if (!(b.limit > 0 && b.limit <= 101)) unpaged.push(`${u.pathname} limit ${b.limit}`);
    } else if (/^\/v1\/preview\/(models|training-jobs)(\/[^/]+\/(checkpoints|events))?$/.test(u.pathname) && r.method() === "GET") {
      const l = +u.searchParams.get("limit");
      if (!(l > 0 && l <= 100)) unpaged.push(`${u.pathname} limit ${u.searchParams.get("limit")}`);
    }
  });
  await page.goto(`${sbase}/ui/`);
  await page.fill("#apikey", KEY);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#models tbody tr");
  const models = await api("GET", "/v1/preview/models?limit=100", undefined, KEY, sbase);
  const long = models.data.find((m) => m.name === "long");
  let t0 = Date.now();
  await page.goto(`${sbase}/ui/#/models/${long.id}`);
  await page.waitForSelector('.chart[data-metric="reward"][data-points="1000"]', { timeout: 60_000 });
  await page.waitForSelector('.chart[data-metric="loss"]');
  const tModel = Date.now() - t0;
  assert(+(await page.getAttribute('#step-charts .chart[data-metric="loss"]', "data-points")) === 1000, "loss per gradient step: not 1000 points");
  await page.hover('.chart[data-metric="reward"] svg');
  await shot(page, "scale-model-1000-steps");
  t0 = Date.now();
  await page.goto(`${sbase}/ui/#/calls?project=admin/scale`);
  await page.waitForSelector("#calls tbody tr");
  const tCalls = Date.now() - t0;
  assert((await page.$$eval("#calls tbody tr", (r) => r.length)) === 50, "calls page: not 50 rows");
  const firstID = await page.getAttribute("#calls tbody tr", "data-id");
  t0 = Date.now();
  await page.click("#calls-older");
  await page.waitForFunction((id) => {
    const tr = document.querySelector("#calls tbody tr");
    return tr && tr.dataset.id !== id;
  }, firstID);
  const tOlder = Date.now() - t0;
  assert((await page.$$eval("#calls tbody tr", (r) => r.length)) === 50, "older calls page: not 50 rows");
  await shot(page, "scale-calls-100k");
  await ctx.close();
  assert(unpaged.length === 0, "unpaged requests: " + unpaged.join(", "));
  console.log(`ui-browser: model of 1000 steps shown in ${tModel} ms; calls page (100,000 calls) ${tCalls} ms, next page ${tOlder} ms`);
}

try {
  await waitHealthy();
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });

  // The CSP header is on every /ui/ response.
  const idx = await fetch(`${base}/ui/`);
  assert(idx.ok && /script-src 'self'/.test(idx.headers.get("content-security-policy") || ""), "no CSP on /ui/");

  // A wrong key and a revoked key: a sign-in error, nothing else.
  {
    const ctx = await browser.newContext();
    const page = await newPage(ctx);
    await signIn(page, "fw_this_key_does_not_exist_00000000000000");
    await page.waitForSelector("#signin .error");
    assert(/refused/.test(await page.textContent("#signin .error")), "wrong key: no sign-in error");
    assert(!(await page.$("#models")), "wrong key: the models table is shown");
    await shot(page, "signin-wrong-key");
    const revoked = keys("create", "--user", "mallory").split(/\s+/).pop();
    keys("revoke", revoked.slice(0, 11));
    await signIn(page, revoked);
    await page.waitForSelector("#signin .error");
    assert(!(await page.$("#models")), "revoked key: the models table is shown");
    await ctx.close();
    dropExpected(401);
  }

  // Admin's data, and another tenant that must not see it.
  const other = keys("create", "--user", "bob").split(/\s+/).pop();

  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await newPage(ctx);
  await signIn(page, KEY);
  await page.waitForSelector("#models");
  await shot(page, "models-empty");

  // Create a model in the UI.
  await page.fill("#project", "demo");
  await page.fill("#name", "ui-run");
  await page.selectOption("#base_model", "flywheel/tiny");
  await page.click("#create-model button[type=submit]");
  await page.waitForURL(/#\/models\/[0-9a-f-]{36}$/);
  const modelID = page.url().split("/").pop();
  await page.waitForSelector("#checkpoints tr[data-step='0']");

  // Train it with the demo loop, one step at a time, watching the chart.
  const demo = spawn(bin, ["demo", "--url", base, "--api-key", KEY, "--project", "demo", "--name", "ui-run",
    "--steps", String(STEPS), "--groups", "2", "--group-size", "4", "--max-tokens", "8", "--seed", "7"], { stdio: ["ignore", "pipe", "pipe"] });
  let demoOut = "";
  demo.stdout.on("data", (d) => (demoOut += d));
  demo.stderr.on("data", (d) => (demoOut += d));
  const demoDone = new Promise((resolve) => demo.on("exit", resolve));
  const seen = [];
  for (let n = 1; n <= STEPS; n++) {
    await page.waitForFunction((n) => {
      const c = document.querySelector('.chart[data-metric="reward"]');
      return c && +c.dataset.points >= n;
    }, n, { timeout: 60_000 });
    seen.push(+(await page.getAttribute('.chart[data-metric="reward"]', "data-points")));
  }
  const code = await demoDone;
  assert(code === 0, `demo failed (${code}):\n${demoOut}`);
  // one point per step: the chart ends with exactly STEPS points, having shown 1..STEPS
  await page.waitForFunction((n) => +document.querySelector('.chart[data-metric="reward"]')?.dataset.points === n, STEPS);
  assert(seen.every((v, i) => v >= i + 1) && seen.at(-1) <= STEPS, `reward chart points seen: ${seen}`);
  // an eval split logged with /log gets its own section
  await api("POST", `/v1/preview/models/${modelID}/log`, { split: "val", trajectory_groups: [{ trajectories: [
    { reward: 0.25, messages_and_choices: [] }, { reward: 0.75, messages_and_choices: [] }] }] });
  await page.waitForSelector('section[data-split="val"] .chart[data-metric="val/reward"][data-points="1"]');
  assert(/step 3: 0\.5\b/.test(await page.textContent('.chart[data-metric="val/reward"] .readout')), "val/reward: not 0.5 at step 3");
  await page.waitForSelector('.chart[data-metric="loss"]');
  assert(+(await page.getAttribute('.chart[data-metric="loss"]', "data-points")) >= STEPS, "loss chart: fewer points than steps");
  // raw numbers on hover
  const pt = await page.$('.chart[data-metric="reward"] circle.pt');
  await pt.hover();
  assert(/step \d+: [-\d.e]+/.test(await page.textContent('.chart[data-metric="reward"] .readout')), "no readout on hover");
  await shot(page, "model");

  // Provenance: checkpoint -> job -> trajectories -> the call behind a choice.
  await page.click(`#checkpoints tr[data-step='${STEPS}'] a[href$='/steps/${STEPS}']`);
  await page.waitForSelector(".trajectory");
  assert((await page.textContent("#trained-by")).length === 36, "no job id for the checkpoint");
  await shot(page, "trajectories");
  await page.click(".trajectory .call-link");
  await page.waitForSelector("#call-output pre");
  const out = JSON.parse(await page.textContent("#call-output pre"));
  assert(out.object === "chat.completion" && out.choices.length >= 1, "the linked call is not a chat completion");
  await shot(page, "call");
  // and from the job that made the checkpoint back to what it trained on
  await page.goBack();
  await page.waitForSelector("#trained-by");
  await page.click("#trained-by");
  await page.waitForSelector(`#job-trajectories[href$='/steps/${STEPS}']`);
  await shot(page, "job");

  // A call's tree: a parent with a child in another project.
  const parent = await api("POST", "/call/start", { start: { project_id: "admin/evals", op_name: "evaluate",
    started_at: new Date().toISOString(), attributes: {}, inputs: { note: "<img src=x onerror=alert(1)>" } } });
  const child = await api("POST", "/call/start", { start: { project_id: "admin/evals", op_name: "score", trace_id: parent.trace_id,
    parent_id: parent.id, started_at: new Date().toISOString(), attributes: {}, inputs: { a: 1 } } });
  await api("POST", "/call/end", { end: { project_id: "admin/evals", id: child.id, ended_at: new Date().toISOString(), output: 2, summary: {} } });
  await page.goto(`${base}/ui/#/calls/admin/evals/${child.id}`);
  await page.waitForSelector("#trace-tree");
  assert((await page.$$eval("#trace-tree li", (l) => l.length)) === 2, "trace tree: not 2 calls");
  assert(await page.$(`#trace-tree li[data-id='${parent.id}'] li[data-id='${child.id}'] strong`), "trace tree: child not under its parent");
  await page.click("#parent-call");
  await page.waitForSelector(`#children a[href$='${child.id}']`);
  assert((await page.textContent("#call-inputs pre")).includes("<img src=x onerror=alert(1)>") && !(await page.$("main img")), "inputs rendered as HTML");
  await shot(page, "call-tree");

  // An evaluation as Weave's Python SDK writes it: a dataset (a table and an
  // object), an Evaluation.evaluate call whose output is the summary, and a
  // predict_and_score child per example, the example passed as a ref to the row.
  const table = await api("POST", "/table/create", { table: { project_id: "admin/evals", rows: [{ q: "2+2", a: 4 }, { q: "3*3", a: 9 }] } });
  const ds = await api("POST", "/obj/create", { obj: { project_id: "admin/evals", object_id: "arith",
    val: { _type: "Dataset", _class_name: "Dataset", _bases: ["Object", "BaseModel"], rows: `weave:///admin/evals/table/${table.digest}` } } });
  const op = (name) => `weave:///admin/evals/op/${name}:0123456789abcdef`;
  const t0e = new Date().toISOString();
  const ev = await api("POST", "/call/start", { start: { project_id: "admin/evals", op_name: op("Evaluation.evaluate"), started_at: t0e,
    attributes: {}, inputs: { self: "weave:///admin/evals/object/ev:x", model: "weave:///admin/evals/object/calc:x" } } });
  for (const [i, rd] of table.row_digests.entries()) {
    const k = await api("POST", "/call/start", { start: { project_id: "admin/evals", op_name: op("Evaluation.predict_and_score"),
      trace_id: ev.trace_id, parent_id: ev.id, started_at: new Date().toISOString(), attributes: {},
      inputs: { example: `weave:///admin/evals/object/arith:${ds.digest}/attr/rows/id/${rd}` } } });
    await api("POST", "/call/end", { end: { project_id: "admin/evals", id: k.id, ended_at: new Date().toISOString(),
      output: { output: [5, 10][i], scores: { exact: { correct: false }, distance: 1 }, model_latency: 0.001 }, summary: {} } });
  }
  await api("POST", "/call/end", { end: { project_id: "admin/evals", id: ev.id, ended_at: new Date().toISOString(),
    output: { exact: { correct: { true_count: 0, true_fraction: 0 } }, distance: { mean: 1 } }, summary: {} } });
  await page.goto(`${base}/ui/#/calls?project=admin/evals`);
  await page.waitForSelector("#calls-evals");
  await page.click("#calls-evals");
  // The unfiltered list holds the evaluation's row too: wait for the filtered list to replace it
  // (a timeout here is the failure: the filter never left just the evaluation).
  await page.waitForFunction((id) => {
    const rows = document.querySelectorAll("#calls tbody tr");
    return rows.length === 1 && rows[0].dataset.id === id;
  }, ev.id, { timeout: 10000 }).catch(() => {});
  assert((await page.$$eval("#calls tbody tr", (r) => r.length)) === 1, "evaluations filter: not just the evaluation");
  assert(await page.$(`#calls tbody tr[data-id='${ev.id}']`), "evaluations filter: the evaluation's row is missing");
  await page.click(`#calls tbody tr[data-id='${ev.id}'] a`);
  await page.waitForSelector("#eval-rows tbody tr");
  const heads = await page.$$eval("#eval-rows th", (h) => h.map((x) => x.textContent));
  assert(JSON.stringify(heads) === JSON.stringify(["#", "Example", "Output", "exact", "distance"]), `evaluation columns ${heads}`);
  const cells = await page.$$eval("#eval-rows tbody tr", (rs) => rs.map((r) => [...r.querySelectorAll("td")].map((d) => d.textContent)));
  assert(cells.length === 2 && cells[0][1] === '{"q":"2+2","a":4}' && cells[0][2] === "5" && cells[0][3] === '{"correct":false}' && cells[1][4] === "1",
    `evaluation rows ${JSON.stringify(cells)}`);
  const summaryRows = await page.$$eval("#eval-summary tbody tr", (rs) => rs.map((r) => r.textContent));
  assert(summaryRows.length === 2 && summaryRows[1].includes('{"mean":1}'), `evaluation summary ${summaryRows}`);
  await shot(page, "evaluation");

  // Calls list with filters.
  await page.goto(`${base}/ui/#/calls?project=admin/demo`);
  await page.waitForSelector("#calls tbody tr");
  const nCalls = await page.$$eval("#calls tbody tr", (r) => r.length);
  assert(nCalls >= STEPS + 1, `calls page shows ${nCalls} calls`);
  await page.selectOption("#f-status", "error");
  await page.click("#calls-filter button[type=submit]");
  await page.waitForFunction(() => /status=error/.test(location.hash) && document.querySelector(".pager span")?.textContent === "no calls");
  assert((await page.$$eval("#calls tbody tr", (r) => r.length)) === 0, "status=error shows calls");
  await shot(page, "calls");

  // Cancel a job: a long job keeps the second one QUEUED behind it.
  const long = await api("POST", "/v1/preview/models", { project: "demo", name: "to-cancel", base_model: "flywheel/tiny" });
  const trajs = [];
  for (let i = 0; i < 48; i++) {
    const words = Array.from({ length: 300 }, (_, j) => `w${(i * 7919 + j * 104729) % 9973}`).join(" ");
    trajs.push({ reward: i % 2, messages_and_choices: [{ role: "user", content: words },
      { index: 0, finish_reason: "stop", message: { role: "assistant", content: "hello there" } }] });
  }
  const j1 = await api("POST", "/v1/preview/training-jobs", { model_id: long.id, trajectory_groups: [{ trajectories: trajs }] });
  const j2 = await api("POST", "/v1/preview/training-jobs", { model_id: long.id, trajectory_groups: [{ trajectories: trajs.slice(0, 2) }] });
  await page.goto(`${base}/ui/#/jobs/${j2.id}`);
  await page.waitForSelector("#cancel-job");
  await page.click("#cancel-job");
  await page.waitForSelector("#job-events [data-type='training_failed']");
  assert((await api("GET", `/v1/preview/training-jobs/${j2.id}`)).status === "CANCELLED", "job not cancelled");
  await shot(page, "job-cancelled");
  const j1s = await api("GET", `/v1/preview/training-jobs/${j1.id}`);
  console.log(`ui-browser: the job ahead of the cancelled one was ${j1s.status} when it was cancelled`);
  await api("POST", `/v1/preview/training-jobs/${j1.id}/cancel`).catch(() => {}); // may have ended
  await page.goto(`${base}/ui/#/jobs`);
  await page.waitForSelector(`#jobs tr[data-id='${j2.id}'][data-status='CANCELLED']`);
  await shot(page, "jobs");

  // Playground: streamed reply with logprobs on hover, from a checkpoint.
  await page.goto(`${base}/ui/#/playground?model=${encodeURIComponent(`admin/demo/ui-run:step${STEPS}`)}`);
  await page.waitForSelector("#pg-input");
  await page.fill("#pg-max", "12");
  await page.fill("#pg-input", "Say something <b>bold</b> & <script>x</script>");
  await page.click("#pg-send");
  await page.waitForSelector("#pg-log .msg.assistant[data-done='true']", { timeout: 30_000 });
  const toks = await page.$$("#pg-log .msg.assistant .tok");
  assert(toks.length > 0, "no tokens in the reply");
  for (const t of toks) assert(/logprob -?\d/.test(await t.getAttribute("title")), "token without logprob on hover");
  assert((await page.textContent("#pg-log .msg.user")).includes("<script>x</script>"), "user text not shown as text");
  assert(!(await page.$("#pg-log b")), "user text rendered as HTML");
  // the screenshot hovers the first token that renders: a sampled token that is only a newline, or
  // bytes that are not text alone (shown empty), has no box to hover (every token's title is checked
  // above)
  for (const t of toks) {
    if (await t.isVisible()) {
      await t.hover();
      break;
    }
  }
  await shot(page, "playground");

  assert(errors.length === 0, "browser errors:\n" + errors.join("\n"));

  // Another tenant sees none of admin's models or calls.
  const ctx2 = await browser.newContext();
  const page2 = await newPage(ctx2);
  await signIn(page2, other);
  await page2.waitForSelector("#models");
  assert((await page2.$$eval("#models tbody tr", (r) => r.length)) === 0, "bob sees admin's models");
  await page2.goto(`${base}/ui/#/models/${modelID}`);
  await page2.waitForSelector("main .error");
  assert(/not found/.test(await page2.textContent("main .error")), "bob opened admin's model");
  await ctx2.close();
  dropExpected(404); // bob's request for admin's model, answered 404 as it must be

  assert(errors.length === 0, "browser errors:\n" + errors.join("\n"));
  if (seeded) await scaleChecks();
  assert(errors.length === 0, "browser errors:\n" + errors.join("\n"));
  console.log(`ui-browser: ok (screenshots in ${shots})`);
  clearTimeout(watchdog);
  await cleanup();
} catch (e) {
  console.error("ui-browser: FAILED: " + (e.stack || e) + (errors.length ? "\nbrowser errors:\n" + errors.join("\n") : "") + "\n--- server log ---\n" + log);
  clearTimeout(watchdog);
  await cleanup();
  process.exit(1);
}
