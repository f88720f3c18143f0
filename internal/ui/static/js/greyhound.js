// The job page's Greyhound section: what the job's collective calls say
// (GET /api/v1/jobs/<id>/greyhound; Greyhound §4). Iteration time from
// the calls' ACF period with the BOCD+V change points and the
// controller's phases shaded behind it (§4.2); the verdict and each
// controller transition with the evidence that moved it; the
// cross-group comparison (§4.3: clusters of the same op, bytes and group
// size; a group is degraded above 1.1× the cluster median); the rank ×
// collective entry-lateness heatmap (the rank that enters last is the
// one the others wait for); and the validation results (per-rank GEMM,
// per-link P2P, §4.3 Fig. 10).
//
// A 404 means the job sends no collective telemetry: the section says
// how to get it; that is not an error.
import { el, sv, card, showTip, hideTip, tipTable } from './dom.js';
import { fmtMs, fmtInt, fmtNum, fmtTime, fmtDate, fmtDur } from './format.js';
import { drawTimeline } from './timeline.js';
import { RAMPS, rampRGB } from './heatmap.js';
import { cachedJSON, greyhoundPath } from './api.js';
import { go } from './state.js';

export const NO_TELEMETRY = "No collective telemetry for this job: run with the NCCL shim / laggard agent or the Python client's collective capture.";

const PHASES = ['tracking', 'profiling', 'validation', 'verdict'];
const PHASE_HELP = {
  tracking: 'watching iteration time for a change point',
  profiling: 'comparing comparable collective groups',
  validation: 'benchmarking GEMM per rank and P2P per link at a step boundary',
  verdict: 'the controller has concluded',
};
const KIND = {
  slow_rank: 'slow rank', slow_link: 'slow link', late_rank: 'late rank (host side)', uniform: 'uniform slowdown', none: 'no fail-slow', inconclusive: 'inconclusive',
};
// §4.3: a group, a GEMM or a link is slow above 1.1× its median.
const SLOW = 1.1;

// loadGreyhound never rejects (the page must not fail for it):
// {report}, {missing} for a 404, {error}, or {aborted}.
// params: the page's query; its incarnation (the launch selector) is the
// launch the report reads, as the stage report's; gh_from_ns and
// gh_to_ns (an incident's link) are the report's window, from_ns and
// to_ns.
export async function loadGreyhound(id, signal, fresh, params) {
  try {
    const q = new URLSearchParams();
    for (const [k, v] of [['incarnation', 'incarnation'], ['gh_from_ns', 'from_ns'], ['gh_to_ns', 'to_ns']]) {
      if (params && params.get(k)) q.set(v, params.get(k));
    }
    const qs = q.toString();
    const report = await cachedJSON(greyhoundPath(id) + (qs ? '?' + qs : ''), signal, fresh);
    // A report over zero calls says nothing either.
    if (!(report && report.telemetry && report.telemetry.calls > 0)) return { missing: true, message: '' };
    return { report };
  } catch (e) {
    if (e.name === 'AbortError') return { aborted: true };
    if (e.status === 404) return { missing: true, message: e.message };
    return { error: e };
  }
}

// greyhoundSig changes when a refresh should redraw the section.
export function greyhoundSig(gh) {
  if (!gh || !gh.report) return gh && gh.missing ? 'missing' : 'none';
  const r = gh.report;
  const c = r.controller || {};
  return `${r.generated_ns}:${c.phase}:${(c.history || []).length}:${(r.telemetry || {}).calls}`;
}

// ---------- formatting ----------
function fmtBytes(b) {
  if (!(b >= 0)) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (Number.isInteger(b) ? b : b.toFixed(1)) + ' ' + u[i];
}

const fmtRatio = (x) => (x == null || !isFinite(x) ? '—' : x.toFixed(2) + '×');

// ranksText compresses a rank list into runs ("0–3, 8"), at most a few.
export function ranksText(rs, maxRuns = 4) {
  const s = (rs || []).slice().sort((a, b) => a - b);
  const runs = [];
  for (const r of s) {
    const last = runs[runs.length - 1];
    if (last && r === last[1] + 1) last[1] = r;
    else runs.push([r, r]);
  }
  const txt = runs.slice(0, maxRuns).map(([a, b]) => (a === b ? `${a}` : b === a + 1 ? `${a}, ${b}` : `${a}–${b}`)).join(', ');
  return runs.length > maxRuns ? `${txt}, … (${fmtInt(s.length)} ranks)` : txt;
}

function evidenceText(ev) {
  if (!ev || typeof ev !== 'object') return '';
  const val = (v) => {
    if (Array.isArray(v)) return v.length > 8 ? v.slice(0, 8).join(', ') + ` … (${v.length})` : v.length ? v.join(', ') : 'none';
    if (v && typeof v === 'object') return JSON.stringify(v).slice(0, 80);
    return String(v);
  };
  return Object.entries(ev).map(([k, v]) => `${k.replace(/_/g, ' ')}: ${val(v)}`).join(' · ').slice(0, 400);
}

// rankChip opens the rank's stage drill-down when the page has one.
function rankChip(rank, ctx, extra, cls) {
  const text = [`r${rank}`, extra ? ' ' + extra : ''];
  const c = 'chip gh-rank' + (cls ? ' ' + cls : '');
  return ctx && ctx.hasStage
    ? el('button', { type: 'button', class: c, 'data-rank': rank, title: 'open this rank in the stage drill-down', onclick: () => go({ rank }) }, text)
    : el('span', { class: c, 'data-rank': rank }, text);
}

// ---------- the section ----------
// greyhoundView builds the section; draw() paints the charts once it is
// in the document (they size themselves to it).
export function greyhoundView(gh, ctx = {}) {
  const head = (sub) => el('h2', { id: 'gh-title', class: 'gh-title' }, 'Collectives · Greyhound', sub ? el('span', { class: 'sub' }, sub) : null);
  if (!gh || gh.aborted) return { node: null, draw() {} };
  if (gh.missing) {
    return { node: el('section', { class: 'card gh gh-missing', id: 'greyhound', 'aria-labelledby': 'gh-title' },
      head(), el('p', { class: 'muted gh-missing-text' }, NO_TELEMETRY),
      gh.message ? el('p', { class: 'small muted' }, `The server said: ${gh.message}`) : null), draw() {} };
  }
  if (gh.error || !gh.report) {
    const e = gh.error || {};
    return { node: el('section', { class: 'card gh', id: 'greyhound', 'aria-labelledby': 'gh-title' }, head(),
      el('p', { class: 'error-line gh-error', role: 'alert' }, `Cannot load the collective analysis: ${e.message || 'no report'}`,
        e.path ? ` (GET ${e.path})` : '')), draw() {} };
  }
  const r = gh.report;
  const t = r.telemetry || {};
  const iterHost = el('div', { class: 'chart gh-iter', id: 'gh-iter' });
  const latHost = el('div', { class: 'gh-lat', id: 'gh-lateness' });
  const node = el('section', { class: 'gh', id: 'greyhound', 'aria-labelledby': 'gh-title' },
    head(`${fmtInt(t.calls)} calls from ${fmtInt(t.ranks)} ranks${t.dropped ? ` · ${fmtInt(t.dropped)} dropped` : ''} · detector ${r.detector || '—'}`),
    r.incarnation_note ? el('p', { class: 'note gh-incarnation-note' }, r.incarnation_note) : null,
    windowNote(ctx.window),
    t.limited || t.dropped > 0
      ? el('p', { class: 'note gh-telemetry-note' }, `Collective telemetry is incomplete${t.dropped ? ` (${fmtInt(t.dropped)} records dropped by the capture rings)` : ''}: lateness and group times may miss calls.`)
      : null,
    verdictCard(r, ctx),
    card('Iteration time', iterSub(r), phaseLegend(), iterHost),
    el('div', { class: 'grid' },
      card('Group comparison', 'comparable clusters (same op, bytes, group size): each group’s execution time against the cluster median; degraded above 1.1×', groupsView(r)),
      card('Entry lateness', 'rank × collective: how much later than the first member each rank entered (ms); the last to enter is the one the others wait for', latHost)),
    validationCard(r, ctx));
  return {
    node,
    draw() {
      drawIteration(iterHost, r);
      drawLateness(latHost, r, ctx);
    },
  };
}

// windowNote says the section reads a window a link chose, with the way
// back to its default.
function windowNote(w) {
  if (!w) return null;
  return el('p', { class: 'note gh-window', 'data-from-ns': w.from || '', 'data-to-ns': w.to || '' },
    `Window from the link: ${w.from ? fmtTime(w.from) : 'the start'} – ${w.to ? fmtTime(w.to) : 'now'}. `,
    el('button', { type: 'button', class: 'linkish', onclick: () => go({ gh_from_ns: null, gh_to_ns: null }) }, 'show the default window'));
}

function iterSub(r) {
  const it = r.iteration;
  if (!it) return 'no periodic call pattern yet';
  const bits = [`ms per iteration from the collective calls: ${String(it.method || 'acf').toUpperCase()} period ${fmtInt(it.period)} calls (ACF ${fmtNum(it.acf, 2)})`,
    `median ${fmtMs(it.median_ms)}`];
  if (it.note) bits.push(it.note);
  if (it.truth_error_pct != null) bits.push(`${fmtNum(it.truth_error_pct, 1)}% from the client’s step times`);
  bits.push('change points by ' + (r.detector || 'the detector'));
  return bits.join(' · ');
}

function phaseLegend() {
  return el('div', { class: 'gh-legend' },
    PHASES.map((p) => el('span', { title: PHASE_HELP[p] }, el('span', { class: 'sw phase-' + p }), p)),
    el('span', {}, el('span', { class: 'sw line' }), 'iteration time'),
    el('span', { class: 'gh-onset' }, '▲ onset'), el('span', { class: 'gh-relief' }, '▼ relief'));
}

// ---------- verdict and controller ----------
function verdictCard(r, ctx) {
  const v = r.verdict;
  const c = r.controller || {};
  const hist = c.history || [];
  let verdict;
  // While profiling or validating the engine reports an interim
  // "inconclusive"; that is no conclusion yet, so it is not shown as one.
  const running = c.phase === 'profiling' || c.phase === 'validation';
  if (v && running && v.kind === 'inconclusive') {
    verdict = el('div', { class: 'gh-verdict kind-pending', 'data-kind': 'pending' },
      el('p', { class: 'gh-verdict-text muted' }, `No verdict yet: the controller is in ${c.phase} (${PHASE_HELP[c.phase]}).`),
      v.text ? el('p', { class: 'small muted' }, v.text) : null);
  } else if (v) {
    const inconclusive = v.kind === 'inconclusive';
    verdict = el('div', { class: 'gh-verdict kind-' + v.kind, 'data-kind': v.kind },
      el('div', { class: 'gh-verdict-top' },
        el('span', { class: 'badge gh-kind kind-' + v.kind }, KIND[v.kind] || v.kind),
        el('span', { class: 'badge gh-conf conf-' + v.confidence }, `${v.confidence} confidence`)),
      el('p', { class: 'gh-verdict-text' }, v.text),
      inconclusive ? el('p', { class: 'note gh-inconclusive' }, 'Inconclusive: the evidence does not single out a GPU, CPU or link, so no cause is named.') : null,
      (v.ranks || []).length ? el('div', { class: 'gh-facts' }, el('span', { class: 'k' }, inconclusive ? 'suspect ranks' : v.kind === 'late_rank' ? 'late ranks' : 'slow ranks'),
        v.ranks.slice(0, 16).map((rk) => rankChip(rk, ctx, null, inconclusive ? null : 'leader'))) : null,
      (v.links || []).length ? el('div', { class: 'gh-facts' }, el('span', { class: 'k' }, 'slow links'),
        v.links.slice(0, 16).map((l) => el('span', { class: 'chip leader gh-link-chip', 'data-src': l.src, 'data-dst': l.dst }, `${l.src} → ${l.dst}`))) : null);
  } else {
    verdict = el('div', { class: 'gh-verdict kind-pending', 'data-kind': 'pending' },
      el('p', { class: 'gh-verdict-text muted' }, `No verdict yet: the controller is in ${c.phase || 'tracking'} (${PHASE_HELP[c.phase] || ''}).`));
  }
  const track = el('ol', { class: 'gh-phases', 'aria-label': 'controller phases' },
    PHASES.map((p) => el('li', { class: 'phase-' + p + (p === c.phase ? ' on' : ''), 'aria-current': p === c.phase ? 'step' : null, title: PHASE_HELP[p] }, p)));
  const since = el('p', { class: 'gh-since' }, 'Phase ', el('strong', { class: 'gh-phase-now', 'data-phase': c.phase }, c.phase || '—'),
    ` since ${fmtDate(c.since_ns)}`, r.generated_ns >= c.since_ns ? ` (${fmtDur(r.generated_ns - c.since_ns)} before this report)` : '');
  const trans = hist.length
    ? el('ol', { class: 'gh-history', 'aria-label': 'controller transitions' }, hist.map((h) => el('li', { class: 'gh-transition', 'data-from': h.from, 'data-to': h.to },
      el('div', { class: 'gh-tr-head' }, el('span', { class: 'mono' }, fmtTime(h.at_ns)), ' ',
        el('span', { class: 'badge phase-' + h.from }, h.from), ' → ', el('span', { class: 'badge phase-' + h.to }, h.to)),
      el('div', { class: 'gh-reason' }, h.reason),
      evidenceText(h.evidence) ? el('div', { class: 'gh-evidence small muted' }, 'evidence · ', evidenceText(h.evidence)) : null)))
    : el('p', { class: 'muted gh-no-transition' }, 'No transition yet: the controller has been tracking since the first collective calls.');
  return card('Verdict', 'the three-phase controller (tracking → profiling → validation → verdict) and what moved it',
    el('div', { class: 'gh-verdict-grid' }, verdict, el('div', { class: 'gh-controller' }, track, since, trans)));
}

// ---------- iteration time ----------
// iterPos is where ns falls on the iteration axis (continuous: between
// two iteration ends it interpolates).
function iterPos(series, ns) {
  const n = series.length;
  if (!(ns > series[0].end_ns)) return series[0].step;
  if (ns >= series[n - 1].end_ns) return series[n - 1].step;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (series[mid].end_ns < ns) lo = mid + 1;
    else hi = mid;
  }
  const a = series[lo - 1];
  const b = series[lo];
  return a.step + ((ns - a.end_ns) / Math.max(1, b.end_ns - a.end_ns)) * (b.step - a.step);
}

// phaseSpans turns the controller's history into [fromNS, toNS) spans.
function phaseSpans(c) {
  const hist = (c && c.history) || [];
  const out = [];
  let cur = hist.length ? hist[0].from : (c && c.phase) || 'tracking';
  let from = -Infinity;
  for (const h of hist) {
    out.push({ phase: cur, fromNS: from, toNS: h.at_ns });
    cur = h.to;
    from = h.at_ns;
  }
  out.push({ phase: cur, fromNS: from, toNS: Infinity });
  return out;
}

function drawIteration(host, r) {
  const it = r.iteration;
  if (!it || !(it.series || []).length) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No iteration time: the collective calls show no period with ACF ≥ 0.95 yet (§4.2).',
      it && it.note ? el('div', { class: 'small' }, it.note) : null));
    return;
  }
  const series = it.series.map((p) => ({ step: p.iter, exposed_ms: p.ms, end_ns: p.end_ns, estimated: !!p.estimated }));
  const spans = phaseSpans(r.controller);
  const phaseAt = (ns) => (spans.find((s) => ns >= s.fromNS && ns < s.toNS) || spans[spans.length - 1]).phase;
  const bands = spans.map((s) => ({ cls: 'phase phase-' + s.phase, from: iterPos(series, s.fromNS), to: iterPos(series, s.toNS), label: s.phase }))
    .filter((b) => b.to > b.from);
  const cps = (r.changepoints || []).filter((c) => c.index >= 0 && c.index < series.length).map((c) => ({
    step: series[c.index].step, kind: c.kind, before_ms: c.before_ms, after_ms: c.after_ms, rel: c.rel, prob: c.prob, verified: c.verified, stages: [],
  }));
  const s0 = series[0].step;
  const s1 = series[series.length - 1].step;
  drawTimeline(host, {
    timeline: { series, stages: [], change_points: cps, warmup_end: s0 },
    mode: 'stack',
    bands,
    svgClass: 'timeline-gh',
    label: `iteration time over iterations ${s0}–${s1}, ${cps.length} change point${cps.length === 1 ? '' : 's'}, controller phases shaded`,
    cursorLabel: 'iteration cursor: arrows move',
    valueText: (p) => `iteration ${p.step}: ${fmtMs(p.exposed_ms)}, ${phaseAt(p.end_ns)}`,
    tip: (p) => tipTable(`iteration ${p.step} · ${fmtMs(p.exposed_ms)}`, [['phase', phaseAt(p.end_ns)], ['ended', fmtTime(p.end_ns)],
      ['vs median', fmtRatio(p.exposed_ms / it.median_ms)]], p.estimated ? 'estimated: an anchor call of this iteration was dropped' : null),
    cpTip: (c) => tipTable(`${c.kind} at iteration ${c.step}`, [
      ['iteration time', `${fmtMs(c.before_ms)} → ${fmtMs(c.after_ms)}`],
      ['change', `${c.rel >= 0 ? '+' : ''}${(100 * c.rel).toFixed(0)}%`],
      ['P(change point)', fmtNum(c.prob, 2)],
      ['verified (≥ 10%)', c.verified ? 'yes' : 'no'],
    ]),
  });
}

// ---------- group comparison ----------
const GROUP_ROWS = 12;

function groupsView(r) {
  const groups = r.groups || [];
  if (!groups.length) {
    return el('div', { class: 'empty' }, 'No comparable groups: no two communicators run the same op and size (nothing to compare, §4.3).');
  }
  return el('div', { class: 'gh-groups' }, groups.map((g) => clusterView(g)));
}

function clusterView(g) {
  const members = (g.members || []).slice().sort((a, b) => b.ratio - a.ratio || (a.ranks || [])[0] - (b.ranks || [])[0]);
  if (g.comparable === false) {
    return el('div', { class: 'gh-cluster', 'data-op': g.op, 'data-comparable': 'false' },
      el('h3', {}, `${g.op} · ${fmtBytes(g.bytes)} · groups of ${fmtInt(g.size)}`),
      el('p', { class: 'muted small' }, g.note || 'Only one group: nothing to compare it with.'));
  }
  const bad = members.filter((m) => m.degraded);
  // Every degraded group, then the slowest of the rest.
  const shown = members.length <= GROUP_ROWS + 2 ? members : members.slice(0, Math.max(GROUP_ROWS, bad.length));
  const hi = Math.max(g.median_ms * 1.5, ...shown.map((m) => m.exec_ms)) || 1;
  const pct = (v) => `${Math.min(100, (100 * v) / hi).toFixed(1)}%`;
  return el('div', { class: 'gh-cluster', 'data-op': g.op, 'data-bytes': g.bytes, 'data-size': g.size },
    el('h3', {}, `${g.op} · ${fmtBytes(g.bytes)} · groups of ${fmtInt(g.size)} · median ${fmtMs(g.median_ms)}`,
      bad.length ? el('span', { class: 'badge bad' }, `${bad.length} degraded`) : el('span', { class: 'muted small' }, ` · ${fmtInt(members.length)} groups, none degraded`)),
    g.note ? el('p', { class: 'muted small' }, g.note) : null,
    el('table', { class: 't gh-members' },
      el('thead', {}, el('tr', {}, el('th', {}, 'group'), el('th', {}, 'ranks'), el('th', {}, 'execution time'), el('th', { class: 'num' }, 'ms'),
        el('th', { class: 'num' }, '× median'), el('th', {}, el('span', { class: 'sr-only' }, 'status')))),
      el('tbody', {}, shown.map((m) => el('tr', { class: 'gh-member' + (m.degraded ? ' degraded' : ''), 'data-comm': m.comm, 'data-degraded': m.degraded ? 'true' : 'false' },
        el('td', { class: 'mono' }, m.comm), el('td', { class: 'mono' }, ranksText(m.ranks, 2)),
        el('td', { class: 'bar-cell' }, el('span', { class: 'gh-bar', 'aria-hidden': 'true' },
          el('span', { class: 'fill', style: `width:${pct(m.exec_ms)}` }), el('span', { class: 'med', style: `left:${pct(g.median_ms)}` }))),
        el('td', { class: 'num', title: m.device === false ? 'host durations (no device events captured)' : m.device ? 'device time (CUDA events)' : null },
          fmtMs(m.exec_ms)), el('td', { class: 'num' + (m.degraded ? ' bad' : '') }, fmtRatio(m.ratio)),
        el('td', {}, m.degraded ? el('span', { class: 'badge bad' }, 'degraded') : null))))),
    members.length > shown.length ? el('p', { class: 'muted small gh-more' }, `${fmtInt(members.length - shown.length)} more groups within 1.1× of the median are not shown.`) : null);
}

// ---------- entry lateness ----------
const MAX_ROWS = 256; // rank buckets drawn; more ranks are aggregated
const MIN_COL_PX = 3;
const LAT_LABEL_W = 76;

function drawLateness(host, r, ctx) {
  const t0 = performance.now();
  const lat = r.lateness;
  const ranks = (lat && lat.ranks) || [];
  let inst = (lat && lat.instances) || [];
  if (!ranks.length || !inst.length) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No collective instance with every member’s entry recorded yet.'));
    return;
  }
  if (inst.some((x, i) => i > 0 && x.end_ns < inst[i - 1].end_ns)) inst = inst.slice().sort((a, b) => a.end_ns - b.end_ns);
  const R = ranks.length;
  const N = inst.length;
  const W = Math.max(320, Math.floor(host.clientWidth || 600));
  const plotW = W - LAT_LABEL_W;
  // Buckets: consecutive ranks (and, when they do not fit, consecutive
  // instances) share a cell showing their maximum, so a late rank is
  // never averaged away.
  const br = Math.ceil(R / MAX_ROWS);
  const bc = Math.max(1, Math.ceil(N / Math.max(1, Math.floor(plotW / MIN_COL_PX))));
  const rows = Math.ceil(R / br);
  const cols = Math.ceil(N / bc);
  const agg = new Float32Array(rows * cols).fill(NaN);
  const who = new Int32Array(rows * cols);
  const whoJ = new Int32Array(rows * cols);
  const sum = new Float64Array(R);
  const cnt = new Int32Array(R);
  let hi = 0;
  for (let j = 0; j < N; j++) {
    const lm = inst[j].late_ms || [];
    const c = (j / bc) | 0;
    for (let i = 0; i < R; i++) {
      const v = lm[i];
      if (v == null || !(v >= 0)) continue; // a member whose entry was not seen (null)
      sum[i] += v;
      cnt[i]++;
      const k = ((i / br) | 0) * cols + c;
      if (!(agg[k] >= v)) { agg[k] = v; who[k] = i; whoJ[k] = j; }
      if (v > hi) hi = v;
    }
  }
  hi = Math.max(hi, 1e-6);
  const lut = [];
  for (let k = 0; k < 256; k++) lut.push(rampRGB(RAMPS.seq, k / 255));
  const img = new ImageData(cols, rows);
  for (let k = 0; k < rows * cols; k++) {
    const v = agg[k];
    const rgb = Number.isNaN(v) ? [208, 215, 222] : lut[Math.round((v / hi) * 255)];
    img.data.set(rgb, 4 * k);
    img.data[4 * k + 3] = 255;
  }
  const off = document.createElement('canvas');
  off.width = cols;
  off.height = rows;
  off.getContext('2d').putImageData(img, 0, 0);

  const rowH = rows <= 16 ? 16 : rows <= 48 ? 8 : rows <= 128 ? 4 : 2;
  const H = rows * rowH;
  const cw = plotW / cols;
  const dpr = window.devicePixelRatio || 1;
  const rowLabel = (ri) => {
    const a = ri * br;
    const b = Math.min(R, a + br) - 1;
    return br === 1 ? `r${ranks[a]}` : `r${ranks[a]}–${ranks[b]}`;
  };
  const colLabel = (ci) => {
    const a = ci * bc;
    const b = Math.min(N, a + bc) - 1;
    const x = inst[a];
    return bc === 1 ? `${x.op} ${x.comm} #${x.seq} at ${fmtTime(x.end_ns)}` : `collectives ${a + 1}–${b + 1} (${fmtTime(inst[a].end_ns)}–${fmtTime(inst[b].end_ns)})`;
  };
  const named = new Set(r.verdict && (r.verdict.ranks || []).length ? r.verdict.ranks : []);
  const namedRows = [...new Set([...named].map((rk) => ranks.indexOf(rk)).filter((i) => i >= 0).map((i) => (i / br) | 0))];
  const cv = el('canvas', { class: 'gh-hm', width: Math.round(W * dpr), height: Math.round(H * dpr), style: `width:${W}px;height:${H}px`,
    role: 'img', 'data-ranks': R, 'data-instances': N, 'data-rows': rows, 'data-cols': cols, 'data-cells': rows * cols,
    'data-bucket-ranks': br, 'data-bucket-instances': bc, 'data-row-height': rowH, 'data-label-width': LAT_LABEL_W,
    'aria-label': `entry lateness of ${fmtInt(R)} ranks over ${fmtInt(N)} collectives, darker = later; the latest ranks are listed below` });
  const g = cv.getContext('2d');
  g.scale(dpr, dpr);
  let cursor = null; // keyboard cell {ri, ci}
  const paint = () => {
    g.clearRect(0, 0, W, H);
    g.imageSmoothingEnabled = false;
    g.drawImage(off, LAT_LABEL_W, 0, plotW, H);
    g.fillStyle = '#fff';
    if (rowH >= 8) for (let ri = 1; ri < rows; ri++) g.fillRect(LAT_LABEL_W, ri * rowH - 0.5, plotW, 1);
    if (cw >= 8) for (let ci = 1; ci < cols; ci++) g.fillRect(LAT_LABEL_W + ci * cw - 0.5, 0, 1, H);
    g.font = '10px ui-monospace, "DejaVu Sans Mono", monospace';
    g.textBaseline = 'middle';
    g.fillStyle = '#57606a';
    const every = Math.max(1, Math.ceil(12 / rowH));
    for (let ri = 0; ri < rows; ri += every) {
      if (namedRows.some((nr) => Math.abs(nr - ri) * rowH < 12 && nr !== ri)) continue;
      g.fillText(rowLabel(ri), 4, ri * rowH + Math.max(rowH, 10) / 2, LAT_LABEL_W - 10);
    }
    for (const ri of namedRows) {
      const y = ri * rowH + rowH / 2;
      g.fillStyle = '#fee2e2';
      g.fillRect(0, y - 7, LAT_LABEL_W - 4, 14);
      g.fillStyle = '#991b1b';
      g.font = 'bold 10px ui-monospace, "DejaVu Sans Mono", monospace';
      g.fillText('▶ ' + rowLabel(ri), 3, y, LAT_LABEL_W - 8);
      g.fillRect(LAT_LABEL_W - 3, ri * rowH, 3, rowH);
    }
    if (cursor) {
      g.strokeStyle = '#0b5cad';
      g.lineWidth = 2;
      g.strokeRect(LAT_LABEL_W + cursor.ci * cw, cursor.ri * rowH, Math.max(2, cw), Math.max(2, rowH));
    }
  };
  paint();
  const ms = performance.now() - t0;
  cv.dataset.renderMs = ms.toFixed(1);

  const cellText = (ri, ci) => {
    const k = ri * cols + ci;
    const v = agg[k];
    if (Number.isNaN(v)) return [`${rowLabel(ri)} · ${colLabel(ci)}`, [['late', 'no entry recorded']]];
    const x = inst[whoJ[k]];
    const rows2 = [['late', fmtMs(v)], ['rank', `${ranks[who[k]]}${br > 1 || bc > 1 ? ' (the latest in this cell)' : ''}`],
      ['collective', `${x.op} on ${x.comm}, #${x.seq}`], ['ended', fmtTime(x.end_ns)],
      ['rank’s mean lateness', fmtMs(sum[who[k]] / Math.max(1, cnt[who[k]]))]];
    return [`${rowLabel(ri)} · ${bc > 1 ? colLabel(ci) : 'collective ' + (ci + 1) + ' of ' + N}`, rows2];
  };
  const live = el('div', { class: 'small muted gh-cell', 'aria-live': 'polite' }, 'Focus the heatmap and use the arrow keys to read cells.');
  const wrap = el('div', { class: 'gh-hm-wrap', tabindex: 0, role: 'group', 'aria-label': 'entry lateness heatmap: arrow keys move between cells' }, cv);
  const at = (ev) => {
    const rect = cv.getBoundingClientRect();
    return { ri: Math.floor((ev.clientY - rect.top) / rowH), ci: Math.floor((ev.clientX - rect.left - LAT_LABEL_W) / cw) };
  };
  cv.addEventListener('mousemove', (ev) => {
    const { ri, ci } = at(ev);
    if (ri < 0 || ri >= rows || ci < 0 || ci >= cols) { hideTip(); return; }
    const [title, rows2] = cellText(ri, ci);
    showTip(ev, tipTable(title, rows2));
  });
  cv.addEventListener('mouseleave', hideTip);
  wrap.addEventListener('keydown', (ev) => {
    const mv = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[ev.key];
    if (!mv && ev.key !== 'Home' && ev.key !== 'End') return;
    ev.preventDefault();
    if (!cursor) cursor = { ri: namedRows.length ? namedRows[0] : 0, ci: cols - 1 };
    else if (ev.key === 'Home') cursor.ci = 0;
    else if (ev.key === 'End') cursor.ci = cols - 1;
    else {
      cursor.ri = Math.max(0, Math.min(rows - 1, cursor.ri + mv[0] * (ev.shiftKey ? 10 : 1)));
      cursor.ci = Math.max(0, Math.min(cols - 1, cursor.ci + mv[1] * (ev.shiftKey ? 10 : 1)));
    }
    paint();
    const [title, rows2] = cellText(cursor.ri, cursor.ci);
    live.textContent = `${title}: ${rows2.map(([k, v]) => `${k} ${v}`).join(', ')}`;
    const y = cursor.ri * rowH;
    if (y < wrap.scrollTop || y + rowH > wrap.scrollTop + wrap.clientHeight) wrap.scrollTop = Math.max(0, y - wrap.clientHeight / 2);
  });

  // The accessible summary: the ranks that enter latest on average.
  const order = ranks.map((_, i) => i).filter((i) => cnt[i] > 0).sort((a, b) => sum[b] / cnt[b] - sum[a] / cnt[a] || ranks[a] - ranks[b]);
  const top = order.slice(0, 5);
  const note = br > 1 || bc > 1
    ? `${fmtInt(R)} ranks × ${fmtInt(N)} collectives drawn as ${fmtInt(rows)} × ${fmtInt(cols)} cells: each cell is the maximum over ${br > 1 ? `${br} consecutive ranks` : 'one rank'}${bc > 1 ? ` × ${bc} consecutive collectives` : ''}, so a late rank is never averaged away.`
    : `${fmtInt(R)} ranks × ${fmtInt(N)} collectives, one cell each (oldest left).`;
  const legendCv = el('canvas', { width: 160, height: 10, style: 'width:160px;height:10px;border-radius:2px', 'aria-hidden': 'true' });
  const lg = legendCv.getContext('2d');
  for (let i = 0; i < 160; i++) { const c = lut[Math.round((i / 159) * 255)]; lg.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`; lg.fillRect(i, 0, 1, 10); }
  host.replaceChildren(
    el('p', { class: 'small muted gh-agg-note', 'data-aggregated': br > 1 || bc > 1 ? 'true' : 'false' }, note),
    wrap,
    el('div', { class: 'hm-foot' }, el('span', {}, 'ms late'), el('span', { class: 'mono' }, '0'), legendCv, el('span', { class: 'mono' }, fmtNum(hi, 1)),
      el('span', { class: 'muted' }, `← older · ${fmtTime(inst[0].end_ns)}–${fmtTime(inst[N - 1].end_ns)} · newer →`),
      named.size ? el('span', {}, el('span', { class: 'badge leader' }, '▶ verdict'), ' marked') : null),
    el('div', { class: 'hm-top gh-latest' }, el('span', { class: 'muted' }, 'Latest to enter (mean): '),
      top.map((i) => rankChip(ranks[i], ctx, '+' + fmtMs(sum[i] / cnt[i]), named.has(ranks[i]) ? 'leader' : null))),
    live);
}

// ---------- validation ----------
const GEMM_ROWS = 32;
const LINK_ROWS = 24;

function validationCard(r, ctx) {
  const vs = r.validation || [];
  const sub = 'GEMM per rank and P2P per link, run while the job waits at a step boundary (§4.3); slow above 1.1× the median';
  if (!vs.length) {
    const phase = (r.controller || {}).phase;
    return card('Validation', sub, el('p', { class: 'muted gh-no-validation' }, phase === 'tracking' || !phase
      ? 'No validation has run: the controller plans one only after a change point and a comparison that names suspects.'
      : 'No validation plan yet.'));
  }
  const slowRanks = new Set(r.verdict && (r.verdict.kind === 'slow_rank' || r.verdict.kind === 'late_rank') ? r.verdict.ranks || [] : []);
  return card('Validation', sub, vs.map((v) => planView(v, slowRanks, ctx)));
}

function median(xs) {
  const s = xs.filter((x) => isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function planView(v, slowRanks, ctx) {
  const gemm = v.gemm || [];
  const links = v.links || [];
  const waiting = !gemm.length && !links.length;
  return el('div', { class: 'gh-plan', 'data-plan': v.id, 'data-state': v.state },
    el('h3', {}, `Plan ${v.id} `, el('span', { class: 'badge gh-state state-' + v.state }, v.state)),
    v.state === 'expired' ? el('p', { class: 'note' }, 'Expired: not every rank reported before the deadline; the results below are partial.') : null,
    waiting ? el('p', { class: 'muted' }, v.state === 'pending' || v.state === 'running'
      ? 'Waiting for the ranks to reach the step boundary and report their benchmarks…' : 'No results were reported for this plan.') : null,
    v.state === 'done' && v.verdict && v.verdict.text ? el('p', { class: 'small gh-plan-verdict' }, `${KIND[v.verdict.kind] || v.verdict.kind}: ${v.verdict.text}`) : null,
    el('div', { class: 'gh-plan-grid' },
      gemm.length ? gemmView(gemm, slowRanks, ctx) : null,
      links.length ? linksView(links, String(v.id).replace(/[^A-Za-z0-9_-]/g, '_')) : null));
}

function gemmView(gemm, slowRanks, ctx) {
  const med = median(gemm.map((x) => x.ms));
  // The engine judges each rank (slow, ratio); without that, 1.1× the median.
  const isSlow = (x) => slowRanks.has(x.rank) || (x.slow != null ? x.slow : x.ms > SLOW * med);
  const ratio = (x) => (x.ratio > 0 ? x.ratio : x.ms / med);
  const all = gemm.slice().sort((a, b) => a.rank - b.rank);
  const shown = all.length <= GEMM_ROWS + 4 ? all : all.slice().sort((a, b) => b.ms - a.ms || a.rank - b.rank).slice(0, GEMM_ROWS);
  const hi = Math.max(med * 1.5, ...shown.map((x) => x.ms)) || 1;
  const nSlow = all.filter(isSlow).length;
  return el('div', { class: 'gh-gemm' },
    el('div', { class: 'gh-sub' }, `GEMM per rank · median ${fmtMs(med)}${nSlow ? ` · ${nSlow} slow` : ' · none slow'}`),
    shown.length < all.length ? el('p', { class: 'muted small' }, `The ${shown.length} slowest of ${fmtInt(all.length)} ranks.`) : null,
    el('div', { class: 'gh-bars', role: 'list', 'aria-label': 'GEMM time per rank' }, shown.map((x) => {
      const slow = isSlow(x);
      return el('div', { class: 'gh-bar-row' + (slow ? ' slow' : ''), role: 'listitem', 'data-rank': x.rank },
        el('span', { class: 'mono' }, `r${x.rank}`),
        el('span', { class: 'gh-bar', 'aria-hidden': 'true' }, el('span', { class: 'fill', style: `width:${Math.min(100, (100 * x.ms) / hi).toFixed(1)}%` }),
          el('span', { class: 'med', style: `left:${Math.min(100, (100 * med) / hi).toFixed(1)}%` })),
        el('span', { class: 'num' }, fmtMs(x.ms)), el('span', { class: 'num' + (slow ? ' bad' : '') }, fmtRatio(ratio(x))),
        slow ? el('span', { class: 'badge bad' }, 'slow') : el('span', {}));
    })));
}

function linksView(links, id) {
  const all = links.slice();
  const shown = all.length <= LINK_ROWS + 4
    ? all.sort((a, b) => a.src - b.src || a.dst - b.dst)
    : all.sort((a, b) => Number(b.slow) - Number(a.slow) || b.ratio - a.ratio).slice(0, Math.max(LINK_ROWS, all.filter((l) => l.slow).length));
  const nSlow = links.filter((l) => l.slow).length;
  const ranks = [...new Set(links.flatMap((l) => [l.src, l.dst]))].sort((a, b) => a - b);
  return el('div', { class: 'gh-links' },
    el('div', { class: 'gh-sub' }, `P2P per link · ${fmtInt(links.length)} links${nSlow ? ` · ${nSlow} slow` : ' · none slow'}`),
    ranks.length <= 16 ? linkGraph(links, ranks, id) : null,
    el('table', { class: 't gh-link-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'link'), el('th', { class: 'num' }, 'ms'), el('th', { class: 'num' }, '× median'), el('th', {}, el('span', { class: 'sr-only' }, 'status')))),
      el('tbody', {}, shown.map((l) => el('tr', { class: 'gh-link' + (l.slow ? ' slow' : ''), 'data-src': l.src, 'data-dst': l.dst },
        el('td', { class: 'mono' }, `${l.src} → ${l.dst}`), el('td', { class: 'num' }, fmtMs(l.ms)),
        el('td', { class: 'num' + (l.slow ? ' bad' : '') }, fmtRatio(l.ratio)), el('td', {}, l.slow ? el('span', { class: 'badge bad' }, 'slow link') : null))))),
    shown.length < links.length ? el('p', { class: 'muted small' }, `${fmtInt(links.length - shown.length)} more links within 1.1× of the median are not shown.`) : null);
}

// linkGraph draws the tested links between ranks on a circle; slow ones
// red and thick.
function linkGraph(links, ranks, id) {
  const S = 190;
  const c = S / 2;
  const rad = S / 2 - 18;
  const pos = new Map(ranks.map((rk, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / ranks.length;
    return [rk, [c + rad * Math.cos(a), c + rad * Math.sin(a)]];
  }));
  const svg = sv('svg', { class: 'gh-graph', width: S, height: S, viewBox: `0 0 ${S} ${S}`, role: 'img',
    'aria-label': `P2P links between ${ranks.length} ranks; ${links.filter((l) => l.slow).length} slow` },
  sv('defs', {}, sv('marker', { id: `gh-arrow-${id}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 5, markerHeight: 5, orient: 'auto-start-reverse' },
    sv('path', { d: 'M0,0L10,5L0,10Z', fill: '#8c959f' })),
  sv('marker', { id: `gh-arrow-slow-${id}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 4, markerHeight: 4, orient: 'auto-start-reverse' },
    sv('path', { d: 'M0,0L10,5L0,10Z', fill: '#b42318' }))));
  for (const l of links) {
    const [x1, y1] = pos.get(l.src);
    const [x2, y2] = pos.get(l.dst);
    const d = Math.hypot(x2 - x1, y2 - y1) || 1;
    const k = 11 / d; // stop at the node's edge
    svg.append(sv('line', { class: 'gh-edge' + (l.slow ? ' slow' : ''), x1: x1 + (x2 - x1) * k, y1: y1 + (y2 - y1) * k, x2: x2 - (x2 - x1) * k, y2: y2 - (y2 - y1) * k,
      'marker-end': `url(#${l.slow ? 'gh-arrow-slow' : 'gh-arrow'}-${id})` }, sv('title', {}, `${l.src} → ${l.dst}: ${fmtMs(l.ms)} (${fmtRatio(l.ratio)})`)));
  }
  for (const [rk, [x, y]] of pos) {
    svg.append(sv('g', { class: 'gh-node' }, sv('circle', { cx: x, cy: y, r: 10 }), sv('text', { x, y: y + 4, 'text-anchor': 'middle' }, String(rk))));
  }
  return svg;
}
