// Number, stage and reason formatting shared by the views.
import { SHORT_NAMES, DESCRIPTIONS } from './vocab.js';
import { el } from './dom.js';

export function fmtMs(ms) {
  if (ms == null || !isFinite(ms)) return '—';
  const a = Math.abs(ms);
  if (a >= 100000) return (ms / 1000).toFixed(0) + ' s';
  if (a >= 10000) return (ms / 1000).toFixed(1) + ' s';
  if (a >= 100) return ms.toFixed(0) + ' ms';
  if (a >= 10) return ms.toFixed(1) + ' ms';
  return ms.toFixed(2) + ' ms';
}

// fmtDelta is a signed duration ("+89.6 ms").
export function fmtDelta(ms) {
  if (ms == null || !isFinite(ms)) return '—';
  if (Math.abs(ms) < 0.005) return '±0 ms';
  return (ms > 0 ? '+' : '−') + fmtMs(Math.abs(ms));
}

export const fmtNum = (x, d = 1) => (x == null || !isFinite(x) ? '—' : Number(x).toFixed(d));
export const fmtPct = (x) => (x == null || !isFinite(x) ? '—' : (100 * x).toFixed(Math.abs(x) < 0.1 ? 1 : 0) + '%');
export const fmtInt = (x) => (x == null || !isFinite(x) ? '—' : Number(x).toLocaleString('en-US'));

// Okabe–Ito palette: colour-blind safe, stable per default stage.
const STAGE_COLORS = {
  'data.next_wait': '#E69F00',
  'model.fwd_loss_cpu_wall': '#56B4E9',
  'model.backward_cpu_wall': '#0072B2',
  'callbacks.cpu_wall': '#009E73',
  'optim.step_cpu_wall': '#CC79A7',
  'step.other_cpu_wall': '#A0A4A8',
};
const EXTRA_COLORS = ['#D55E00', '#F0E442', '#332288', '#44AA99', '#882255', '#117733', '#999933', '#AA4499'];

// stageColor is stable for default stages; other stages (a role group's
// own list) take the extra colours by position.
export function stageColor(name, i) {
  return STAGE_COLORS[name] || EXTRA_COLORS[(i || 0) % EXTRA_COLORS.length];
}
export const short = (name) => SHORT_NAMES[name] || name;
export const describe = (name) => DESCRIPTIONS[name] || '';

export function stageChip(name, stages) {
  const i = stages ? stages.indexOf(name) : 0;
  return el('span', { class: 'chip', title: name + (describe(name) ? ' — ' + describe(name) : '') },
    el('span', { class: 'sw', style: `background:${stageColor(name, i)}` }), short(name));
}

// Why no rank is named, in a few words (the headline's withheld_why has
// the full sentence).
const WITHHELD = {
  single_rank: 'only one rank reports',
  no_exposure: 'the stage exposes no time',
  few_steps: 'too few steps',
  absorbed_in_stage: 'every rank leaves the stage together (absorbed in a collective)',
  uniform_slowdown: 'every rank slowed alike',
  tie: 'ranks tie for the lead',
  unstable_leader: 'the leading rank changes over the window',
  no_consistent_leader: 'different ranks lead at different steps',
  role_groups: 'role groups are diagnosed separately',
};
export const withheldText = (w) => WITHHELD[w] || String(w || '').replace(/_/g, ' ');

// withheldShort fits a table cell.
const WITHHELD_SHORT = {
  single_rank: 'one rank', no_exposure: 'no exposure', few_steps: 'few steps', absorbed_in_stage: 'absorbed',
  uniform_slowdown: 'uniform', tie: 'tie', unstable_leader: 'unstable', no_consistent_leader: 'spread', role_groups: 'role groups',
};
export const withheldShort = (w) => WITHHELD_SHORT[w] || String(w || '—').replace(/_/g, ' ');

// fmtMsN is a duration in ms without the unit (for columns whose header
// carries it); tiny values print as 0 so rounding noise reads as none.
export function fmtMsN(ms, signed) {
  if (ms == null || !isFinite(ms)) return '—';
  const a = Math.abs(ms);
  const v = a < 0.005 ? 0 : ms;
  const d = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  const t = Math.abs(v).toFixed(d);
  if (!signed) return (v < 0 ? '−' : '') + t;
  return (v > 0 ? '+' : v < 0 ? '−' : '±') + t;
}

const BASIS = {
  excess: 'rose most against the reference window',
  straggler: 'a straggler creates an exposed tail there',
  share: 'largest share of exposed time',
  none: 'no stage advances the frontier',
};
export const basisText = (b) => BASIS[b] || b || '';

export const BASELINE_NAMES = {
  per_stage_max: 'Per-stage max',
  per_stage_avg: 'Per-stage average',
  rank_spread: 'Raw rank spread',
  slowest_rank_breakdown: 'Slowest-rank breakdown',
  rank0_local: 'Rank-0 local total',
};

// niceTicks returns ~n round tick values covering [lo, hi].
export function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, n);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}

// rankSteps is how many steps a rank reported in the window: its mean
// stage times sum to its total over its own steps, so total ÷ Σ mean
// recovers the count (the report carries no per-rank step count).
export function rankSteps(rs, fallback) {
  const m = (rs.mean_stage_ms || []).reduce((a, b) => a + b, 0);
  if (!(m > 0) || !(rs.total_ms > 0)) return fallback;
  return Math.max(1, Math.round(rs.total_ms / m));
}

export function ts(iso) {
  if (!iso) return '—';
  return String(iso).replace('T', ' ').replace(/\.\d+/, '').replace(/Z$|\+00:00$/, ' UTC');
}

// Wall-clock nanoseconds since the Unix epoch, in UTC.
const isoNS = (ns) => new Date(ns / 1e6).toISOString();
export const fmtTime = (ns) => (ns > 0 ? isoNS(ns).slice(11, 19) + ' UTC' : '—');
export const fmtDate = (ns) => (ns > 0 ? isoNS(ns).slice(0, 19).replace('T', ' ') + ' UTC' : '—');

// fmtDur is a duration in nanoseconds in words ("3 min 12 s").
export function fmtDur(ns) {
  const s = ns / 1e9;
  if (!(s >= 0)) return '—';
  if (s < 1) return Math.round(ns / 1e6) + ' ms';
  if (s < 60) return s.toFixed(1) + ' s';
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 172800) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  return `${Math.round(s / 86400)} days`;
}
