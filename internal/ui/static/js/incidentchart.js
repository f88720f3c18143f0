// The incident timeline: the job's step time on the wall clock, with the
// before / during / after windows shaded, the healthy and slow levels,
// the onset and the relief marked, and below it one lane per engine with
// every piece of evidence the incident holds as a marker at its time
// (hover or focus: its text; click: its engine view on that window), and
// a lane with every action laggard took for it (the audit log).
//
// Engines see different clocks: StageFrontier counts training steps,
// Greyhound and SysOM-AI wall time, an action only has wall time. The
// axis is wall time; a finding known only by its steps is placed through
// the step ↔ time pairs the incident carries (step samples, its opening,
// windows), interpolated linearly.
//
// Drawn in SVG like the job page's step-time axis (timeline.js), with the
// same styles for bands, change points and the cursor.
import { el, sv, showTip, hideTip, tipTable } from './dom.js';
import { fmtMs, fmtInt, niceTicks, fmtTime } from './format.js';
import { ENGINE_ORDER, engineName, engineColor, kindText, targetText, requestText, requestTerm, viewHref } from './incidents.js';

const M = { l: 104, r: 18, t: 40, b: 28 };
const PLOT_H = 200;
const LANE_H = 26;
const LANE_GAP = 10;

const RESULT_COLOR = { requested: '#0b5cad', started: '#0b5cad', done: '#1a7f37', skipped: '#8c959f', failed: '#b42318' };
const SIGNAL_WORDS = {
  onset: 'the step time rose', relief: 'the step time fell back', finding: 'a finding', healthy: 'a measurement that cleared something',
  progress: 'step-time samples', state: 'an engine moved on',
};
const WINDOW_WORDS = { before: 'before', during: 'during the slowdown', after: 'after' };

// stepClock maps training steps to wall time through the (step, ns)
// pairs the incident knows.
function stepClock(inc) {
  const pairs = [];
  const add = (step, ns) => {
    if (step >= 0 && ns > 0) pairs.push([step, ns]);
  };
  for (const e of inc.evidence || []) {
    for (const s of e.samples || []) add(s.step, s.wall_ns);
    const w = e.window || {};
    if (w.to_step > w.from_step) {
      add(w.from_step, w.from_ns);
      add(w.to_step, w.to_ns);
    }
  }
  for (const p of [inc.opened, inc.updated, inc.resolved]) if (p) add(p.step, p.wall_ns);
  for (const w of Object.values(inc.windows || {})) {
    if (w && w.to_step > w.from_step) {
      add(w.from_step, w.from_ns);
      add(w.to_step, w.to_ns);
    }
  }
  pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  // One time per step, increasing with the step.
  const pts = [];
  for (const p of pairs) {
    const last = pts[pts.length - 1];
    if (last && p[0] === last[0]) continue;
    if (last && p[1] <= last[1]) continue;
    pts.push(p);
  }
  const perStep = (inc.slow_ms || inc.healthy_ms || 100) * 1e6;
  return (step) => {
    if (!pts.length) return null;
    if (pts.length === 1) return pts[0][1] + (step - pts[0][0]) * perStep;
    let i = pts.findIndex((p) => p[0] >= step);
    if (i < 0) i = pts.length - 1;
    if (i === 0) i = 1;
    const [s0, t0] = pts[i - 1];
    const [s1, t1] = pts[i];
    return t0 + ((step - s0) * (t1 - t0)) / (s1 - s0);
  };
}

// evTime is a piece of evidence's span on the wall clock: its window,
// else its steps through the clock, else when it was produced.
function evTime(e, clock) {
  const w = e.window || {};
  let a = w.from_ns > 0 ? w.from_ns : null;
  let b = w.to_ns > 0 ? w.to_ns : null;
  if (a == null && (w.to_step > 0 || w.from_step > 0)) {
    a = clock(w.from_step);
    b = clock(w.to_step);
  }
  if (a == null) a = e.at_ns;
  if (b == null || b < a) b = a;
  return [a, b];
}

// samplesOf merges the progress evidence's step times, one per step.
function samplesOf(inc, clock) {
  const by = new Map();
  for (const e of inc.evidence || []) {
    if (e.signal !== 'progress') continue;
    for (const s of e.samples || []) {
      const t = s.wall_ns > 0 ? s.wall_ns : clock(s.step);
      if (t != null && isFinite(s.ms)) by.set(s.step, { step: s.step, t, ms: s.ms });
    }
  }
  return [...by.values()].sort((a, b) => a.t - b.t);
}

// timeTicks are round wall-clock ticks over [t0, t1] (ns).
function timeTicks(t0, t1, n) {
  const span = (t1 - t0) / 1e9;
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const st = steps.find((s) => span / s <= n) || steps[steps.length - 1];
  const out = [];
  for (let s = Math.ceil(t0 / 1e9 / st) * st; s * 1e9 <= t1; s += st) out.push(s * 1e9);
  return { ticks: out, seconds: st < 60 };
}

function tipPoint(target) {
  const r = target.getBoundingClientRect();
  return { clientX: r.left + r.width / 2, clientY: r.top + r.height / 2 };
}

// drawIncidentChart draws into host (sized to it).
export function drawIncidentChart(host, inc) {
  const clock = stepClock(inc);
  const samples = samplesOf(inc, clock);
  const evs = (inc.evidence || []).map((e) => ({ e, span: evTime(e, clock) }));
  const acts = (inc.audit || []).filter((a) => a.at_ns > 0);
  const wins = ['before', 'during', 'after'].map((k) => ({ k, w: (inc.windows || {})[k] || {} })).filter((x) => x.w.from_ns > 0 && x.w.to_ns > x.w.from_ns);

  // The time domain covers everything drawn.
  const times = [];
  for (const s of samples) times.push(s.t);
  for (const x of evs) times.push(x.span[0], x.span[1]);
  for (const a of acts) times.push(a.at_ns);
  for (const x of wins) times.push(x.w.from_ns, x.w.to_ns);
  for (const p of [inc.opened, inc.resolved]) if (p && p.wall_ns > 0) times.push(p.wall_ns);
  const valid = times.filter((t) => t > 0 && isFinite(t));
  if (!valid.length) {
    host.replaceChildren(el('div', { class: 'empty inc-timeline-empty' }, 'Nothing to place on a time axis yet.'));
    return;
  }
  let t0 = Math.min(...valid);
  let t1 = Math.max(...valid);
  const pad = Math.max((t1 - t0) * 0.02, 1e9);
  t0 -= pad;
  t1 += pad;

  const lanes = ENGINE_ORDER.filter((k) => evs.some((x) => x.e.engine === k));
  for (const x of evs) if (!lanes.includes(x.e.engine)) lanes.push(x.e.engine);
  lanes.push('actions');
  const W = Math.max(480, Math.floor(host.clientWidth || 900));
  const iw = W - M.l - M.r;
  const laneTop = M.t + PLOT_H + LANE_GAP;
  const H = laneTop + lanes.length * LANE_H + M.b;
  const x = (t) => M.l + ((t - t0) / (t1 - t0)) * iw;
  const ymax = Math.max(1, ...samples.map((s) => s.ms), inc.slow_ms || 0, inc.healthy_ms || 0) * 1.12;
  const y = (v) => M.t + PLOT_H - (Math.min(v, ymax) / ymax) * PLOT_H;
  const laneY = (i) => laneTop + i * LANE_H + LANE_H / 2;

  const svg = sv('svg', { class: 'inc-timeline', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': `step time from ${fmtTime(t0)} to ${fmtTime(t1)} with ${evs.length} pieces of evidence and ${acts.length} actions` });

  const yt = niceTicks(0, ymax, 4);
  svg.append(sv('g', { class: 'grid' }, yt.map((v) => sv('line', { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }))));

  // Windows, shaded under everything.
  for (const { k, w } of wins) {
    const xa = Math.max(M.l, x(w.from_ns));
    const xb = Math.min(W - M.r, x(w.to_ns));
    const label = WINDOW_WORDS[k];
    svg.append(sv('g', { class: 'band inc-win win-' + k, 'data-window': k, 'data-from': w.from_ns, 'data-to': w.to_ns, 'data-from-step': w.from_step, 'data-to-step': w.to_step },
      sv('rect', { x: xa, y: M.t, width: Math.max(2, xb - xa), height: H - M.t - M.b }),
      xb - xa > label.length * 6 + 8 ? sv('text', { x: xa + 4, y: M.t + 12 }, label) : null,
      sv('title', {}, `${label}: steps ${fmtInt(w.from_step)}–${fmtInt(w.to_step)}, ${fmtTime(w.from_ns)}–${fmtTime(w.to_ns)}`)));
  }
  // Healthy and slow levels.
  const level = (cls, v, label) => (v > 0
    ? sv('g', { class: 'inc-level ' + cls, 'data-ms': v },
      sv('line', { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }),
      sv('text', { x: W - M.r - 4, y: y(v) - 4, 'text-anchor': 'end' }, `${label} ${fmtMs(v)}`))
    : null);
  svg.append(level('healthy', inc.healthy_ms, 'healthy'), level('slow', inc.slow_ms, 'slow'));

  // Step time.
  if (samples.length) {
    let d = '';
    samples.forEach((s, i) => { d += (i ? 'L' : 'M') + x(s.t).toFixed(1) + ',' + y(s.ms).toFixed(1); });
    svg.append(sv('path', { class: 'inc-steps', d, fill: 'none', stroke: '#1f2328', 'stroke-width': 1.3, 'stroke-linejoin': 'round' }));
  } else {
    svg.append(sv('text', { class: 'muted', x: M.l + 8, y: M.t + PLOT_H / 2 }, 'no step-time samples in this incident'));
  }

  // Onset and relief: across the plot and the lanes.
  const mark = (kind, p, label, row) => {
    if (!p || !(p.wall_ns > 0)) return;
    const cx = x(p.wall_ns);
    const end = cx + label.length * 6.1 > W - M.r;
    svg.append(sv('g', { class: 'cp inc-mark ' + kind, 'data-kind': kind, 'data-step': p.step, 'data-ns': p.wall_ns, tabindex: 0, 'aria-label': label },
      sv('line', { x1: cx, x2: cx, y1: 18 + 14 * row, y2: H - M.b }),
      sv('text', { class: 'cp-label', x: end ? cx - 4 : cx + 4, y: 14 + 14 * row, 'text-anchor': end ? 'end' : 'start' }, label)));
  };
  const rise = inc.healthy_ms > 0 && inc.slow_ms > 0 ? `: ${fmtMs(inc.healthy_ms)} → ${fmtMs(inc.slow_ms)}` : '';
  mark('onset', inc.opened, `▲ slowed at step ${fmtInt((inc.opened || {}).step)}${rise}`, 0);
  if (inc.resolved) mark('relief', inc.resolved, `▼ recovered at step ${fmtInt(inc.resolved.step)}`, 1);

  // Lanes.
  lanes.forEach((k, i) => {
    const ly = laneY(i);
    svg.append(sv('g', { class: 'inc-lane', 'data-lane': k },
      sv('line', { x1: M.l, x2: W - M.r, y1: ly, y2: ly }),
      sv('text', { x: M.l - 8, y: ly + 4, 'text-anchor': 'end', class: 'inc-lane-label' }, k === 'actions' ? 'Actions' : engineName(k))));
  });
  // Markers close in time in one lane take the next of three rows.
  const rowOf = (() => {
    const last = new Map();
    return (lane, px) => {
      const xs = last.get(lane) || [];
      let row = 0;
      while (row < 3 && xs.some((q) => q.row === row && Math.abs(q.px - px) < 7)) row++;
      if (row === 3) row = 0;
      xs.push({ px, row });
      last.set(lane, xs);
      return [0, -7, 7][row];
    };
  })();
  const bind = (g, tip, href) => {
    g.addEventListener('mousemove', (ev) => showTip(ev, tip()));
    g.addEventListener('mouseleave', hideTip);
    g.addEventListener('focus', () => showTip(tipPoint(g), tip()));
    g.addEventListener('blur', hideTip);
    if (href) {
      g.addEventListener('click', () => { location.hash = href; });
      g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') location.hash = href; });
    }
  };
  for (const { e, span } of evs) {
    const li = lanes.indexOf(e.engine);
    const ly = laneY(li);
    const xa = x(span[0]);
    const xb = x(span[1]);
    const c = engineColor(e.engine);
    const v = viewHref(e.view);
    const g = sv('g', { class: 'inc-ev sig-' + e.signal + (e.confidence ? ' conf-' + e.confidence : ''), 'data-evidence': e.id, 'data-engine': e.engine,
      'data-kind': e.kind, 'data-signal': e.signal, 'data-ns': Math.round(span[0]), tabindex: 0, role: v ? 'link' : 'img', 'aria-label': `${engineName(e.engine)}: ${e.text}` });
    if (e.signal === 'progress') {
      g.append(sv('rect', { x: xa, y: ly - 3, width: Math.max(3, xb - xa), height: 6, fill: c, 'fill-opacity': 0.35, rx: 2 }));
    } else {
      const dy = rowOf(e.engine, xa);
      const cy = ly + dy;
      if (xb - xa > 4) g.append(sv('line', { class: 'inc-ev-span', x1: xa, x2: xb, y1: cy, y2: cy, stroke: c }));
      const hollow = e.signal === 'healthy' || e.confidence === 'withheld';
      const fill = hollow ? '#fff' : c;
      if (e.signal === 'onset') g.append(sv('path', { d: `M${xa - 5},${cy + 4}L${xa + 5},${cy + 4}L${xa},${cy - 5}Z`, fill, stroke: c }));
      else if (e.signal === 'relief') g.append(sv('path', { d: `M${xa - 5},${cy - 4}L${xa + 5},${cy - 4}L${xa},${cy + 5}Z`, fill, stroke: c }));
      else if (e.signal === 'state') g.append(sv('path', { d: `M${xa},${cy - 4}L${xa + 4},${cy}L${xa},${cy + 4}L${xa - 4},${cy}Z`, fill, stroke: c }));
      else g.append(sv('circle', { cx: xa, cy, r: 4.5, fill, stroke: c, 'stroke-width': 1.6 }));
    }
    bind(g, () => evidenceTip(e, span, v), v && v.href);
    svg.append(g);
  }
  const ai = lanes.indexOf('actions');
  for (const a of acts) {
    const ax = x(a.at_ns);
    const cy = laneY(ai) + rowOf('actions', ax);
    const g = sv('g', { class: 'inc-act result-' + a.result, 'data-kind': a.kind, 'data-result': a.result, 'data-ns': a.at_ns, tabindex: 0, role: 'img',
      'aria-label': `${requestText(a.kind)} ${a.result}: ${a.text}` },
    sv('rect', { x: ax - 4, y: cy - 4, width: 8, height: 8, fill: RESULT_COLOR[a.result] || '#8c959f' }));
    bind(g, () => tipTable(`${requestText(a.kind)} · ${a.result}`, [['when', fmtTime(a.at_ns)], a.ranks && a.ranks.length ? ['ranks', a.ranks.join(', ')] : null,
      a.ref ? ['reference', a.ref] : null].filter(Boolean), el('span', {}, a.text, el('div', { class: 'muted' }, requestTerm(a.kind)))));
    svg.append(g);
  }

  // Axes.
  const ax = sv('g', { class: 'axis' });
  ax.append(sv('line', { x1: M.l, x2: W - M.r, y1: M.t + PLOT_H, y2: M.t + PLOT_H }));
  const tickStep = yt.length > 1 ? yt[1] - yt[0] : 1;
  yt.forEach((v) => ax.append(sv('text', { x: M.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, tickStep >= 1 ? `${Math.round(v)} ms` : fmtMs(v))));
  const tt = timeTicks(t0, t1, Math.max(2, Math.floor(iw / 90)));
  for (const t of tt.ticks) {
    const tx = x(t);
    const s = new Date(t / 1e6).toISOString();
    ax.append(sv('line', { x1: tx, x2: tx, y1: H - M.b, y2: H - M.b + 4 }),
      sv('text', { x: tx, y: H - M.b + 17, 'text-anchor': 'middle' }, tt.seconds ? s.slice(11, 19) : s.slice(11, 16)));
  }
  ax.append(sv('line', { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }));
  svg.append(ax);

  // Cursor over the plot: the nearest step.
  if (samples.length) {
    const guide = sv('line', { class: 'guide', y1: M.t, y2: M.t + PLOT_H, visibility: 'hidden' });
    const hit = sv('rect', { class: 'hit', x: M.l, y: M.t, width: iw, height: PLOT_H, fill: 'transparent', tabindex: 0, role: 'slider',
      'aria-label': 'step cursor: arrows move', 'aria-valuemin': samples[0].step, 'aria-valuemax': samples[samples.length - 1].step });
    let cur = samples.length - 1;
    const show = (i, ev) => {
      cur = i;
      const s = samples[i];
      guide.setAttribute('x1', x(s.t));
      guide.setAttribute('x2', x(s.t));
      guide.setAttribute('visibility', 'visible');
      hit.setAttribute('aria-valuenow', s.step);
      hit.setAttribute('aria-valuetext', `step ${s.step}: ${fmtMs(s.ms)}`);
      const where = wins.find(({ w }) => s.t >= w.from_ns && s.t <= w.to_ns);
      showTip(ev || tipPoint(hit), tipTable(`step ${fmtInt(s.step)} · ${fmtMs(s.ms)}`, [['ended', fmtTime(s.t)],
        inc.healthy_ms > 0 ? ['against healthy', `${s.ms >= inc.healthy_ms ? '+' : '−'}${fmtMs(Math.abs(s.ms - inc.healthy_ms))}`] : null].filter(Boolean),
      where ? WINDOW_WORDS[where.k] : null));
    };
    const nearest = (t) => {
      let best = 0;
      for (let i = 1; i < samples.length; i++) if (Math.abs(samples[i].t - t) < Math.abs(samples[best].t - t)) best = i;
      return best;
    };
    hit.addEventListener('pointermove', (ev) => {
      const px = ev.clientX - svg.getBoundingClientRect().left;
      show(nearest(t0 + ((px - M.l) / iw) * (t1 - t0)), ev);
    });
    hit.addEventListener('pointerleave', () => { guide.setAttribute('visibility', 'hidden'); hideTip(); });
    hit.addEventListener('keydown', (ev) => {
      if (ev.key !== 'ArrowLeft' && ev.key !== 'ArrowRight') return;
      show(Math.max(0, Math.min(samples.length - 1, cur + (ev.key === 'ArrowLeft' ? -1 : 1))));
      ev.preventDefault();
    });
    hit.addEventListener('blur', () => { guide.setAttribute('visibility', 'hidden'); hideTip(); });
    // Under the markers so they keep their hover.
    svg.insertBefore(hit, svg.querySelector('.inc-mark, .inc-lane'));
    svg.insertBefore(guide, hit);
  }
  host.replaceChildren(svg);
}

function evidenceTip(e, span, v) {
  const w = e.window || {};
  const rows = [
    ['what', kindText(e.kind)],
    ['when', span[1] > span[0] + 1e9 ? `${fmtTime(span[0])} – ${fmtTime(span[1])}` : fmtTime(span[0])],
    w.to_step > 0 || w.from_step > 0 ? ['steps', w.to_step > w.from_step ? `${fmtInt(w.from_step)}–${fmtInt(w.to_step)}` : fmtInt(w.from_step)] : null,
    e.confidence ? ['confidence', e.confidence] : null,
    e.source ? ['read from', e.source] : null,
    (e.targets || []).length ? ['names', e.targets.map(targetText).join(', ')] : null,
    (e.against || []).length ? ['clears', e.against.length > 3 ? `${e.against.length} targets (${targetText(e.against[0])}, …)` : e.against.map(targetText).join(', ')] : null,
    e.before_ms > 0 && e.after_ms > 0 ? ['step time', `${fmtMs(e.before_ms)} → ${fmtMs(e.after_ms)}${e.verified ? ' (verified)' : ''}`] : null,
  ].filter(Boolean);
  return el('div', { class: 'inc-ev-tip' },
    el('div', { class: 'tt-title' }, `${engineName(e.engine)} · ${SIGNAL_WORDS[e.signal] || e.signal}`),
    el('div', { class: 'tt-text' }, e.text),
    el('table', {}, rows.map(([k, val]) => el('tr', {}, el('td', {}, k), el('td', {}, val)))),
    e.reason ? el('div', { class: 'tt-foot' }, 'why: ', e.reason) : null,
    el('div', { class: 'tt-foot mono' }, e.kind, e.withheld ? ` · withheld: ${e.withheld}` : ''),
    v ? el('div', { class: 'tt-foot' }, 'click to open it in the ', engineName(e.engine), ' view on this window') : null);
}

// chartLegend is the key under the chart.
export function chartLegend(inc) {
  const present = ENGINE_ORDER.filter((k) => (inc.evidence || []).some((e) => e.engine === k));
  return el('div', { class: 'legend inc-legend' },
    el('span', {}, el('span', { class: 'sw line' }), 'step time'),
    present.map((k) => el('span', { 'data-engine': k }, el('span', { class: 'sw', style: `background:${engineColor(k)}` }), engineName(k))),
    el('span', {}, '▲ rose · ▼ fell · ● finding · ○ cleared or withheld · ◆ engine moved on · ■ action'),
    el('span', {}, el('span', { class: 'sw inc-sw-before' }), 'before'),
    el('span', {}, el('span', { class: 'sw inc-sw-during' }), 'during'),
    el('span', {}, el('span', { class: 'sw inc-sw-after' }), 'after'));
}
