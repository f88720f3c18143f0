// The time axis: exposed step time over the job's recent history
// (report.timeline.series), stacked by stage advance or as lines, with
// the change points (onset/relief, before → after medians, the largest
// stage shift), the warm-up shaded, and the current window and its
// reference highlighted.
//
// Brushing selects steps: drag → the window (from/to), shift-drag → the
// reference (ref_from/ref_to). Keyboard: focus the chart, ←/→ move the
// cursor, shift+←/→ extend a selection, Enter applies it as the window,
// R as the reference, Esc clears.
//
// Other series reuse it (greyhound.js: iteration time): they pass
// {step, exposed_ms} points and may add bands, their own tooltips, an
// svgClass and label; without onBrush the chart is read-only.
import { el, sv, showTip, hideTip } from './dom.js';
import { fmtMs, fmtDelta, fmtInt, stageColor, short, niceTicks } from './format.js';

const M = { l: 58, r: 18, t: 40, b: 30 };
const H = 280;

// yMax ignores the warm-up (its first steps can be ten times the steady
// step) so the steady state fills the chart; taller steps are clipped.
function yMax(series, warmupEnd, mode) {
  const vals = [];
  for (const p of series) {
    if (p.step < warmupEnd) continue;
    vals.push(p.exposed_ms);
    if (mode === 'stack') vals.push((p.advance_ms || []).reduce((a, b) => a + b, 0));
  }
  if (!vals.length) for (const p of series) vals.push(p.exposed_ms);
  vals.sort((a, b) => a - b);
  const hi = vals[vals.length - 1] || 1;
  return hi * 1.12;
}

// nearest returns the index of the series point closest to step.
function nearest(series, step) {
  let lo = 0;
  let hi = series.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (series[mid].step < step) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(series[lo - 1].step - step) <= Math.abs(series[lo].step - step)) lo--;
  return lo;
}

export function drawTimeline(host, o) {
  const tl = o.timeline;
  const series = (tl && tl.series) || [];
  if (!series.length) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No time axis for this job yet.'));
    return;
  }
  const stages = tl.stages || [];
  const mode = o.mode === 'line' ? 'line' : 'stack';
  const W = Math.max(360, Math.floor(host.clientWidth || 900));
  const iw = W - M.l - M.r;
  const ih = H - M.t - M.b;
  const s0 = series[0].step;
  const s1 = series[series.length - 1].step;
  const span = Math.max(1, s1 - s0);
  const x = (step) => M.l + ((step - s0) / span) * iw;
  const stepAt = (px) => Math.round(s0 + ((px - M.l) / iw) * span);
  const ymax = yMax(series, tl.warmup_end, mode);
  const y = (v) => M.t + ih - (Math.min(v, ymax) / ymax) * ih;
  const svg = sv('svg', { class: o.svgClass || 'timeline', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': o.label || `exposed step time, steps ${s0}–${s1}` });

  const yt = niceTicks(0, ymax, 5);
  svg.append(sv('g', { class: 'grid' }, yt.map((v) => sv('line', { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }))));

  // Bands: warm-up, reference, window (drawn under the data).
  const band = (cls, a, b, label) => {
    const xa = x(Math.max(a, s0));
    const xb = x(Math.min(b, s1));
    if (!(xb >= xa) || b < s0 || a > s1) return null;
    return sv('g', { class: 'band ' + cls, 'data-from': a, 'data-to': b },
      sv('rect', { x: xa, y: M.t, width: Math.max(2, xb - xa), height: ih }),
      label && xb - xa > label.length * 6 + 8 ? sv('text', { x: xa + 4, y: M.t + ih - 6 }, label) : null);
  };
  if (tl.warmup_end > s0) svg.append(band('warmup', s0, tl.warmup_end - 0.5, 'warm-up'));
  if (o.ref) svg.append(band('ref', o.ref.from, o.ref.to, 'reference'));
  if (o.window) svg.append(band('window', o.window.from, o.window.to, 'window'));
  // Other callers' bands ({cls, from, to, label}), e.g. controller phases.
  for (const b of o.bands || []) {
    const g = band(b.cls, b.from, b.to, b.label);
    if (g) svg.append(g);
  }

  // Data.
  const n = series.length;
  const px = series.map((p) => x(p.step).toFixed(1));
  if (mode === 'stack') {
    const base = new Array(n).fill(0);
    stages.forEach((s, si) => {
      const top = series.map((p, i) => base[i] + Math.max(0, (p.advance_ms || [])[si] || 0));
      let d = '';
      for (let i = 0; i < n; i++) d += (i ? 'L' : 'M') + px[i] + ',' + y(top[i]).toFixed(1);
      for (let i = n - 1; i >= 0; i--) d += 'L' + px[i] + ',' + y(base[i]).toFixed(1);
      const focus = o.stage && o.stage !== s;
      svg.append(sv('path', { class: 'area', 'data-stage': s, d: d + 'Z', fill: stageColor(s, si), 'fill-opacity': focus ? 0.35 : 0.85 }));
      for (let i = 0; i < n; i++) base[i] = top[i];
    });
  } else {
    stages.forEach((s, si) => {
      let d = '';
      series.forEach((p, i) => { d += (i ? 'L' : 'M') + px[i] + ',' + y((p.advance_ms || [])[si] || 0).toFixed(1); });
      const focus = !o.stage || o.stage === s;
      svg.append(sv('path', { class: 'line', 'data-stage': s, d, fill: 'none', stroke: stageColor(s, si), 'stroke-width': focus ? 1.6 : 0.8, 'stroke-opacity': focus ? 1 : 0.45 }));
    });
  }
  let line = '';
  series.forEach((p, i) => { line += (i ? 'L' : 'M') + px[i] + ',' + y(p.exposed_ms).toFixed(1); });
  svg.append(sv('path', { class: 'exposed', d: line, fill: 'none', stroke: '#1f2328', 'stroke-width': 1.3, 'stroke-linejoin': 'round' }));
  // Steps taller than the axis are clipped; mark them.
  const clipped = series.filter((p) => p.exposed_ms > ymax);
  for (const p of clipped) svg.append(sv('text', { class: 'clipped', x: x(p.step), y: M.t + 8, 'text-anchor': 'middle' }, '⌃'));

  // Change points of the exposed step time, labelled on one of two rows
  // so close ones stay readable.
  const rowEnd = [-Infinity, -Infinity];
  for (const c of tl.change_points || []) {
    const cx = x(c.step);
    const top = (c.stages || [])[0];
    const label = `${c.kind === 'onset' ? '▲' : '▼'} ${c.kind} @${fmtInt(c.step)}: ${fmtMs(c.before_ms)} → ${fmtMs(c.after_ms)}` +
      (top && Math.abs(top.delta_ms) >= 0.05 ? ` · ${short(top.stage)} ${fmtDelta(top.delta_ms)}` : '');
    const w = label.length * 6.1;
    const end = cx + w > W - M.r;
    const left = end ? cx - w - 4 : cx + 4;
    let row = rowEnd.findIndex((e) => e < left - 8);
    if (row < 0) row = 1;
    rowEnd[row] = left + w;
    const g = sv('g', { class: 'cp ' + c.kind, 'data-step': c.step, 'data-kind': c.kind, tabindex: 0, 'aria-label': label },
      sv('line', { x1: cx, x2: cx, y1: 18 + 16 * row, y2: M.t + ih }),
      sv('text', { class: 'cp-label', x: end ? cx - 4 : cx + 4, y: 14 + 16 * row, 'text-anchor': end ? 'end' : 'start' }, label));
    g.addEventListener('mousemove', (ev) => showTip(ev, o.cpTip ? o.cpTip(c) : cpTip(c)));
    g.addEventListener('mouseleave', hideTip);
    svg.append(g);
  }
  // Restarts (incarnation=all): a dashed line where each launch begins.
  for (const r of tl.restarts || []) {
    const cx = x(r.at);
    const label = `↻ launch #${r.incarnation} (step ${fmtInt(r.step)})`;
    svg.append(sv('g', { class: 'restart', 'data-step': r.at, 'data-incarnation': r.incarnation, 'aria-label': label },
      sv('line', { x1: cx, x2: cx, y1: M.t, y2: M.t + ih, 'stroke-dasharray': '4 3', stroke: '#8250df' }),
      sv('text', { class: 'cp-label', x: cx + 4, y: M.t + ih - 6 }, label),
      sv('title', {}, `${label}: ${r.reason}`)));
  }
  // Stage change points: small ticks on the step axis in the stage's colour.
  for (const c of tl.stage_change_points || []) {
    const cx = x(c.step);
    const si = stages.indexOf(c.stage);
    const t = sv('path', { class: 'scp', 'data-stage': c.stage, 'data-step': c.step, d: `M${cx - 4},${M.t + ih + 9}L${cx + 4},${M.t + ih + 9}L${cx},${M.t + ih + 2}Z`, fill: stageColor(c.stage, si) },
      sv('title', {}, `${c.stage} ${c.kind} @${c.step}: ${fmtMs(c.before_ms)} → ${fmtMs(c.after_ms)} advance/step`));
    svg.append(t);
  }

  // Axes.
  const ax = sv('g', { class: 'axis' });
  ax.append(sv('line', { x1: M.l, x2: W - M.r, y1: M.t + ih, y2: M.t + ih }));
  const tickStep = yt.length > 1 ? yt[1] - yt[0] : 1;
  yt.forEach((v) => ax.append(sv('text', { x: M.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, tickStep >= 1 ? `${Math.round(v)} ms` : fmtMs(v))));
  // Steps are integers: no tick between two steps.
  niceTicks(s0, s1, Math.max(2, Math.min(Math.floor(iw / 90), s1 - s0))).forEach((st) => {
    if (st < s0 || st > s1 || !Number.isInteger(st)) return;
    ax.append(sv('line', { x1: x(st), x2: x(st), y1: M.t + ih, y2: M.t + ih + 4 }),
      sv('text', { x: x(st), y: M.t + ih + 20, 'text-anchor': 'middle' }, String(st)));
  });
  svg.append(ax);

  // The picked step (a click on the chart): where the profiler snippet
  // and the rank drill-down centre their spans.
  if (o.pick != null && o.pick >= s0 && o.pick <= s1) {
    svg.append(sv('g', { class: 'pick', 'data-step': o.pick },
      sv('line', { x1: x(o.pick), x2: x(o.pick), y1: M.t, y2: M.t + ih }),
      sv('text', { x: x(o.pick) + 3, y: M.t + 10 }, `step ${o.pick}`)));
  }

  // Interaction layer: hover guide, brush, keyboard cursor.
  const guide = sv('line', { class: 'guide', y1: M.t, y2: M.t + ih, visibility: 'hidden' });
  const sel = sv('rect', { class: 'brush', y: M.t, height: ih, visibility: 'hidden' });
  // Without onBrush the chart is read-only: the cursor moves, nothing is selected.
  const brushable = !!o.onBrush;
  const hit = sv('rect', { class: 'hit', x: M.l, y: M.t, width: iw, height: ih, fill: 'transparent', tabindex: 0, role: 'slider',
    'aria-label': brushable ? 'step cursor: arrows move, shift+arrows select, Enter sets the window, R the reference' : o.cursorLabel || 'cursor: arrows move',
    'aria-valuemin': s0, 'aria-valuemax': s1, 'aria-valuenow': s1 });
  svg.append(guide, sel, hit);
  const local = (ev) => ev.clientX - svg.getBoundingClientRect().left;
  const clampPx = (v) => Math.max(M.l, Math.min(M.l + iw, v));
  const showSel = (a, b, ref) => {
    sel.setAttribute('x', Math.min(a, b));
    sel.setAttribute('width', Math.max(1, Math.abs(b - a)));
    sel.setAttribute('class', 'brush' + (ref ? ' ref' : ''));
    sel.setAttribute('visibility', 'visible');
  };
  let drag = null;
  hit.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0 || !brushable) return;
    drag = { x0: clampPx(local(ev)), ref: ev.shiftKey };
    hit.setPointerCapture(ev.pointerId);
    hideTip();
  });
  hit.addEventListener('pointermove', (ev) => {
    const lx = clampPx(local(ev));
    if (drag) {
      showSel(drag.x0, lx, drag.ref);
      return;
    }
    const i = nearest(series, stepAt(lx));
    const p = series[i];
    guide.setAttribute('x1', x(p.step));
    guide.setAttribute('x2', x(p.step));
    guide.setAttribute('visibility', 'visible');
    showTip(ev, o.tip ? o.tip(p) : stepTip(p, stages, o));
  });
  hit.addEventListener('pointerup', (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    const x1 = clampPx(local(ev));
    sel.setAttribute('visibility', 'hidden');
    if (Math.abs(x1 - d.x0) < 5) {
      if (o.onPick) o.onPick(series[nearest(series, stepAt(x1))].step);
      return;
    }
    const a = series[nearest(series, stepAt(Math.min(d.x0, x1)))].step;
    const b = series[nearest(series, stepAt(Math.max(d.x0, x1)))].step;
    o.onBrush(a, b, d.ref || ev.shiftKey);
  });
  hit.addEventListener('pointercancel', () => { drag = null; sel.setAttribute('visibility', 'hidden'); });
  hit.addEventListener('pointerleave', () => { if (!drag) { guide.setAttribute('visibility', 'hidden'); hideTip(); } });

  // Keyboard brushing.
  let cur = n - 1;
  let anchor = null;
  const showCursor = () => {
    const p = series[cur];
    guide.setAttribute('x1', x(p.step));
    guide.setAttribute('x2', x(p.step));
    guide.setAttribute('visibility', 'visible');
    hit.setAttribute('aria-valuenow', p.step);
    hit.setAttribute('aria-valuetext', anchor == null ? (o.valueText ? o.valueText(p) : `step ${p.step}`) : `steps ${Math.min(series[anchor].step, p.step)}–${Math.max(series[anchor].step, p.step)} selected`);
    if (anchor != null) showSel(x(series[anchor].step), x(p.step), false);
    else sel.setAttribute('visibility', 'hidden');
  };
  hit.addEventListener('keydown', (ev) => {
    const big = Math.max(1, Math.round(n / 20));
    if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
      if (ev.shiftKey && anchor == null && brushable) anchor = cur;
      if (!ev.shiftKey) anchor = null;
      const dir = ev.key === 'ArrowLeft' ? -1 : 1;
      cur = Math.max(0, Math.min(n - 1, cur + dir * (ev.altKey || ev.ctrlKey ? big : 1)));
      showCursor();
      ev.preventDefault();
    } else if (ev.key === 'Home' || ev.key === 'End') {
      if (ev.shiftKey && anchor == null && brushable) anchor = cur;
      cur = ev.key === 'Home' ? 0 : n - 1;
      showCursor();
      ev.preventDefault();
    } else if ((ev.key === 'Enter' || ev.key === 'r' || ev.key === 'R') && anchor != null) {
      const a = Math.min(series[anchor].step, series[cur].step);
      const b = Math.max(series[anchor].step, series[cur].step);
      anchor = null;
      o.onBrush(a, b, ev.key !== 'Enter');
      ev.preventDefault();
    } else if (ev.key === 'Escape') {
      anchor = null;
      showCursor();
    }
  });
  hit.addEventListener('focus', showCursor);
  hit.addEventListener('blur', () => { guide.setAttribute('visibility', 'hidden'); if (anchor == null) sel.setAttribute('visibility', 'hidden'); });

  host.replaceChildren(svg);
}

function stepTip(p, stages, o) {
  const rows = stages.map((s, si) => [s, si, (p.advance_ms || [])[si] || 0]).filter((r) => r[2] > 0.005).reverse();
  const where = [];
  if (o.window && p.step >= o.window.from && p.step <= o.window.to) where.push('in the window');
  if (o.ref && p.step >= o.ref.from && p.step <= o.ref.to) where.push('in the reference');
  return el('div', {}, el('div', { class: 'tt-title' }, `step ${p.step} · ${fmtMs(p.exposed_ms)} exposed`),
    el('table', {}, rows.map(([s, si, a]) => el('tr', {},
      el('td', {}, el('span', { class: 'sw', style: `background:${stageColor(s, si)};margin-right:6px` }), short(s)),
      el('td', { class: 'num' }, fmtMs(a))))),
    where.length ? el('div', { class: 'tt-foot' }, where.join(', ')) : null,
    el('div', { class: 'tt-foot' }, 'drag: set the window · shift-drag: set the reference'));
}

function cpTip(c) {
  return el('div', {}, el('div', { class: 'tt-title' }, `${c.kind} at step ${c.step}`),
    el('div', {}, `median step time ${fmtMs(c.before_ms)} → ${fmtMs(c.after_ms)} (${c.rel >= 0 ? '+' : ''}${(100 * c.rel).toFixed(0)}%)`),
    el('table', {}, (c.stages || []).filter((s) => Math.abs(s.delta_ms) >= 0.05).slice(0, 6).map((s) => el('tr', {},
      el('td', {}, short(s.stage)), el('td', { class: 'num' }, `${fmtMs(s.before_ms)} → ${fmtMs(s.after_ms)}`), el('td', { class: 'num' }, fmtDelta(s.delta_ms))))));
}

// legend is the stage key and the chart's controls.
export function timelineLegend(tl, mode, onMode, refNote) {
  const stages = (tl && tl.stages) || [];
  return el('div', { class: 'legend' },
    stages.map((s, i) => el('span', { title: s }, el('span', { class: 'sw', style: `background:${stageColor(s, i)}` }), short(s))),
    el('span', {}, el('span', { class: 'sw line' }), 'exposed'),
    el('span', {}, el('span', { class: 'sw band-window' }), 'window'),
    el('span', {}, el('span', { class: 'sw band-ref' }), refNote || 'reference'),
    el('span', {}, el('span', { class: 'sw band-warmup' }), 'warm-up'),
    el('span', { class: 'spacer' }),
    el('div', { class: 'seg', role: 'group', 'aria-label': 'chart style' },
      [['stack', 'stacked'], ['line', 'lines']].map(([v, l]) =>
        el('button', { class: mode === v ? 'on' : null, 'aria-pressed': mode === v ? 'true' : 'false', 'data-mode': v, onclick: () => onMode(v) }, l))));
}
