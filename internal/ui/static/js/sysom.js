// The job page's "CPU profiles · SysOM" section (SysOM-AI): the report
// card of GET /api/v1/jobs/<id>/sysom — slow ranks by collective entry
// (§3.1), CPU-waterline flags (§3.2), the layered diagnosis GPU → CPU → OS
// with each layer's finding, evidence and next check, and the temporal
// baseline's candidates — then the flame graph per rank or group
// (flame.js), the differential flame graph straggler vs peer or now vs
// baseline (flamediff.js) and the OS signal panels (osstat.js).
//
// View state in the URL hash (state.js): fg_rank | fg_group (flame graph
// subject), fg_win (seconds before the report window's end; none = the
// report's window), df_mode (peer | baseline), df_a, df_b (the ranks);
// sy_from_ns, sy_to_ns, sy_base_from_ns, sy_base_to_ns (an incident's
// link) are the report's window and baseline, and through it every
// panel's.
// Defaults come from the report: the first diagnosis's rank and peer.
// Every fetch is optional: a 404 is "not collected", shown with how to
// enable it, never an error banner.
import { el, card } from './dom.js';
import { cachedJSON } from './api.js';
import { fmtInt, fmtNum } from './format.js';
import { go } from './state.js';
import { flameCard, nsSpan, pct, ENABLE_HINT } from './flame.js';
import { diffCard } from './flamediff.js';
import { osstatCard } from './osstat.js';

const LAYERS = ['gpu', 'cpu', 'os'];
const LAYER_NAME = { gpu: 'GPU', cpu: 'CPU', os: 'OS' };
const FINDING = { differs: 'differs', matches: 'matches', not_observed: 'not observed' };
const WINDOWS = [['', 'report window'], ['60', 'last 1 min'], ['300', 'last 5 min'], ['1800', 'last 30 min']];
const MAX_RANK_OPTIONS = 4096;
const BASE_BASIS = {
  first_steady: 'the job’s first steady window, before anything changed',
  preceding: 'the window just before: the job is too young for a steady one',
  requested: 'as requested',
  none: 'nothing stored before the window',
};
const CAUSE = {
  gpu_uniform_slowdown: 'uniform GPU slowdown', gpu_kernel_slowdown: 'kernel-specific GPU slowdown', net_rx_softirq: 'NIC receive softirq',
  interrupts: 'interrupts', vfs_dentry_lock: 'dentry-cache lock contention', kernel_lock: 'kernel lock contention', foreign_process: 'another process',
  storage_io: 'storage I/O', logging: 'logging', application: 'application code', run_queue: 'run-queue wait', migration: 'migrations', cpu_steal: 'CPU steal',
};
const causeText = (c) => CAUSE[c] || String(c || '').replace(/_/g, ' ');

const jobBase = (id) => `jobs/${encodeURIComponent(id)}/`;
const qs = (o) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v != null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? '?' + s : '';
};
const intParam = (p, k) => {
  const v = p.get(k);
  return v != null && /^\d+$/.test(v) ? Number(v) : null;
};

// settle turns a fetch into {v} or {e}; an abort still rejects.
function settle(promise) {
  return promise.then((v) => ({ v }), (e) => {
    if (e.name === 'AbortError') throw e;
    return { e };
  });
}

// stragglerOf is the rank the report diagnoses first, else the slowest.
function stragglerOf(rep) {
  const d = (rep && rep.diagnoses) || [];
  if (d.length) return { rank: d[0].rank, peer: d[0].peer, group: d[0].group };
  const s = (rep && rep.slow_ranks) || [];
  if (s.length) return { rank: s[0].rank, peer: null, group: s[0].group };
  return null;
}

// selection resolves the URL's picks against the report's defaults.
export function selection(params, rep) {
  const st = stragglerOf(rep);
  const w = (rep && rep.window) || {};
  const win = params.get('fg_win') || '';
  let from = w.from_ns || null;
  let to = w.to_ns || null;
  if (win && /^\d+$/.test(win) && to) from = to - Number(win) * 1e9;
  const group = params.get('fg_group') || null;
  const rank = group ? null : intParam(params, 'fg_rank') ?? (st ? st.rank : 0);
  const temporal = !!(rep && rep.temporal && !st);
  const mode = params.get('df_mode') || (temporal ? 'baseline' : 'peer');
  const a = intParam(params, 'df_a') ?? (st ? st.rank : rank ?? 0);
  const b = intParam(params, 'df_b') ?? (st && st.peer != null && st.peer >= 0 ? st.peer : null);
  // The baseline window: the report's; without one the server picks its
  // default (the job's first steady window, else the one just before).
  const baseFrom = w.base_from_ns || null;
  const baseTo = w.base_to_ns || null;
  return { rank, group, win, from, to, straggler: st, diff: { mode, a, b, baseFrom, baseTo, baseBasis: w.base_basis || null } };
}

// loadSysom never rejects (the page must not fail for it): {rep, fg, df,
// os, sel} with each part {v} or {e}, {missing} when the job has neither a
// report nor stacks, or {aborted}.
export async function loadSysom(id, params, signal, fresh) {
  const base = jobBase(id);
  try {
    // The page's launch selector: the report (and so its window) reads that launch.
    const rep = await settle(cachedJSON(base + 'sysom' + qs({ incarnation: params.get('incarnation') || null, from_ns: params.get('sy_from_ns'),
      to_ns: params.get('sy_to_ns'), base_from_ns: params.get('sy_base_from_ns'), base_to_ns: params.get('sy_base_to_ns') }), signal, fresh));
    const sel = selection(params, rep.v);
    const win = { from_ns: sel.from, to_ns: sel.to };
    const fgQ = sel.group != null ? { group: sel.group, ...win } : { rank: sel.rank, ...win };
    const d = sel.diff;
    let dfPath = null;
    if (d.mode === 'baseline' && d.a != null) {
      dfPath = 'flamegraph/diff' + qs({ rank: d.a, ...win, base_from_ns: d.baseFrom, base_to_ns: d.baseTo });
    } else if (d.mode === 'peer' && d.a != null && d.b != null && d.a !== d.b) {
      dfPath = 'flamegraph/diff' + qs({ a_rank: d.a, b_rank: d.b, ...win });
    }
    const [fg, df, os] = await Promise.all([
      settle(cachedJSON(base + 'flamegraph' + qs(fgQ), signal, fresh)),
      dfPath ? settle(cachedJSON(base + dfPath, signal, fresh)) : null,
      settle(cachedJSON(base + 'osstats' + qs(win), signal, fresh)),
    ]);
    const gone = (x) => !x || (x.e && x.e.status === 404);
    if (gone(rep) && gone(fg) && gone(os)) return { missing: true, message: (rep.e || fg.e || {}).message || '' };
    const linked = params.get('sy_from_ns') || params.get('sy_to_ns') ? { from: intParam(params, 'sy_from_ns'), to: intParam(params, 'sy_to_ns') } : null;
    return { rep, fg, df, os, sel, linked };
  } catch (e) {
    if (e.name === 'AbortError') return { aborted: true };
    return { error: e };
  }
}

// sysomSig changes when an auto-refresh should redraw the section: when
// the diagnosis changes or a part appears or fails — not on every new
// sample (a live job's flame graph changes each refresh, and a redraw
// would drop the operator's zoom and search).
export function sysomSig(sy) {
  if (!sy || sy.missing) return 'missing';
  if (sy.error || sy.aborted) return 'error';
  const st = (x) => (!x ? '-' : x.e ? 'e' + x.e.status : 'ok');
  const r = (sy.rep && sy.rep.v) || {};
  const diag = JSON.stringify([r.slow_ranks, r.waterline, r.diagnoses, r.temporal]);
  let h = 2166136261; // FNV-1a over the diagnosis
  for (let i = 0; i < diag.length; i++) h = Math.imul(h ^ diag.charCodeAt(i), 16777619) >>> 0;
  return [st(sy.rep), st(sy.fg), st(sy.df), st(sy.os), diag.length, h].join(':');
}

// ---------- the section ----------
export function sysomView(sy, ctx = {}) {
  const head = (sub) => el('h2', { id: 'sy-title', class: 'sy-title' }, 'CPU profiles · SysOM', sub ? el('span', { class: 'sub' }, sub) : null);
  if (!sy || sy.aborted) return { node: null, draw() {} };
  if (sy.missing) {
    return { node: el('section', { class: 'card sy sy-missing', id: 'sysom', 'aria-labelledby': 'sy-title' }, head(),
      el('p', { class: 'sy-missing-text' }, 'No CPU profiles or OS signals for this job yet.'),
      el('p', { class: 'small muted sy-enable' }, ENABLE_HINT),
      sy.message ? el('p', { class: 'small muted' }, `The server said: ${sy.message}`) : null), draw() {} };
  }
  if (sy.error) {
    return { node: el('section', { class: 'card sy', id: 'sysom', 'aria-labelledby': 'sy-title' }, head(),
      el('p', { class: 'error-line sy-error', role: 'alert' }, `Cannot load the CPU profiles: ${sy.error.message}`)), draw() {} };
  }
  const rep = sy.rep.v || null;
  const sel = sy.sel;
  const ranks = rankList(rep, ctx.job);
  const w = rep && rep.window;
  const fg = flameCard(sy.fg, sel, flamePicker(sel, ranks, groupList(rep), !!(w && w.to_ns)));
  const df = diffCard(sy.df, sel, diffPicker(sel, ranks));
  const os = osstatCard(sy.os, sel.straggler ? sel.straggler.rank : sel.group == null ? sel.rank : null);
  const node = el('section', { class: 'sy', id: 'sysom', 'aria-labelledby': 'sy-title' },
    head(w && w.from_ns ? [`report window ${nsSpan(w.from_ns, w.to_ns)}`, w.ranks ? `${fmtInt(w.ranks)} ranks with stacks` : null,
      w.samples ? `${fmtInt(w.samples)} samples` : null, w.calls ? `${fmtInt(w.calls)} collective calls` : null,
      sel.from && sel.from !== w.from_ns ? `profiles over ${nsSpan(sel.from, sel.to)}` : null].filter(Boolean).join(' · ') : ''),
    sy.linked ? el('p', { class: 'note sy-window', 'data-from-ns': sy.linked.from || '', 'data-to-ns': sy.linked.to || '' },
      `Window from the link: ${sy.linked.from && sy.linked.to ? nsSpan(sy.linked.from, sy.linked.to) : 'as the link set it'}${params0(sy) ? ', against the stretch before it' : ''}. `,
      el('button', { type: 'button', class: 'linkish', onclick: () => go({ sy_from_ns: null, sy_to_ns: null, sy_base_from_ns: null, sy_base_to_ns: null }) }, 'show the default window')) : null,
    reportCard(sy.rep),
    fg.node, df.node, os.node);
  return {
    node,
    draw() {
      fg.draw();
      df.draw();
      os.draw();
    },
  };
}

// params0: the report compares with a baseline window.
const params0 = (sy) => !!(sy.rep && sy.rep.v && sy.rep.v.window && sy.rep.v.window.base_from_ns);

function rankList(rep, job) {
  const set = new Set();
  const n = job && job.world_size > 0 ? Math.min(job.world_size, MAX_RANK_OPTIONS) : 0;
  for (let i = 0; i < n; i++) set.add(i);
  for (const s of (rep && rep.slow_ranks) || []) set.add(s.rank);
  for (const d of (rep && rep.diagnoses) || []) {
    set.add(d.rank);
    if (d.peer >= 0) set.add(d.peer);
  }
  for (const f of (rep && rep.waterline) || []) set.add(f.rank);
  if (!set.size) set.add(0);
  return [...set].filter((r) => r >= 0).sort((a, b) => a - b);
}

function groupList(rep) {
  const set = new Set(['all']); // the API's group=all: every rank merged
  for (const k of ['slow_ranks', 'waterline', 'diagnoses']) for (const x of (rep && rep[k]) || []) if (x.group) set.add(x.group);
  return [...set].sort();
}

function rankOptions(ranks, chosen, st) {
  const tag = (r) => (st && r === st.rank ? ' (straggler)' : st && r === st.peer ? ' (peer)' : '');
  const list = chosen != null && !ranks.includes(chosen) ? [...ranks, chosen].sort((a, b) => a - b) : ranks;
  return list.map((r) => el('option', { value: String(r), selected: r === chosen || null }, `rank ${r}${tag(r)}`));
}

function flamePicker(sel, ranks, groups, hasWindow) {
  const subject = el('select', { name: 'fg_subject', 'aria-label': 'flame graph of' },
    rankOptions(ranks, sel.rank, sel.straggler).map((o) => { o.value = 'r' + o.value; return o; }),
    groups.map((g) => el('option', { value: 'g' + g, selected: sel.group === g || null }, g === 'all' ? 'all ranks' : `group ${g}`)),
    sel.group != null && !groups.includes(sel.group) ? el('option', { value: 'g' + sel.group, selected: true }, `group ${sel.group}`) : null);
  subject.addEventListener('change', () => {
    const v = subject.value;
    go(v[0] === 'g' ? { fg_group: v.slice(1), fg_rank: null } : { fg_rank: v.slice(1), fg_group: null });
  });
  const wins = hasWindow
    ? el('div', { class: 'seg', role: 'group', 'aria-label': 'profile window' }, WINDOWS.map(([v, l]) =>
      el('button', { type: 'button', class: sel.win === v ? 'on' : null, 'data-win': v || 'report', onclick: () => go({ fg_win: v || null }) }, l)))
    : el('span', { class: 'muted small' }, 'the server’s default window');
  return el('div', { class: 'winsel sy-picker' }, el('span', { class: 'lbl' }, 'Profile of'), subject, el('span', { class: 'lbl' }, 'Window'), wins);
}

function diffPicker(sel, ranks) {
  const d = sel.diff;
  const mode = el('div', { class: 'seg', role: 'group', 'aria-label': 'compare' },
    [['peer', 'straggler vs peer'], ['baseline', 'now vs baseline']].map(([v, l]) =>
      el('button', { type: 'button', class: d.mode === v ? 'on' : null, 'data-mode': v, onclick: () => go({ df_mode: v }) }, l)));
  const pick = (name, label, value) => {
    const s = el('select', { name, 'aria-label': label }, value == null ? el('option', { value: '', selected: true }, 'choose…') : null,
      rankOptions(ranks, value, sel.straggler));
    s.addEventListener('change', () => go({ [name]: s.value }));
    return s;
  };
  const parts = [el('span', { class: 'lbl' }, 'Compare'), mode, el('span', { class: 'lbl' }, 'A'), pick('df_a', 'rank A', d.a)];
  if (d.mode === 'baseline') {
    parts.push(el('span', { class: 'muted small sy-base' }, d.baseFrom
      ? `now against its baseline ${nsSpan(d.baseFrom, d.baseTo)}${BASE_BASIS[d.baseBasis] ? ` (${BASE_BASIS[d.baseBasis]})` : ''}`
      : 'now against the server’s default baseline'));
  } else {
    parts.push(el('span', { class: 'lbl' }, 'B'), pick('df_b', 'rank B', d.b));
  }
  return el('div', { class: 'winsel sy-picker' }, parts);
}

// ---------- the report card ----------
function rankBtn(rank, extra, cls) {
  return el('button', { type: 'button', class: 'chip sy-rank' + (cls ? ' ' + cls : ''), 'data-rank': rank, title: 'show this rank’s flame graph',
    onclick: () => go({ fg_rank: rank, fg_group: null }) }, `r${rank}`, extra ? ' ' + extra : '');
}

function reportCard(r) {
  const sub = 'slow ranks by collective entry, CPU waterline per group, and the layered diagnosis GPU → CPU → OS';
  if (r.e) {
    return card('SysOM diagnosis', sub, r.e.status === 404
      ? el('p', { class: 'muted sy-none sy-no-report' }, `No diagnosis yet${r.e.message ? ` (${r.e.message})` : ''}: it needs collective calls and CPU stacks in the window.`)
      : el('p', { class: 'error-line sy-error', role: 'alert' }, `Cannot load the diagnosis: ${r.e.message}`, r.e.path ? ` (GET ${r.e.path})` : ''));
  }
  const rep = r.v || {};
  const diags = rep.diagnoses || [];
  const slow = rep.slow_ranks || [];
  const wl = rep.waterline || [];
  const parts = [];
  if (!diags.length && !slow.length && !rep.temporal) {
    parts.push(el('p', { class: 'sy-verdict sy-none-found' }, 'No slow rank and no step-time rise in this window: nothing to diagnose.'));
  }
  for (const d of diags) parts.push(diagnosisView(d));
  if (rep.temporal) parts.push(temporalView(rep.temporal));
  const tables = [];
  if (slow.length) {
    tables.push(el('div', {}, el('h3', {}, 'Slow ranks', el('span', { class: 'muted small' }, ' · mean entry lateness above μ + kσ (§3.1)')),
      el('table', { class: 't sy-slow' }, el('thead', {}, el('tr', {}, ['group', 'rank', 'late (mean)', 'others (mean ± sd)', 'z', 'entered last', 'collectives'].map((h) => el('th', {}, h)))),
        el('tbody', {}, slow.map((s) => el('tr', { 'data-rank': s.rank }, el('td', { class: 'mono' }, s.group || '—'), el('td', {}, rankBtn(s.rank, null, 'leader')),
          el('td', { class: 'num bad' }, `${fmtNum(s.mean_late_ms, 1)} ms`),
          el('td', { class: 'num' }, s.peer_mean_ms != null ? `${fmtNum(s.peer_mean_ms, 1)} ± ${fmtNum(s.peer_sigma_ms, 1)} ms` : '—'),
          el('td', { class: 'num' }, fmtNum(s.z, 1)), el('td', { class: 'num' }, s.last_share != null ? pct(s.last_share) : '—'),
          el('td', { class: 'num', title: s.align === 'entry' ? 'aligned by entry: assumes synchronized host clocks' : s.align ? `aligned by ${s.align}` : null }, fmtInt(s.instances))))))));
  }
  if (wl.length) {
    tables.push(el('div', {}, el('h3', {}, 'CPU waterline', el('span', { class: 'muted small' }, ' · a function’s share of the rank’s own CPU samples (another process: of all its samples) above its group’s μ + kσ (§3.2)')),
      el('table', { class: 't sy-waterline' }, el('thead', {}, el('tr', {}, ['group', 'rank', 'function', 'share', 'group mean ± sd', 'z', 'samples'].map((h) => el('th', {}, h)))),
        el('tbody', {}, wl.map((f) => el('tr', { 'data-rank': f.rank, 'data-func': f.func }, el('td', { class: 'mono' }, f.group || '—'), el('td', {}, rankBtn(f.rank)),
          el('td', { class: 'mono sy-func', title: [f.func, f.module, f.kind].filter(Boolean).join(' · ') }, f.func, f.new ? el('span', { class: 'badge finding differs' }, 'new') : null,
            f.on_time ? el('span', { class: 'badge finding matches', title: 'the rank enters its collectives on time: this CPU difference does not delay the group, so the rank is not diagnosed' }, 'on time') : null),
          el('td', { class: 'num bad' }, pct(f.fraction)), el('td', { class: 'num' }, `${pct(f.mean)} ± ${pct(f.sigma)}`),
          el('td', { class: 'num' }, fmtNum(f.z, 1)), el('td', { class: 'num' }, fmtInt(f.samples))))))));
  } else if (slow.length || diags.length) {
    tables.push(el('p', { class: 'muted small sy-no-waterline' }, 'No function above its group’s CPU waterline.'));
  }
  if (tables.length) parts.push(el('div', { class: 'grid sy-tables' }, tables));
  if ((rep.notes || []).length) parts.push(el('ul', { class: 'notes sy-notes' }, rep.notes.map((n) => el('li', {}, n))));
  const node = card('SysOM diagnosis', sub, parts);
  node.classList.add('sy-report');
  return node;
}

function diagnosisView(d) {
  const concluded = d.layer && LAYERS.includes(d.layer) ? d.layer : null;
  const low = d.confidence !== 'high';
  const byLayer = new Map((d.layers || []).map((l) => [l.layer, l]));
  return el('div', { class: 'sy-diag', 'data-rank': d.rank, 'data-layer': concluded || 'inconclusive' },
    el('div', { class: 'sy-diag-top' },
      el('span', { class: 'badge sy-layer-badge' + (concluded ? ' layer-' + concluded : ' inconclusive') }, concluded ? `${LAYER_NAME[concluded]} layer` : 'inconclusive'),
      el('span', { class: 'badge sy-conf conf-' + (d.confidence || 'low') }, `${d.confidence || 'low'} confidence`),
      rankBtn(d.rank, null, 'leader'), d.peer != null && d.peer >= 0 ? el('span', { class: 'muted small' }, 'against peer') : null,
      d.peer != null && d.peer >= 0 ? rankBtn(d.peer) : null,
      d.group ? el('span', { class: 'muted small mono' }, `group ${d.group}`) : null,
      (d.flagged || []).length ? el('span', { class: 'muted small' }, `flagged by ${d.flagged.map((f) => f.replace(/_/g, ' ')).join(' and ')}`) : null,
      d.cause ? el('span', { class: 'badge sy-cause', 'data-cause': d.cause }, causeText(d.cause)) : null,
      d.peer != null && d.peer >= 0 ? el('button', { type: 'button', class: 'linkish small sy-compare', onclick: () => go({ df_mode: 'peer', df_a: d.rank, df_b: d.peer }) }, 'compare flame graphs') : null),
    el('p', { class: 'sy-verdict' }, d.summary || ''),
    !concluded || low
      ? el('p', { class: 'note sy-inconclusive' }, !concluded
        ? 'Inconclusive: no layer differs clearly enough from the peer to name a cause; the checks below are where to look next.'
        : 'Low confidence: the evidence below is weak (few samples or a small difference); treat the named layer as a lead, not a finding.')
      : null,
    el('ol', { class: 'sy-layers' }, LAYERS.map((k) => layerView(k, byLayer.get(k), concluded === k))));
}

function layerView(k, l, concluded) {
  if (!l) {
    return el('li', { class: 'sy-layer finding-not_observed', 'data-layer': k },
      el('div', { class: 'sy-layer-head' }, el('strong', {}, LAYER_NAME[k]), el('span', { class: 'badge finding not_observed' }, 'not observed')),
      el('p', { class: 'muted small' }, k === 'gpu' ? 'No GPU kernel times for this window (the GPU layer needs kernel timings or NVML).' : 'No data for this layer.'));
  }
  const f = l.finding || 'not_observed';
  return el('li', { class: `sy-layer finding-${f}${concluded ? ' concluded' : ''}`, 'data-layer': k, 'data-finding': f },
    el('div', { class: 'sy-layer-head' }, el('strong', {}, LAYER_NAME[k]), el('span', { class: 'badge finding ' + f }, FINDING[f] || f),
      l.cause ? el('span', { class: 'muted small' }, causeText(l.cause)) : null,
      concluded ? el('span', { class: 'badge sy-concluded' }, 'concluded here') : null),
    (l.evidence || []).length ? el('ul', { class: 'sy-evidence' }, l.evidence.map((e) => el('li', {}, e))) : null,
    (l.paths || []).length ? el('div', { class: 'sy-paths' }, l.paths.map((p) => pathView(p))) : null,
    l.next ? el('p', { class: 'sy-next' }, el('span', { class: 'k' }, 'next check'), ' ', l.next) : null);
}

function pathView(p, label = 'peer') {
  const stack = p.stack || [];
  return el('div', { class: 'sy-path', 'data-func': p.func },
    el('span', { class: 'mono sy-path-func' }, p.func), ' ',
    el('span', { class: 'num' }, `${pct(p.fraction)} vs ${pct(p.peer_fraction)} on the ${label}`),
    p.cause ? el('span', { class: 'muted small' }, ` · ${causeText(p.cause)}`) : null,
    stack.length ? el('div', { class: 'mono small muted sy-stack', title: stack.join('\n') }, stack.length > 8
      ? [...stack.slice(0, 3), `… ${stack.length - 6} frames …`, ...stack.slice(-3)].join(' → ')
      : stack.join(' → ')) : null);
}

function temporalView(t) {
  const rose = t.rise != null ? t.rise : t.iter_ms > 0 && t.iter_base_ms > 0 ? t.iter_ms / t.iter_base_ms - 1 : null;
  return el('div', { class: 'sy-temporal' },
    el('div', { class: 'sy-diag-top' }, el('span', { class: 'badge sy-layer-badge layer-temporal' }, 'temporal baseline'),
      el('button', { type: 'button', class: 'linkish small sy-compare', onclick: () => go({ df_mode: 'baseline' }) }, 'compare now with the baseline')),
    el('p', { class: 'sy-verdict' }, `No straggler: every rank slowed together. Step time ${fmtNum(t.iter_base_ms, 1)} ms → ${fmtNum(t.iter_ms, 1)} ms`,
      rose != null ? ` (${rose >= 0 ? '+' : ''}${(100 * rose).toFixed(1)}%)` : '', '; functions whose CPU share grew by more than δ:'),
    (t.candidates || []).length
      ? el('div', { class: 'sy-paths' }, t.candidates.map((p) => pathView(p, 'baseline')))
      : el('p', { class: 'muted small' }, 'No function grew by more than δ: the rise is not on the CPU the profiler sees.'),
    (t.evidence || []).length ? el('ul', { class: 'sy-evidence' }, t.evidence.map((e) => el('li', {}, e))) : null,
    t.next ? el('p', { class: 'sy-next' }, el('span', { class: 'k' }, 'next check'), ' ', t.next) : null);
}
