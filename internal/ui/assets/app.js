// flywheel dashboard: a hash-routed single page over the service's own API.
// Everything shown comes from the API with the signed-in key (Bearer), so the
// key's tenancy applies. Data is untrusted (model outputs, call inputs): it is
// only ever put into the page as text (textContent, attribute values), never
// parsed as HTML.
import { lineChart } from './chart.js';

const KEY = 'flywheel.apiKey';
const main = document.getElementById('main');
let cleanups = []; // timers and listeners of the current page

// ---------- DOM helpers ----------

// el builds an element: attrs are properties/attributes (on* are listeners),
// children are nodes or strings (strings become text nodes).
export function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else if (k === 'class') n.className = v;
    else if (k === 'dataset') Object.assign(n.dataset, v);
    else if (k in n && typeof v !== 'string') n[k] = v;
    else n.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

// gen counts page changes. A page takes view() before its first await and
// shows through it, so a slow page the user has already left never
// replaces the page that followed it.
let gen = 0;
function view() {
  const my = gen;
  return (...nodes) => { if (my === gen) show(...nodes); };
}

function fmt(v, digits = 4) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : v.toFixed(digits);
  }
  return String(v);
}

function bytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + ' MiB';
  return (n / (1 << 30)).toFixed(2) + ' GiB';
}

function when(ts) {
  if (!ts) return '—';
  return ts.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function duration(a, b) {
  if (!a) return '—';
  const ms = (b ? Date.parse(b) : Date.now()) - Date.parse(a);
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
}

function status(s) {
  return el('span', { class: 'status ' + s }, s);
}

function json(v) {
  return el('pre', {}, JSON.stringify(v, null, 2));
}

function errorBox(err) {
  return el('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err));
}

// every runs fn every ms milliseconds until the page changes, never two at
// once (a slow round is not overlapped by the next).
function every(ms, fn) {
  let busy = false;
  const id = setInterval(async () => {
    if (busy) return;
    busy = true;
    try { await fn(); } finally { busy = false; }
  }, ms);
  cleanups.push(() => clearInterval(id));
}

// ---------- API ----------

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Authorization: 'Bearer ' + key };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) {
    const msg = (data && (data.error?.message || data.reason)) || resp.statusText || 'request failed';
    if (resp.status === 401) {
      signOut('The API key was refused (wrong or revoked): ' + msg);
      throw new APIError(401, msg);
    }
    throw new APIError(resp.status, `${resp.status}: ${msg}`);
  }
  return data;
}

// pages fetches a /v1 list (ascending) page by page (limit 100) from the
// exclusive cursor after, calling onPage with each page's items, until
// has_more is false; it returns the new cursor (the last id seen).
async function pages(path, onPage, after = '') {
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api('GET', `${path}${sep}limit=100${after ? '&after=' + encodeURIComponent(after) : ''}`);
    onPage(page.data);
    if (page.last_id) after = page.last_id;
    if (!page.has_more || !page.data.length) return after;
  }
}

// ---------- sign-in ----------

function signOut(message) {
  sessionStorage.removeItem(KEY);
  renderSignIn(message);
}

function renderSignIn(message) {
  gen++; // a page still loading must not replace the form
  for (const c of cleanups) c();
  cleanups = [];
  document.getElementById('signout').hidden = true;
  document.getElementById('nav').hidden = true;
  const input = el('input', { type: 'password', id: 'apikey', name: 'apikey', autocomplete: 'off', size: 50, placeholder: 'fw_…' });
  const err = message ? errorBox(message) : null;
  const form = el('form', {
    id: 'signin', class: 'card', onsubmit: async (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      try {
        await api('GET', '/v1/preview/models?limit=1');
      } catch (ex) {
        if (ex.status !== 401) signOut('Sign-in failed: ' + ex.message);
        return;
      }
      if (!location.hash || location.hash === '#/signin') location.hash = '#/models';
      route();
    },
  },
  el('h1', {}, 'Sign in'),
  el('p', { class: 'muted' }, 'Paste an API key. It is kept in this tab\'s session storage and sent as a Bearer header.'),
  err,
  el('label', {}, 'API key', input),
  el('p', {}, el('button', { class: 'primary', type: 'submit' }, 'Sign in')));
  show(form);
  input.focus();
}

// ---------- router ----------

const routes = [
  [/^#\/models\/([^/]+)\/steps\/(\d+)$/, (id, step) => pageTrajectories(id, +step)],
  [/^#\/models\/([^/]+)$/, (id) => pageModel(id)],
  [/^#\/models$/, () => pageModels()],
  [/^#\/jobs\/([^/]+)$/, (id) => pageJob(id)],
  [/^#\/jobs$/, () => pageJobs()],
  [/^#\/calls\/([^/]+)\/([^/]+)\/([^/?]+)$/, (e, p, id) => pageCall(decodeURIComponent(e) + '/' + decodeURIComponent(p), id)],
  [/^#\/calls(\?.*)?$/, (q) => pageCalls(new URLSearchParams((q || '').slice(1)))],
  [/^#\/playground(\?.*)?$/, (q) => pagePlayground(new URLSearchParams((q || '').slice(1)))],
];

async function route() {
  const my = ++gen;
  for (const c of cleanups) c();
  cleanups = [];
  if (!sessionStorage.getItem(KEY)) { renderSignIn(); return; }
  document.getElementById('signout').hidden = false;
  document.getElementById('nav').hidden = false;
  const hash = location.hash || '#/models';
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', hash.startsWith(a.getAttribute('href')));
  }
  for (const [re, fn] of routes) {
    const m = hash.match(re);
    if (m) {
      show(el('p', { class: 'muted' }, 'Loading…'));
      try {
        await fn(...m.slice(1));
      } catch (e) {
        if (e.status !== 401 && my === gen) show(errorBox(e));
      }
      return;
    }
  }
  location.hash = '#/models';
}

// ---------- models ----------

async function pageModels() {
  const show = view();
  const tbody = el('tbody');
  const err = el('div');
  const bases = await api('GET', '/v1/models');
  const baseSelect = el('select', { name: 'base_model', id: 'base_model' },
    bases.data.filter((m) => !m.parent).map((m) => el('option', { value: m.id }, m.id)));
  const project = el('input', { name: 'project', id: 'project', required: true, placeholder: 'project', value: 'demo' });
  const name = el('input', { name: 'name', id: 'name', required: true, placeholder: 'name' });
  const form = el('form', {
    class: 'inline', id: 'create-model', onsubmit: async (e) => {
      e.preventDefault();
      err.replaceChildren();
      try {
        const m = await api('POST', '/v1/preview/models', { project: project.value, name: name.value, base_model: baseSelect.value });
        location.hash = '#/models/' + m.id;
      } catch (ex) { err.replaceChildren(errorBox(ex)); }
    },
  }, el('label', {}, 'Project', project), el('label', {}, 'Name', name), el('label', {}, 'Base model', baseSelect),
  el('button', { class: 'primary', type: 'submit' }, 'Create model'));

  const more = el('button', { type: 'button', hidden: true }, 'More');
  let after = '';
  async function load() {
    const page = await api('GET', `/v1/preview/models?limit=50&order=desc${after ? '&after=' + after : ''}`);
    after = page.last_id;
    more.hidden = !page.has_more;
    for (const m of page.data) {
      const reward = el('td', { class: 'num' }, '…');
      const del = el('button', {
        class: 'danger', type: 'button', onclick: async () => {
          if (!confirm(`Delete ${m.entity}/${m.project}/${m.name} and all its checkpoints?`)) return;
          try { await api('DELETE', '/v1/preview/models/' + m.id); row.remove(); } catch (ex) { err.replaceChildren(errorBox(ex)); }
        },
      }, 'Delete');
      const row = el('tr', { dataset: { id: m.id } },
        el('td', {}, el('a', { href: '#/models/' + m.id }, `${m.entity}/${m.project}/${m.name}`)),
        el('td', {}, m.base_model), el('td', { class: 'num' }, fmt(m.latest_step)), reward,
        el('td', {}, when(m.created_at)), el('td', {}, del));
      tbody.append(row);
      api('GET', `/v1/preview/models/${m.id}/checkpoints?limit=1&order=desc`).then((c) => {
        const met = c.data[0]?.metrics || {};
        const r = met['reward'] ?? met['train/reward'] ?? met['val/reward'];
        reward.textContent = fmt(r);
      }).catch(() => { reward.textContent = '—'; });
    }
  }
  more.addEventListener('click', load);
  await load();
  show(el('h1', {}, 'Models'), form, err,
    el('table', { id: 'models' }, el('thead', {}, el('tr', {}, ['Model', 'Base model', 'Latest step', 'Last reward', 'Created', ''].map((h) => el('th', {}, h)))), tbody),
    el('div', { class: 'pager' }, more));
}

// splitOf turns a checkpoint metric key into [split, name]: "val/reward" is
// split val; keys without a split are the training job's own figures.
function splitOf(key) {
  const i = key.indexOf('/');
  return i < 0 ? ['job', key] : [key.slice(0, i), key.slice(i + 1)];
}

async function pageModel(id) {
  const show = view();
  const m = await api('GET', '/v1/preview/models/' + id);
  const ref = `${m.entity}/${m.project}/${m.name}`;
  const err = el('div');
  const metricCharts = el('div', { id: 'metric-charts' });
  const stepCharts = el('div', { class: 'charts', id: 'step-charts' });
  const ckBody = el('tbody');
  const jobBody = el('tbody');
  const live = el('div', { id: 'live' });
  const latest = el('span', {}, fmt(m.latest_step));

  const checkpoints = []; // ascending by step
  let ckAfter = '';
  const gradSteps = [];
  let evAfter = '';

  function renderMetrics() {
    const splits = new Map(); // split -> name -> points
    for (const c of checkpoints) {
      for (const [k, v] of Object.entries(c.metrics || {})) {
        if (typeof v !== 'number') continue;
        const [split, name] = splitOf(k);
        if (!splits.has(split)) splits.set(split, new Map());
        const s = splits.get(split);
        if (!s.has(name)) s.set(name, []);
        s.get(name).push([c.step, v]);
      }
    }
    const order = (a) => (a === 'job' ? 0 : a === 'train' ? 1 : a === 'val' ? 2 : 3);
    const sections = [...splits.keys()].sort((a, b) => order(a) - order(b) || a.localeCompare(b)).map((split) => {
      const names = [...splits.get(split).keys()].sort((a, b) => (a === 'reward' ? -1 : b === 'reward' ? 1 : a.localeCompare(b)));
      return el('section', { dataset: { split } },
        el('h3', {}, split === 'job' ? 'Per step (training job)' : `Split: ${split}`),
        el('div', { class: 'charts' }, names.map((n) => lineChart(split === 'job' ? n : `${split}/${n}`, splits.get(split).get(n), 'step'))));
    });
    metricCharts.replaceChildren(...(sections.length ? sections : [el('p', { class: 'muted' }, 'No metrics yet: train a step or POST /log.')]));
  }

  function renderSteps() {
    const series = (k) => gradSteps.filter((e) => typeof e.data[k] === 'number').map((e, i) => [e.i, e.data[k]]);
    stepCharts.replaceChildren(...(gradSteps.length
      ? ['loss', 'grad_norm', 'entropy'].map((k) => lineChart(k, series(k), 'gradient step'))
      : [el('p', { class: 'muted' }, 'No gradient steps yet.')]));
  }

  // The checkpoint table shows 20 rows at a time, newest first.
  let ckFrom = 0;
  const ckPager = el('div', { class: 'pager' });
  function renderCheckpoints() {
    const rows = checkpoints.slice().reverse();
    ckFrom = Math.min(ckFrom, Math.max(0, rows.length - 1));
    ckPager.replaceChildren(
      el('button', { type: 'button', disabled: ckFrom === 0, onclick: () => { ckFrom = Math.max(0, ckFrom - 20); renderCheckpoints(); } }, 'Newer'),
      el('span', { class: 'muted' }, rows.length ? `${ckFrom + 1}–${Math.min(ckFrom + 20, rows.length)} of ${rows.length}` : ''),
      el('button', { type: 'button', disabled: ckFrom + 20 >= rows.length, onclick: () => { ckFrom += 20; renderCheckpoints(); } }, 'Older'));
    ckBody.replaceChildren(...rows.slice(ckFrom, ckFrom + 20).map((c) => {
      const del = el('button', {
        class: 'danger', type: 'button', onclick: async () => {
          if (!confirm(`Delete step ${c.step}?`)) return;
          try {
            await api('DELETE', `/v1/preview/models/${id}/checkpoints`, { steps: [c.step] });
            checkpoints.splice(checkpoints.indexOf(c), 1);
            renderCheckpoints(); renderMetrics();
          } catch (ex) { err.replaceChildren(errorBox(ex)); }
        },
      }, 'Delete');
      const mets = Object.entries(c.metrics || {}).filter(([k]) => /reward|loss/.test(k)).slice(0, 4)
        .map(([k, v]) => `${k}=${fmt(v)}`).join('  ');
      return el('tr', { dataset: { step: c.step } },
        el('td', { class: 'num' }, String(c.step)), el('td', {}, mets || '—'), el('td', { class: 'num' }, bytes(c.size_bytes)),
        el('td', {}, when(c.created_at)),
        el('td', {}, el('a', { href: `#/models/${id}/steps/${c.step}` }, 'Trajectories'), ' ',
          el('a', { href: '#/playground?model=' + encodeURIComponent(`${ref}:step${c.step}`) }, 'Chat'), ' ', del));
    }));
  }

  // poll reads what is new since the last poll (the first reads it all),
  // page by page, and redraws what changed.
  async function poll() {
    const ck0 = checkpoints.length;
    let changed = false;
    if (ck0) {
      // /log merges metrics into the latest checkpoint: pick that up too
      const top = (await api('GET', `/v1/preview/models/${id}/checkpoints?order=desc&limit=1`)).data[0];
      const mine = checkpoints.findIndex((c) => c.id === top?.id);
      if (mine >= 0 && JSON.stringify(checkpoints[mine].metrics) !== JSON.stringify(top.metrics)) {
        checkpoints[mine] = top;
        changed = true;
      }
    }
    ckAfter = await pages(`/v1/preview/models/${id}/checkpoints?order=asc`, (d) => checkpoints.push(...d), ckAfter);
    const ev0 = gradSteps.length;
    if (!unlisted) {
      try {
        evAfter = await pages(`/v1/preview/models/${id}/events?type=gradient_step`,
          (d) => { for (const e of d) gradSteps.push({ ...e, i: gradSteps.length + 1 }); }, evAfter);
      } catch (e) {
        if (e.status !== 501) throw e;
        unlisted = true; // a store without store.Lists: no history or job list, the rest works
        stepCharts.replaceChildren(el('p', { class: 'muted' }, e.message));
        live.replaceChildren(el('p', { class: 'muted' }, e.message));
      }
    }
    if (changed || checkpoints.length !== ck0) { renderMetrics(); renderCheckpoints(); latest.textContent = fmt(checkpoints.at(-1)?.step); }
    if (gradSteps.length !== ev0) renderSteps();
    if (!unlisted) await loadJobs();
  }
  let unlisted = false;

  // The running (or else queued, or else latest) job's events, as they come.
  let liveJob = null;
  let liveAfter = '';
  let liveTotal = 0;
  let liveDone = 0;
  const liveLog = el('div', { class: 'events', id: 'live-events' });
  async function loadJobs() {
    const page = await api('GET', `/v1/preview/training-jobs?model_id=${id}&limit=20&order=desc`);
    jobBody.replaceChildren(...page.data.map((j) => jobRow(j, false)));
    const pick = page.data.find((j) => j.status === 'RUNNING') || page.data.find((j) => j.status === 'QUEUED') || page.data[0];
    if (!pick) {
      live.replaceChildren(el('p', { class: 'muted' }, 'No job has run for this model yet.'));
      return;
    }
    if (pick.id !== liveJob) { liveJob = pick.id; liveAfter = ''; liveLog.replaceChildren(); liveTotal = 0; liveDone = 0; }
    for (;;) {
      const ev = await api('GET', `/v1/preview/training-jobs/${liveJob}/events?limit=100${liveAfter ? '&after=' + liveAfter : ''}`);
      for (const e of ev.data) {
        if (e.type === 'training_started') liveTotal = e.data.num_sequences || 0;
        if (e.type === 'gradient_step') liveDone++;
        liveLog.append(el('div', { dataset: { type: e.type } }, `${when(e.created_at)}  ${e.type}  ${JSON.stringify(e.data)}`));
      }
      if (ev.last_id) liveAfter = ev.last_id;
      if (!ev.has_more) break;
    }
    liveLog.scrollTop = liveLog.scrollHeight;
    const active = pick.status === 'RUNNING' || pick.status === 'QUEUED';
    live.replaceChildren(el('p', {}, active ? 'Job ' : 'No job is running; the latest was ', el('a', { href: '#/jobs/' + liveJob }, liveJob), ' ',
      status(pick.status), active ? ` · ${duration(pick.training_start, null)}` : ''),
    liveTotal ? el('p', {}, el('progress', { id: 'live-progress', max: liveTotal, value: liveDone }), ` ${liveDone} / ${liveTotal} gradient steps`) : null,
    liveLog);
  }

  await poll();
  renderMetrics(); renderCheckpoints();
  if (!unlisted) renderSteps();
  show(
    el('h1', {}, ref),
    el('p', { class: 'muted' }, `base model ${m.base_model} · latest step `, latest, ` · LoRA r=${m.lora?.rank} · created ${when(m.created_at)} · `,
      el('a', { href: '#/playground?model=' + encodeURIComponent(ref) }, 'Chat with the latest step'), ' · ',
      el('a', { href: '#/calls?project=' + encodeURIComponent(`${m.entity}/${m.project}`) }, 'Calls of this project')),
    err,
    el('h2', {}, 'Metrics per step'), metricCharts,
    el('h2', {}, 'Per gradient step (all jobs)'), stepCharts,
    el('h2', {}, 'Live job'), live,
    el('h2', {}, 'Jobs'), el('table', { id: 'model-jobs' }, jobHead(), jobBody),
    el('h2', {}, 'Checkpoints'),
    el('table', { id: 'checkpoints' }, el('thead', {}, el('tr', {}, ['Step', 'Metrics', 'Size', 'Created', ''].map((h) => el('th', {}, h)))), ckBody),
    ckPager,
  );
  every(1500, () => poll().catch((e) => { if (e.status !== 401) err.replaceChildren(errorBox(e)); }));
}

// ---------- jobs ----------

// modelLink is a link to a model showing its name once known (names are
// looked up once per page load per model; a deleted model shows its id).
const modelNames = new Map();
function modelLink(id) {
  const a = el('a', { href: '#/models/' + id }, id.slice(0, 8) + '…');
  if (!modelNames.has(id)) {
    modelNames.set(id, api('GET', '/v1/preview/models/' + id).then((m) => `${m.entity}/${m.project}/${m.name}`).catch(() => id));
  }
  modelNames.get(id).then((name) => { a.textContent = name; });
  return a;
}

function jobHead(withModel) {
  return el('thead', {}, el('tr', {}, ['Job', withModel ? 'Model' : null, 'Kind', 'Status', 'Steps', 'Created', 'Duration', 'Reward', '']
    .filter((h) => h !== null).map((h) => el('th', {}, h))));
}

function jobRow(j, withModel) {
  const cancel = (j.status === 'QUEUED' || j.status === 'RUNNING')
    ? el('button', { class: 'danger', type: 'button', onclick: async (e) => {
      e.target.disabled = true;
      try { await api('POST', `/v1/preview/training-jobs/${j.id}/cancel`); route(); } catch (ex) { alert(ex.message); }
    } }, 'Cancel') : null;
  return el('tr', { dataset: { id: j.id, status: j.status } },
    el('td', {}, el('a', { href: '#/jobs/' + j.id }, j.id.slice(0, 8) + '…')), withModel === true ? el('td', {}, modelLink(j.model_id)) : null,
    el('td', {}, j.kind), el('td', {}, status(j.status)),
    el('td', {}, j.from_step === null ? '—' : `${j.from_step} → ${j.to_step ?? '…'}`), el('td', {}, when(j.created_at)),
    el('td', {}, duration(j.training_start, j.training_end)), el('td', { class: 'num' }, fmt(j.metrics?.reward ?? j.metrics?.loss)),
    el('td', {}, cancel));
}

async function pageJobs() {
  const show = view();
  const tbody = el('tbody');
  const more = el('button', { type: 'button', hidden: true }, 'More');
  let after = '';
  async function load() {
    const page = await api('GET', `/v1/preview/training-jobs?limit=50&order=desc${after ? '&after=' + after : ''}`);
    after = page.last_id;
    more.hidden = !page.has_more;
    tbody.append(...page.data.map((j) => jobRow(j, true)));
  }
  more.addEventListener('click', load);
  await load();
  show(el('h1', {}, 'Training jobs'), el('table', { id: 'jobs' }, jobHead(true), tbody), el('div', { class: 'pager' }, more));
}

async function pageJob(id) {
  const show = view();
  let j = await api('GET', '/v1/preview/training-jobs/' + id);
  const head = el('div');
  const log = el('div', { class: 'events', id: 'job-events' });
  let after = '';
  const err = el('div');
  function renderHead() {
    const cancel = (j.status === 'QUEUED' || j.status === 'RUNNING')
      ? el('button', { class: 'danger', type: 'button', id: 'cancel-job', onclick: async () => {
        try { j = await api('POST', `/v1/preview/training-jobs/${id}/cancel`); renderHead(); await tick(); } catch (ex) { err.replaceChildren(errorBox(ex)); }
      } }, 'Cancel job') : null;
    head.replaceChildren(
      el('p', {}, status(j.status), ` ${j.kind} · model `, modelLink(j.model_id),
        ` · steps ${j.from_step ?? '—'} → ${j.to_step ?? '—'} · created ${when(j.created_at)} · ran ${duration(j.training_start, j.training_end)} `, cancel),
      j.kind === 'sft' ? el('p', {}, `Trained on the uploaded file ${j.training_data_url} with config ${JSON.stringify(j.config)}`) : null,
      j.status === 'COMPLETED' && j.kind === 'rl' && j.to_step !== null
        ? el('p', {}, el('a', { href: `#/models/${j.model_id}/steps/${j.to_step}`, id: 'job-trajectories' }, `What it trained on (step ${j.to_step})`)) : null,
      j.error_message ? el('p', { class: 'error' }, j.error_message) : null,
      el('div', { class: 'grid2' }, el('div', {}, el('h3', {}, 'Metrics'), json(j.metrics)),
        el('div', {}, el('h3', {}, 'Config'), json(j.experimental_config))));
  }
  async function tick() {
    const ev = await api('GET', `/v1/preview/training-jobs/${id}/events?limit=100${after ? '&after=' + after : ''}`);
    for (const e of ev.data) log.append(el('div', { dataset: { type: e.type } }, `${when(e.created_at)}  ${e.type}  ${JSON.stringify(e.data)}`));
    if (ev.last_id) after = ev.last_id;
    if (ev.has_more) return tick();
  }
  renderHead();
  await tick();
  show(el('h1', {}, 'Job ' + id), head, err, el('h2', {}, 'Events'), log);
  every(1000, async () => {
    if (!['QUEUED', 'RUNNING'].includes(j.status)) return;
    try { j = await api('GET', '/v1/preview/training-jobs/' + id); renderHead(); await tick(); } catch (e) { if (e.status !== 401) err.replaceChildren(errorBox(e)); }
  });
}

// ---------- provenance ----------

async function pageTrajectories(id, step) {
  const show = view();
  const m = await api('GET', '/v1/preview/models/' + id);
  const list = el('div', { id: 'trajectories' });
  const pager = el('div', { class: 'pager' });
  const head = el('p');
  async function load(offset) {
    let page;
    try {
      page = await api('GET', `/v1/preview/models/${id}/checkpoints/${step}/trajectories?offset=${offset}&limit=20`);
    } catch (e) {
      if (e.status === 404) { list.replaceChildren(el('p', { class: 'muted' }, e.message)); return; }
      throw e;
    }
    head.replaceChildren('Trained by job ', el('a', { href: '#/jobs/' + page.job_id, id: 'trained-by' }, page.job_id),
      ` from step ${step - 1}: ${page.total} trajectories.`);
    list.replaceChildren(...page.data.map((t, i) => el('div', { class: 'card trajectory' },
      el('div', { class: 'muted' }, `#${offset + i + 1} · group ${t.group} · reward ${fmt(t.reward)}${t.additional_histories ? ` · ${t.additional_histories} additional histories` : ''}`),
      t.messages_and_choices.map((x) => {
        if (x.choice) {
          const c = x.choice;
          const link = page.calls[c.fingerprint];
          const callLink = link
            ? el('a', { class: 'call-link', href: `#/calls/${link.project_id}/${link.call_id}` }, `call ${link.call_id.slice(0, 8)}… (choice ${link.choice_index})`)
            : el('span', { class: 'muted' }, c.fingerprint ? 'no recorded call' : 'no logprobs: not linked');
          return el('div', { class: 'msg choice' }, el('div', { class: 'role' }, `choice · ${c.num_tokens} tokens · `, callLink),
            c.content ?? '', c.tool_calls ? json(c.tool_calls) : null);
        }
        return el('div', { class: 'msg ' + (x.role || '') }, el('div', { class: 'role' }, x.role || '?'),
          typeof x.content === 'string' ? x.content : JSON.stringify(x.content));
      }))));
    pager.replaceChildren(
      el('button', { type: 'button', disabled: offset === 0, onclick: () => load(Math.max(0, offset - 20)) }, 'Previous'),
      el('span', { class: 'muted' }, `${offset + 1}–${Math.min(offset + 20, page.total)} of ${page.total}`),
      el('button', { type: 'button', disabled: !page.has_more, onclick: () => load(offset + 20) }, 'Next'));
  }
  await load(0);
  show(el('h1', {}, `${m.entity}/${m.project}/${m.name} · step ${step}`),
    el('p', {}, el('a', { href: '#/models/' + id }, '← model')), head, pager, list);
}

// ---------- calls ----------

const CALL_PAGE = 50;

async function pageCalls(q) {
  const show = view();
  let projects = [];
  try { projects = (await api('GET', '/calls/projects')).projects; } catch (e) { if (e.status === 401) throw e; }
  const project = q.get('project') || projects[0] || '';
  const f = {
    project: el('input', { id: 'f-project', list: 'projects', value: project, size: 28, placeholder: 'entity/project' }),
    op: el('input', { id: 'f-op', value: q.get('op') || '', placeholder: 'op name' }),
    status: el('select', { id: 'f-status' }, ['', 'success', 'error', 'running', 'descendant_error'].map((s) =>
      el('option', { value: s, selected: q.get('status') === s }, s || 'any status'))),
    after: el('input', { id: 'f-after', type: 'datetime-local', value: q.get('after') || '' }),
    before: el('input', { id: 'f-before', type: 'datetime-local', value: q.get('before') || '' }),
  };
  // Paging is by a cursor, not an offset, so the oldest page costs what the
  // newest does: "older" asks for calls started at or before the last one
  // shown (started_before = its time + 1 µs) and skips the ones at that very
  // time already shown (ties are ordered by id).
  const cursor = q.get('cursor') || '';
  const skip = +(q.get('skip') || 0);
  const form = el('form', {
    class: 'inline', id: 'calls-filter', onsubmit: (e) => {
      e.preventDefault();
      const p = new URLSearchParams();
      p.set('project', f.project.value);
      for (const k of ['op', 'status', 'after', 'before']) if (f[k].value) p.set(k, f[k].value);
      location.hash = '#/calls?' + p.toString();
    },
  }, el('label', {}, 'Project', f.project), el('datalist', { id: 'projects' }, projects.map((p) => el('option', { value: p }))),
  el('label', {}, 'Op', f.op), el('label', {}, 'Status', f.status), el('label', {}, 'Started after (UTC)', f.after),
  el('label', {}, 'Started before (UTC)', f.before), el('button', { class: 'primary', type: 'submit' }, 'Filter'),
  el('a', { id: 'calls-evals', href: '#/calls?' + new URLSearchParams({ project, evals: '1' }).toString() }, 'Evaluations'));
  if (!project) {
    show(el('h1', {}, 'Calls'), form, el('p', { class: 'muted' }, 'No call-store project yet.'));
    return;
  }
  const filter = {};
  if (q.get('op')) filter.op_names = [q.get('op')];
  if (q.get('evals')) filter.op_names = [`weave:///${project}/op/Evaluation.evaluate:*`];
  if (q.get('status')) filter.statuses = [q.get('status')];
  if (q.get('after')) filter.started_after = new Date(q.get('after') + 'Z').toISOString();
  if (q.get('before')) filter.started_before = new Date(q.get('before') + 'Z').toISOString();
  if (cursor) filter.started_before = cursor;
  const res = await api('POST', '/calls/query', {
    project_id: project, filter, sort_by: [{ field: 'started_at', direction: 'desc' }], limit: CALL_PAGE + 1, offset: skip,
    include_costs: true, include_storage_size: true,
  });
  const calls = res.calls.slice(0, CALL_PAGE);
  const [ent, proj] = project.split('/');
  const tbody = el('tbody', {}, calls.map((c) => {
    const costs = Object.values(c.summary?.platform?.costs || {});
    const cost = costs.length ? costs.reduce((a, x) => a + x.prompt_tokens_total_cost + x.completion_tokens_total_cost, 0) : null;
    return el('tr', { dataset: { id: c.id } },
      el('td', {}, el('a', { href: `#/calls/${encodeURIComponent(ent)}/${encodeURIComponent(proj)}/${c.id}` }, c.summary?.platform?.trace_name || c.op_name)),
      el('td', {}, status(c.summary?.platform?.status || '')), el('td', {}, when(c.started_at)),
      el('td', { class: 'num' }, c.summary?.platform?.latency_ms === undefined ? '—' : c.summary.platform.latency_ms + ' ms'),
      el('td', { class: 'num' }, cost === null ? '—' : '$' + cost.toFixed(6)), el('td', { class: 'num' }, bytes(c.storage_size_bytes)),
      el('td', {}, c.parent_id ? 'child' : 'root'));
  }));
  const nav = (c, k) => {
    const p = new URLSearchParams(q);
    p.set('project', project);
    if (c) { p.set('cursor', c); p.set('skip', String(k)); } else { p.delete('cursor'); p.delete('skip'); }
    location.hash = '#/calls?' + p.toString();
  };
  const older = () => {
    const last = calls.at(-1).started_at;
    const ties = calls.filter((c) => c.started_at === last).length;
    const next = plusMicro(last);
    nav(next, next === cursor ? skip + ties : ties);
  };
  show(el('h1', {}, 'Calls'), form,
    el('table', { id: 'calls' }, el('thead', {}, el('tr', {}, ['Op', 'Status', 'Started', 'Latency', 'Cost', 'Size', ''].map((h) => el('th', {}, h)))), tbody),
    el('div', { class: 'pager' },
      el('button', { type: 'button', id: 'calls-newest', disabled: !cursor, onclick: () => nav('', 0) }, 'Newest'),
      el('span', { class: 'muted' }, calls.length ? `${calls.length} calls, ${when(calls[0].started_at)} back to ${when(calls.at(-1).started_at)}` : 'no calls'),
      el('button', { type: 'button', id: 'calls-older', disabled: res.calls.length <= CALL_PAGE, onclick: older }, 'Older')));
}

// traceTree renders a trace's calls as nested lists by parent_id (calls
// whose parent is not among them are roots), the current call in bold.
function traceTree(calls, current, href) {
  const byParent = new Map();
  const ids = new Set(calls.map((c) => c.id));
  for (const c of calls) {
    const p = c.parent_id && ids.has(c.parent_id) ? c.parent_id : '';
    if (!byParent.has(p)) byParent.set(p, []);
    byParent.get(p).push(c);
  }
  const seen = new Set();
  const list = (parent) => el('ul', {}, (byParent.get(parent) || []).filter((c) => !seen.has(c.id)).map((c) => {
    seen.add(c.id);
    const name = c.summary?.platform?.trace_name || c.op_name;
    return el('li', { dataset: { id: c.id } }, c.id === current ? el('strong', {}, name) : el('a', { href: href(c.id) }, name),
      ' ', status(c.summary?.platform?.status || ''), ` ${when(c.started_at)}`, byParent.has(c.id) ? list(c.id) : null);
  }));
  return el('div', { id: 'trace-tree' }, list(''));
}

// plusMicro adds one microsecond to a wire timestamp (RFC 3339 with six
// fractional digits), exactly (Date has milliseconds only).
function plusMicro(ts) {
  const m = ts.match(/^(.*T\d\d:\d\d:\d\d)\.(\d{6})Z$/);
  if (!m) return ts;
  const us = BigInt(Date.parse(m[1] + 'Z')) * 1000n + BigInt(m[2]) + 1n;
  return new Date(Number(us / 1000n)).toISOString().replace('Z', String(us % 1000n).padStart(3, '0') + 'Z');
}

// ---------- evaluations (Weave's Evaluation.evaluate and EvaluationLogger) ----------

const EVAL_ROWS = 500;

// isEvaluation: the root call of a Weave evaluation (Python, TypeScript and
// EvaluationLogger all name the op Evaluation.evaluate).
function isEvaluation(c) {
  return (c.summary?.platform?.trace_name || c.op_name) === 'Evaluation.evaluate';
}

// compact renders a value on one line (objects as JSON), for table cells.
function compact(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') return fmt(v);
  if (typeof v === 'string') return v.length > 200 ? v.slice(0, 200) + '…' : v;
  const s = JSON.stringify(v);
  return s.length > 200 ? s.slice(0, 200) + '…' : s;
}

// evaluationSection shows an evaluation: its summary (the evaluate call's
// output) and one row per example (its predict_and_score children: the
// example, the model's output, each scorer's result). Examples the SDK
// passed as refs into the dataset's table are read with /refs/read_batch.
async function evaluationSection(project, c, href) {
  const kids = await api('POST', '/calls/query', { project_id: project, filter: { parent_ids: [c.id] }, limit: EVAL_ROWS + 50 });
  const rows = kids.calls.filter((k) => /predict_?and_?score/i.test(k.summary?.platform?.trace_name || k.op_name)).slice(0, EVAL_ROWS);
  const refs = [...new Set(rows.map((r) => r.inputs?.example).filter((e) => typeof e === 'string' && e.startsWith('weave:///')))];
  const resolved = new Map();
  if (refs.length) {
    try {
      const res = await api('POST', '/refs/read_batch', { refs });
      refs.forEach((r, i) => resolved.set(r, res.vals[i]));
    } catch (e) { if (e.status === 401) throw e; }
  }
  const example = (r) => {
    const e = r.inputs?.example ?? r.inputs;
    return typeof e === 'string' && resolved.has(e) ? resolved.get(e) : e;
  };
  // Python writes {output, scores}, TypeScript {model_output, scores}
  const output = (r) => (r.output && 'model_output' in r.output ? r.output.model_output : r.output?.output);
  const scorers = [...new Set(rows.flatMap((r) => Object.keys(r.output?.scores || {})))];
  const summary = c.output && typeof c.output === 'object' ? Object.entries(c.output) : [];
  return el('section', { id: 'evaluation' },
    el('h2', {}, 'Evaluation summary'),
    summary.length
      ? el('table', { id: 'eval-summary' }, el('thead', {}, el('tr', {}, el('th', {}, 'Scorer'), el('th', {}, 'Result'))),
        el('tbody', {}, summary.map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', {}, compact(v))))))
      : el('p', { class: 'muted' }, c.ended_at ? 'No summary.' : 'Running.'),
    el('h2', {}, `Examples (${rows.length}${rows.length === EVAL_ROWS ? '+' : ''})`),
    rows.length
      ? el('table', { id: 'eval-rows' },
        el('thead', {}, el('tr', {}, ['#', 'Example', 'Output', ...scorers].map((h) => el('th', {}, h)))),
        el('tbody', {}, rows.map((r, i) => el('tr', { dataset: { id: r.id } },
          el('td', {}, el('a', { href: href(r.id) }, String(i + 1))), el('td', {}, compact(example(r))), el('td', {}, compact(output(r))),
          ...scorers.map((s) => el('td', {}, compact(r.output?.scores?.[s])))))))
      : el('p', { class: 'muted' }, 'No examples yet.'));
}

async function pageCall(project, id) {
  const show = view();
  const read = await api('POST', '/call/read', { project_id: project, id, include_costs: true, include_storage_size: true, include_total_storage_size: true });
  const c = read.call;
  if (!c) { show(el('h1', {}, 'Call'), el('p', { class: 'error' }, 'No such call in ' + project)); return; }
  const kids = await api('POST', '/calls/query', { project_id: project, filter: { parent_ids: [id] }, limit: 100 });
  const TREE = 200;
  const trace = await api('POST', '/calls/query', { project_id: project, filter: { trace_ids: [c.trace_id] }, limit: TREE + 1 });
  const [ent, proj] = project.split('/');
  const href = (cid) => `#/calls/${encodeURIComponent(ent)}/${encodeURIComponent(proj)}/${cid}`;
  const costs = c.summary?.platform?.costs || {};
  show(el('h1', {}, c.summary?.platform?.trace_name || c.op_name),
    el('p', {}, status(c.summary?.platform?.status || ''), ` ${project} · started ${when(c.started_at)} · ended ${when(c.ended_at)} · `,
      `latency ${c.summary?.platform?.latency_ms === undefined ? '—' : c.summary.platform.latency_ms + ' ms'} · size ${bytes(c.storage_size_bytes)} · trace total ${bytes(c.total_storage_size_bytes)}`),
    el('p', {}, 'Trace ', c.trace_id, c.parent_id ? ['  · parent ', el('a', { href: href(c.parent_id), id: 'parent-call' }, c.parent_id)] : '  · root call'),
    el('h2', {}, `Children (${kids.calls.length}${kids.calls.length === 100 ? '+' : ''})`),
    kids.calls.length ? el('ul', { id: 'children' }, kids.calls.map((k) => el('li', {}, el('a', { href: href(k.id) }, k.op_name), ` ${when(k.started_at)}`))) : el('p', { class: 'muted' }, 'none'),
    isEvaluation(c) ? await evaluationSection(project, c, href) : null,
    el('h2', {}, 'Trace tree'), traceTree(trace.calls.slice(0, TREE), id, href),
    trace.calls.length > TREE ? el('p', { class: 'muted' }, `The first ${TREE} calls of the trace, by start time.`) : null,
    el('h2', {}, 'Costs'),
    Object.keys(costs).length
      ? el('table', {}, el('thead', {}, el('tr', {}, ['Model', 'Prompt tokens', 'Completion tokens', 'Prompt cost', 'Completion cost'].map((h) => el('th', {}, h)))),
        el('tbody', {}, Object.entries(costs).map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, v.prompt_tokens),
          el('td', { class: 'num' }, v.completion_tokens), el('td', { class: 'num' }, fmt(v.prompt_tokens_total_cost, 6)),
          el('td', { class: 'num' }, fmt(v.completion_tokens_total_cost, 6))))))
      : el('p', { class: 'muted' }, 'No priced usage.'),
    el('div', { class: 'grid2' }, el('div', { id: 'call-inputs' }, el('h2', {}, 'Inputs'), json(c.inputs)),
      el('div', { id: 'call-output' }, el('h2', {}, 'Output'), json(c.output))),
    c.exception ? [el('h2', {}, 'Exception'), el('pre', { class: 'error' }, c.exception)] : null,
    el('h2', {}, 'Summary and attributes'), json({ summary: c.summary, attributes: c.attributes }));
}

// ---------- playground ----------

async function pagePlayground(q) {
  const show = view();
  const models = await api('GET', '/v1/models');
  const model = el('input', { id: 'pg-model', list: 'pg-models', size: 50, value: q.get('model') || models.data[0]?.id || '' });
  const msgs = [];
  const log = el('div', { id: 'pg-log' });
  const input = el('textarea', { id: 'pg-input', placeholder: 'Say something…' });
  const temp = el('input', { id: 'pg-temp', type: 'number', step: '0.1', min: '0', max: '2', value: '1' });
  const maxTok = el('input', { id: 'pg-max', type: 'number', min: '1', max: '4096', value: '64' });
  const err = el('div');
  const send = el('button', { class: 'primary', type: 'submit', id: 'pg-send' }, 'Send');
  function bubble(role, text) {
    return el('div', { class: 'msg ' + role }, el('div', { class: 'role' }, role), text);
  }
  const form = el('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      const text = input.value;
      if (!text.trim()) return;
      err.replaceChildren();
      input.value = '';
      msgs.push({ role: 'user', content: text });
      log.append(bubble('user', text));
      const out = el('div', { class: 'tokens' });
      const box = el('div', { class: 'msg assistant' }, el('div', { class: 'role' }, 'assistant'), out);
      log.append(box);
      send.disabled = true;
      let reply = '';
      try {
        const resp = await fetch('/v1/chat/completions', {
          method: 'POST',
          headers: { Authorization: 'Bearer ' + sessionStorage.getItem(KEY), 'Content-Type': 'application/json' },
          body: JSON.stringify({ model: model.value, messages: msgs, stream: true, logprobs: true, top_logprobs: 3,
            temperature: +temp.value, max_tokens: +maxTok.value }),
        });
        if (!resp.ok) {
          const t = await resp.text();
          let msg = t;
          try { msg = JSON.parse(t).error.message; } catch { /* plain text */ }
          if (resp.status === 401) { signOut('The API key was refused (wrong or revoked): ' + msg); return; }
          throw new Error(`${resp.status}: ${msg}`);
        }
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 2);
            if (!line.startsWith('data:')) continue;
            const data = line.slice(5).trim();
            if (data === '[DONE]') continue;
            const chunk = JSON.parse(data);
            const ch = chunk.choices?.[0];
            if (!ch) continue;
            const toks = ch.logprobs?.content;
            if (toks && toks.length) {
              for (const t of toks) {
                const alts = (t.top_logprobs || []).map((a) => `${JSON.stringify(a.token)} ${a.logprob.toFixed(3)}`).join('\n');
                out.append(el('span', { class: 'tok', title: `${JSON.stringify(t.token)}  logprob ${t.logprob.toFixed(4)}  p=${Math.exp(t.logprob).toFixed(3)}${alts ? '\n' + alts : ''}`,
                  dataset: { logprob: String(t.logprob) } }, t.token.startsWith('token_id:') ? '' : t.token));
              }
              reply += ch.delta?.content || '';
            } else if (ch.delta?.content) {
              reply += ch.delta.content;
              out.append(el('span', {}, ch.delta.content));
            }
          }
        }
        msgs.push({ role: 'assistant', content: reply });
        box.dataset.done = 'true';
      } catch (ex) {
        err.replaceChildren(errorBox(ex));
        box.remove();
        msgs.pop();
      } finally {
        send.disabled = false;
      }
    },
  }, input, el('div', { class: 'toolbar' }, el('label', {}, 'Temperature', temp), el('label', {}, 'Max tokens', maxTok), send,
    el('button', { type: 'button', onclick: () => { msgs.length = 0; log.replaceChildren(); } }, 'Clear')));
  show(el('h1', {}, 'Playground'),
    el('label', {}, 'Model (a base model, entity/project/name, or …:stepN)', model),
    el('datalist', { id: 'pg-models' }, models.data.map((m) => el('option', { value: m.id }))),
    el('p', { class: 'muted' }, 'Replies stream in; hover a token for its logprob and the top alternatives.'),
    log, err, form);
}

// ---------- start ----------

document.getElementById('signout').addEventListener('click', () => signOut());
window.addEventListener('hashchange', route);
route();
