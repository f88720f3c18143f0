// OS signal panels (SysOM-AI §3.1 "OS diff", §5.4): GET
// /api/v1/jobs/<id>/osstats as small multiples over the window — one panel
// per metric, one line per CPU, rank or device. The straggler's lines are
// drawn red over the others in grey: its rank's series, and for per-CPU
// metrics (interrupts, softirqs, steal) the CPUs its threads ran on
// (rank_on_cpu). Per-CPU counters the agent splits by IRQ or softirq
// (Device) are summed per CPU here; the tooltip names the largest device.
// Sources a node does not have are listed as not collected, with the
// agent's reason — never drawn as zeros.
import { el, sv, card, showTip, hideTip, tipTable } from './dom.js';
import { fmtInt, niceTicks } from './format.js';

// Panels in reading order; metrics not listed follow, alphabetically.
const METRICS = {
  interrupts: { title: 'Hard interrupts', unit: '/s', by: 'cpu' },
  softirqs: { title: 'Softirqs', unit: '/s', by: 'cpu' },
  runq_wait: { title: 'Run-queue wait', unit: 's/s', by: 'rank' },
  runq_latency_p99: { title: 'Wakeup latency p99', unit: 'ms', by: 'rank' },
  ctx_switches_inv: { title: 'Involuntary context switches', unit: '/s', by: 'rank' },
  ctx_switches_vol: { title: 'Voluntary context switches', unit: '/s', by: 'rank' },
  cpu_steal: { title: 'CPU steal', unit: 'fraction', by: 'cpu' },
  cpu_softirq: { title: 'CPU time in softirq', unit: 'fraction', by: 'cpu' },
  cpu_irq: { title: 'CPU time in hard IRQ', unit: 'fraction', by: 'cpu' },
  rank_cpu: { title: 'Rank CPU use', unit: 'CPUs', by: 'rank' },
  cpu_migrations: { title: 'CPU migrations', unit: '/s', by: 'rank' },
  numa_pages_migrated: { title: 'NUMA pages migrated', unit: '/s', by: 'rank' },
  node_numa_pages_migrated: { title: 'NUMA pages migrated (node)', unit: '/s', by: 'node' },
  cpu_freq_mhz: { title: 'CPU frequency', unit: 'MHz', by: 'cpu' },
  gpu_sm_clock_mhz: { title: 'GPU SM clock', unit: 'MHz', by: 'device' },
  gpu_mem_clock_mhz: { title: 'GPU memory clock', unit: 'MHz', by: 'device' },
  gpu_temp_c: { title: 'GPU temperature', unit: '°C', by: 'device' },
  gpu_util: { title: 'GPU utilisation', unit: 'fraction', by: 'device' },
  gpu_power_w: { title: 'GPU power', unit: 'W', by: 'device' },
  rdma_cnp_sent: { title: 'RDMA CNP sent', unit: '/s', by: 'device' },
  rdma_cnp_handled: { title: 'RDMA CNP handled', unit: '/s', by: 'device' },
  rdma_pfc_pause_rx: { title: 'PFC pause received', unit: '/s', by: 'device' },
  rdma_pfc_pause_tx: { title: 'PFC pause sent', unit: '/s', by: 'device' },
};
// Not drawn as lines: placement (used for highlighting), bitmasks, limits.
const HIDDEN = new Set(['rank_on_cpu', 'gpu_throttle', 'gpu_max_sm_clock_mhz']);
const MAX_PANELS = 16;
const MAX_LINES = 256; // per panel; the rest are summarised

const fmtV = (v, unit) => {
  if (v == null || !isFinite(v)) return '—';
  if (unit === 'fraction') return (v === 0 ? '0' : (100 * v).toFixed(v < 0.1 ? 1 : 0)) + '%';
  const a = Math.abs(v);
  if (a === 0) return '0';
  return a >= 1e6 ? (v / 1e6).toFixed(1) + 'M' : a >= 1e4 ? (v / 1e3).toFixed(0) + 'k' : a >= 100 ? fmtInt(Math.round(v))
    : a >= 1 ? String(Number(v.toFixed(1))) : String(Number(v.toPrecision(2)));
};

function lineKey(s, by) {
  if (by === 'cpu' && s.cpu >= 0) return 'cpu ' + s.cpu;
  if (by === 'rank' && s.rank >= 0) return 'rank ' + s.rank;
  if (s.rank >= 0 && s.device) return `rank ${s.rank} · ${s.device}`;
  if (s.device) return s.device;
  if (s.rank >= 0) return 'rank ' + s.rank;
  if (s.cpu >= 0) return 'cpu ' + s.cpu;
  return 'node';
}

// strCPUs is the CPUs the straggler's threads ran on in the window.
export function stragglerCPUs(series, rank) {
  const cpus = new Set();
  if (rank == null) return cpus;
  for (const s of series) {
    if (s.name === 'rank_on_cpu' && s.rank === rank && s.cpu >= 0 && (s.points || []).some((p) => p[1] > 0)) cpus.add(s.cpu);
  }
  return cpus;
}

// panels groups the series by metric and folds devices into lines.
export function panels(series, rank) {
  const cpus = stragglerCPUs(series, rank);
  const byName = new Map();
  for (const s of series) {
    if (HIDDEN.has(s.name) || !(s.points || []).length) continue;
    const m = METRICS[s.name] || { title: s.name.replace(/_/g, ' '), unit: '', by: s.cpu >= 0 ? 'cpu' : s.rank >= 0 ? 'rank' : 'device' };
    if (!byName.has(s.name)) byName.set(s.name, { name: s.name, ...m, lines: new Map() });
    const p = byName.get(s.name);
    const key = lineKey(s, p.by);
    let line = p.lines.get(key);
    if (!line) {
      const hl = (rank != null && s.rank === rank) || (p.by === 'cpu' && cpus.has(s.cpu));
      line = { key, hl, pts: new Map(), devices: new Map() };
      p.lines.set(key, line);
    }
    for (const [t, v] of s.points) {
      line.pts.set(t, (line.pts.get(t) || 0) + v);
      if (s.device) {
        const dv = line.devices.get(t) || [];
        dv.push([s.device, v]);
        line.devices.set(t, dv);
      }
    }
  }
  const order = Object.keys(METRICS);
  return [...byName.values()]
    .map((p) => ({ ...p, lines: [...p.lines.values()].map((l) => ({ ...l, pts: [...l.pts.entries()].sort((a, b) => a[0] - b[0]) })) }))
    .sort((a, b) => {
      const ia = order.indexOf(a.name);
      const ib = order.indexOf(b.name);
      return (ia < 0 ? 1e3 : ia) - (ib < 0 ? 1e3 : ib) || a.name.localeCompare(b.name);
    });
}

// osstatCard: os {v} | {e}; rank is the straggler (highlighted) or null.
export function osstatCard(os, rank) {
  const sub = `each panel one metric over the window; ${rank != null ? `red: rank ${rank} and the CPUs it ran on; ` : ''}grey: the others`;
  if (os && os.e) {
    const e = os.e;
    return { node: card('OS signals', sub, e.status === 404
      ? el('p', { class: 'muted sy-none' }, `No OS signals for this job${e.message ? ` (${e.message})` : ''}: run \`laggard agent\` on the nodes (without --no-osstat).`)
      : el('p', { class: 'error-line sy-error', role: 'alert' }, `Cannot load the OS signals: ${e.message}`, e.path ? ` (GET ${e.path})` : '')), draw() {} };
  }
  const body = (os && os.v) || {};
  const series = body.series || [];
  const absent = body.absent || [];
  const ps = panels(series, rank);
  const grid = el('div', { class: 'sy-os-grid' });
  const absentList = absent.length
    ? el('div', { class: 'sy-absent' }, el('span', { class: 'k' }, 'not collected'),
      el('ul', {}, absent.map((a) => el('li', { 'data-source': a.source, 'data-node': a.node || '' },
        `not collected on node ${a.node || '?'}: ${a.reason || 'no reason given'} (${a.source})`))))
    : null;
  const none = !ps.length ? el('p', { class: 'muted sy-none' }, series.length ? 'The OS signals hold no plottable series in this window.' : 'No OS signals in this window.') : null;
  const more = ps.length > MAX_PANELS ? el('p', { class: 'muted small' }, `${ps.length - MAX_PANELS} more metrics not shown: ${ps.slice(MAX_PANELS).map((p) => p.name).join(', ')}`) : null;
  const node = card('OS signals', sub, none, grid, more, absentList);
  node.classList.add('sy-os-card');
  return {
    node,
    draw() {
      for (const p of ps.slice(0, MAX_PANELS)) grid.append(drawPanel(p));
    },
  };
}

const W = 300;
const H = 118;
const M = { l: 44, r: 8, t: 6, b: 18 };

function drawPanel(p) {
  const lines = p.lines.slice().sort((a, b) => Number(a.hl) - Number(b.hl)); // highlighted drawn last (on top)
  const shown = lines.length > MAX_LINES ? lines.filter((l) => l.hl).concat(lines.filter((l) => !l.hl).slice(0, MAX_LINES)) : lines;
  let t0 = Infinity;
  let t1 = -Infinity;
  let vmax = 0;
  for (const l of shown) {
    for (const [t, v] of l.pts) {
      t0 = Math.min(t0, t);
      t1 = Math.max(t1, t);
      vmax = Math.max(vmax, v);
    }
  }
  if (!(t1 > t0)) t1 = t0 + 1e9;
  const top = niceTicks(0, vmax > 0 ? vmax : 1, 3);
  const ymax = Math.max(top[top.length - 1], vmax) || 1;
  const x = (t) => M.l + ((t - t0) / (t1 - t0)) * (W - M.l - M.r);
  const y = (v) => H - M.b - (v / ymax) * (H - M.t - M.b);
  const path = (pts) => pts.map(([t, v], i) => `${i ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join('');
  const hlKeys = shown.filter((l) => l.hl).map((l) => l.key);
  const svg = sv('svg', { class: 'sy-os-panel', viewBox: `0 0 ${W} ${H}`, width: W, height: H, 'data-name': p.name, 'data-lines': shown.length, role: 'img',
    'aria-label': `${p.title} (${p.unit}) over the window: ${shown.length} lines${hlKeys.length ? `, highlighted ${hlKeys.join(', ')}` : ''}` },
    top.map((v) => sv('g', { class: 'tick' }, sv('line', { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v), class: 'grid' }),
      sv('text', { x: M.l - 4, y: y(v) + 3, 'text-anchor': 'end' }, fmtV(v, p.unit)))),
    sv('text', { x: M.l, y: H - 4 }, '0 s'),
    sv('text', { x: W - M.r, y: H - 4, 'text-anchor': 'end' }, `${((t1 - t0) / 1e9).toFixed(0)} s`),
    shown.map((l) => sv('path', { class: 'sy-line' + (l.hl ? ' hl' : ''), d: path(l.pts), 'data-key': l.key })),
    sv('line', { class: 'sy-cursor', x1: 0, x2: 0, y1: M.t, y2: H - M.b, visibility: 'hidden' }));
  const cursor = svg.querySelector('.sy-cursor');
  svg.addEventListener('mousemove', (ev) => {
    const r = svg.getBoundingClientRect();
    const t = t0 + ((ev.clientX - r.left) * (W / r.width) - M.l) / (W - M.l - M.r) * (t1 - t0);
    const at = (l) => l.pts.reduce((best, q) => (Math.abs(q[0] - t) < Math.abs(best[0] - t) ? q : best), l.pts[0]);
    const rows = [];
    for (const l of shown.filter((q) => q.hl)) {
      const q = at(l);
      const dv = (l.devices.get(q[0]) || []).slice().sort((a, b) => b[1] - a[1])[0];
      rows.push([l.key + ' ★', fmtV(q[1], p.unit) + (dv ? ` (most: ${dv[0]})` : '')]);
    }
    const others = shown.filter((q) => !q.hl).map((l) => [l, at(l)]).sort((a, b) => b[1][1] - a[1][1]);
    for (const [l, q] of others.slice(0, 4)) rows.push([l.key, fmtV(q[1], p.unit)]);
    if (others.length > 4) rows.push([`… ${others.length - 4} more`, '']);
    const tq = at(shown[0])[0];
    cursor.setAttribute('x1', x(tq));
    cursor.setAttribute('x2', x(tq));
    cursor.setAttribute('visibility', 'visible');
    showTip(ev, tipTable(`${p.title} · +${((tq - t0) / 1e9).toFixed(0)} s`, rows, p.unit ? `unit: ${p.unit}` : null));
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    hideTip();
  });
  return el('figure', { class: 'sy-os', 'data-name': p.name },
    el('figcaption', {}, p.title, el('span', { class: 'muted small' }, ` ${p.unit}`),
      lines.length > shown.length ? el('span', { class: 'muted small' }, ` · ${shown.length} of ${lines.length} lines`) : null),
    svg);
}
