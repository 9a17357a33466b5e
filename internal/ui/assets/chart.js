// A small hand-drawn SVG line chart: one series of [x, y] points, axes with
// min/max labels, and the raw numbers of the nearest point on hover (a
// readout above the chart and a highlighted marker). No dependencies.
const NS = 'http://www.w3.org/2000/svg';
const W = 400;
const H = 180;
const PAD = { l: 58, r: 8, t: 8, b: 20 };
const MAX_MARKERS = 300; // beyond this, hover still works but points get no marker

function svg(tag, attrs) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
  return n;
}

function num(v) {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(2) : String(+v.toPrecision(4));
}

// lineChart returns a .chart element titled name, with data-metric=name and
// data-points = the number of points.
export function lineChart(name, points, xLabel) {
  const box = document.createElement('div');
  box.className = 'chart';
  box.dataset.metric = name;
  box.dataset.points = String(points.length);
  const title = document.createElement('div');
  title.className = 'title';
  const label = document.createElement('span');
  label.textContent = name;
  const readout = document.createElement('span');
  readout.className = 'readout';
  const last = points.at(-1);
  readout.textContent = last ? `${xLabel} ${last[0]}: ${num(last[1])}` : 'no data';
  title.append(label, readout);
  box.append(title);

  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img' });
  box.append(s);
  if (!points.length) return box;
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const [x, y] of points) {
    x0 = Math.min(x0, x); x1 = Math.max(x1, x);
    if (Number.isFinite(y)) { y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  }
  if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const px = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const py = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);

  s.append(svg('line', { class: 'axis', x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b }));
  s.append(svg('line', { class: 'axis', x1: PAD.l, y1: PAD.t, x2: PAD.l, y2: H - PAD.b }));
  const text = (x, y, t, anchor) => { const n = svg('text', { x, y, 'text-anchor': anchor }); n.textContent = t; s.append(n); };
  text(PAD.l - 4, PAD.t + 8, num(y1), 'end');
  text(PAD.l - 4, H - PAD.b, num(y0), 'end');
  text(PAD.l, H - 6, num(x0), 'start');
  text(W - PAD.r, H - 6, num(x1), 'end');

  const finite = points.filter(([, y]) => Number.isFinite(y));
  s.append(svg('polyline', { class: 'line', points: finite.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' ') }));
  if (finite.length <= MAX_MARKERS) {
    for (const [x, y] of finite) {
      const c = svg('circle', { class: 'pt', cx: px(x).toFixed(1), cy: py(y).toFixed(1), r: 2.5 });
      const t = svg('title');
      t.textContent = `${xLabel} ${x}: ${y}`;
      c.append(t);
      s.append(c);
    }
  }
  const hot = svg('circle', { class: 'pt hot', r: 4, cx: -10, cy: -10 });
  s.append(hot);
  s.addEventListener('mousemove', (e) => {
    const r = s.getBoundingClientRect();
    const x = x0 + ((((e.clientX - r.left) / r.width) * W - PAD.l) / (W - PAD.l - PAD.r)) * (x1 - x0);
    let best = finite[0];
    for (const p of finite) if (Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
    if (!best) return;
    hot.setAttribute('cx', px(best[0]).toFixed(1));
    hot.setAttribute('cy', py(best[1]).toFixed(1));
    readout.textContent = `${xLabel} ${best[0]}: ${best[1]}`;
  });
  return box;
}
