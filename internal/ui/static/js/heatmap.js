// Rank × stage heatmap (canvas, so 1,024+ ranks stay fast). The default
// colour is how far behind the typical rank a rank reaches the end of
// each stage (ms/step): the straggler that holds the others back is the
// red cell; the ranks that wait for it are at zero. Other metrics: the
// slack behind the frontier (§3 eq.3; 0 = the rank sets the frontier),
// its change per stage (Δ lag), and the rank's own stage time.
//
// Rows are ranks (sorted by id with host separators, or most behind
// first) or hosts (each host's most-behind rank per stage). Clicking a
// column header focuses the stage; clicking a cell opens the rank.
import { el, showTip, hideTip, tipTable } from './dom.js';
import { fmtMs, fmtMsN, fmtDelta, fmtInt, fmtNum, short, rankSteps, stageColor } from './format.js';
import { go } from './state.js';

const METRICS = {
  late: { label: 'behind typical', unit: 'ms/step', ramp: 'div',
    help: 'how much later than the typical rank this rank reaches the end of the stage, per step; red = behind (holds the others back)' },
  lag: { label: 'slack', unit: 'ms/step', ramp: 'blue',
    help: 'slack behind the frontier at the end of the stage, Σ(F − P) per step (§3 eq.3); 0 = this rank sets the frontier' },
  dlag: { label: 'Δ slack', unit: 'ms/step', ramp: 'div',
    help: 'change of the slack within the stage per step; − = the rank spent longer in the stage than the frontier advanced' },
  stage: { label: 'own time', unit: 'ms', ramp: 'seq',
    help: "the rank's own mean time in the stage, waits it observed included" },
};

export const RAMPS = {
  seq: [[255, 247, 236], [253, 212, 158], [252, 141, 89], [215, 48, 31], [127, 0, 0]],
  blue: [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]],
  div: [[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130], [178, 24, 43]],
};

function ramp(stops, t) {
  t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t));
  const f = t - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// rampRGB is ramp as numbers, for views that paint pixels (greyhound.js).
export function rampRGB(stops, t) {
  t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t));
  const f = t - i;
  return stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
}

const upperMedian = (xs) => {
  const s = xs.slice().sort((a, b) => a - b);
  return s.length ? s[s.length >> 1] : 0;
};

// matrix computes every metric for every rank, once per report.
export function rankMatrix(sr) {
  const stages = sr.stages || [];
  const ranks = sr.ranks || [];
  const S = stages.length;
  const steps = ranks.map((r) => rankSteps(r, sr.num_steps || 1));
  // A rank with no vector in the window has all-zero sums; its metrics
  // are NaN (drawn grey) rather than "sets the frontier everywhere".
  const present = ranks.map((r) => r.total_ms > 0 || (r.mean_stage_ms || []).some((x) => x > 0));
  const lag = ranks.map((r, i) => stages.map((_, s) => (present[i] ? ((r.lag_ms || [])[s] || 0) / steps[i] : NaN)));
  const ev = sr.stage_evidence || [];
  const typical = stages.map((_, s) => (ev[s] && ev[s].typical_lag_ms != null ? ev[s].typical_lag_ms
    : upperMedian(lag.map((l) => l[s]).filter((v) => !Number.isNaN(v)))));
  const m = {
    late: lag.map((l) => l.map((v, s) => typical[s] - v)),
    lag,
    dlag: ranks.map((r, i) => stages.map((_, s) => (present[i] ? ((r.delta_lag_ms || [])[s] || 0) / steps[i] : NaN))),
    stage: ranks.map((r, i) => stages.map((_, s) => (present[i] ? (r.mean_stage_ms || [])[s] || 0 : NaN))),
  };
  return { stages, ranks, S, steps, typical, m, present };
}

// worse says whether metric value a is more suspicious than b; a missing
// value (NaN) never is.
const nanLast = (f) => (a, b) => !Number.isNaN(a) && (Number.isNaN(b) || f(a, b));
const WORSE = {
  late: nanLast((a, b) => a > b),
  lag: nanLast((a, b) => a < b),
  dlag: nanLast((a, b) => Math.abs(a) > Math.abs(b)),
  stage: nanLast((a, b) => a > b),
};

// mostBehind returns rank positions sorted most behind first at stage s.
export function mostBehind(mx, s) {
  return mx.ranks.map((_, i) => i).filter((i) => mx.present[i])
    .sort((a, b) => mx.m.late[b][s] - mx.m.late[a][s] || mx.ranks[a].rank - mx.ranks[b].rank);
}

const scrollMemo = new Map();

export function drawHeatmap(host, sr, o) {
  const mx = rankMatrix(sr);
  const { stages, ranks, S } = mx;
  if (!ranks.length || !S) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No per-rank data in this window.'));
    return;
  }
  const metric = METRICS[o.metric] ? o.metric : 'late';
  const M = METRICS[metric];
  const V = mx.m[metric];
  const worse = WORSE[metric];
  const hasHosts = ranks.some((r) => r.host);
  const byHost = o.rows === 'hosts' && hasHosts;
  // The column that orders "most behind first": the focused stage, else
  // the headline's, else the top-1.
  const sortStage = Math.max(0, stages.indexOf(o.stage || o.headStage || sr.top1));
  const sortWorst = o.sort === 'worst';

  // Rows: each is a list of rank positions; a cell shows the row's most
  // suspicious rank so a straggler is never averaged away.
  let rows;
  if (byHost) {
    const groups = new Map();
    ranks.forEach((r, i) => {
      const h = r.host || '(no host)';
      if (!groups.has(h)) groups.set(h, []);
      groups.get(h).push(i);
    });
    rows = [...groups.entries()].map(([h, idx]) => ({ host: h, idx }));
  } else {
    rows = ranks.map((r, i) => ({ host: r.host || '', idx: [i] }));
  }
  for (const row of rows) {
    row.cell = stages.map((_, s) => {
      let best = row.idx[0];
      for (const i of row.idx) if (worse(V[i][s], V[best][s])) best = i;
      return best;
    });
  }
  rows.sort((a, b) => {
    if (sortWorst) {
      const va = V[a.cell[sortStage]][sortStage];
      const vb = V[b.cell[sortStage]][sortStage];
      if (worse(va, vb)) return -1;
      if (worse(vb, va)) return 1;
    }
    return ranks[a.idx[0]].rank - ranks[b.idx[0]].rank;
  });

  // Colour scale over everything shown.
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of V) for (const v of row) if (!Number.isNaN(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  const amax = Math.max(Math.abs(lo), Math.abs(hi), 1e-9);
  const smin = M.ramp === 'div' ? -amax : Math.min(0, lo);
  const smax = M.ramp === 'div' ? amax : Math.max(hi, smin + 1e-9);
  const color = (v) => (Number.isNaN(v) ? '#d0d7de' : ramp(RAMPS[M.ramp], (v - smin) / (smax - smin)));

  const R = rows.length;
  const rowH = R <= 24 ? 20 : R <= 64 ? 12 : R <= 160 ? 6 : R <= 400 ? 4 : 3;
  const labelW = 168;
  const wrap = el('div', { class: 'hm-wrap', tabindex: 0, 'aria-label': 'heatmap rows; scroll to see every rank' });
  const cols = el('div', { class: 'hm-cols', role: 'toolbar', 'aria-label': 'focus a stage' });
  const W = Math.max(320, Math.floor(host.clientWidth || 600));
  const cw = (W - labelW) / S;
  stages.forEach((s, i) => cols.append(el('button', {
    class: 'hm-col' + (o.stage === s ? ' on' : ''), style: `left:${labelW + i * cw}px;width:${cw}px`, title: `${s}: click to focus`,
    'data-stage': s, 'aria-pressed': o.stage === s ? 'true' : 'false', onclick: () => go({ stage: o.stage === s ? null : s }),
  }, el('span', { class: 'sw', style: `background:${stageColor(s, i)}` }), short(s))));

  const H = R * rowH;
  const dpr = window.devicePixelRatio || 1;
  const cv = el('canvas', { class: 'hm', width: Math.round(W * dpr), height: Math.round(H * dpr), style: `width:${W}px;height:${H}px`,
    'data-row-height': rowH, 'data-label-width': labelW, 'data-rows': R,
    'data-first-rows': rows.slice(0, 8).map((r) => (byHost ? r.host : 'r' + ranks[r.idx[0]].rank)).join(','),
    role: 'img', 'aria-label': `${R} ${byHost ? 'hosts' : 'ranks'} × ${S} stages, coloured by ${M.label}` });
  const g = cv.getContext('2d');
  g.scale(dpr, dpr);
  const headPos = ranks.findIndex((r) => r.rank === o.headRank);
  const selPos = ranks.findIndex((r) => String(r.rank) === String(o.rank));
  const font = (px, bold) => `${bold ? 'bold ' : ''}${px}px ui-monospace, "DejaVu Sans Mono", monospace`;
  // Labels: every row when rows are tall enough; with short rows the host
  // names (id order) or as many row names as fit (other orders) take the
  // gutter, and the named straggler and the selected rank are always
  // labelled, on top.
  const compact = rowH < 10;
  const hostCol = compact && !byHost && !sortWorst;
  const rowLabel = (row) => {
    const r0 = ranks[row.idx[0]];
    if (byHost) return `${row.host} (${row.idx.length})`;
    return hostCol ? `r${r0.rank}` : `r${r0.rank}${r0.host ? ' ' + r0.host : ''}`;
  };
  const special = [];
  let prevHost = null;
  let nextFree = 0; // compact: the gutter is free below this y
  rows.forEach((row, ri) => {
    const y0 = ri * rowH;
    row.cell.forEach((i, si) => {
      g.fillStyle = color(V[i][si]);
      g.fillRect(labelW + si * cw, y0, Math.ceil(cw) - (cw > 8 ? 1 : 0), rowH - (rowH > 5 ? 1 : 0));
    });
    const isHead = headPos >= 0 && row.idx.includes(headPos);
    const isSel = selPos >= 0 && row.idx.includes(selPos);
    if (isHead || isSel) special.push({ ri, row, isHead, isSel });
    if (!byHost && !sortWorst && row.host !== prevHost) {
      if (ri > 0) { g.fillStyle = '#8c959f'; g.fillRect(0, y0, W, 1); } // host separator
      if (hostCol && row.host && y0 >= nextFree) {
        g.fillStyle = '#57606a';
        g.font = font(9);
        g.textBaseline = 'top';
        g.fillText(row.host, 4, y0 + 1, 76);
        nextFree = y0 + 11;
      }
    }
    prevHost = row.host;
    if (!compact) {
      g.fillStyle = '#1f2328';
      g.font = font(Math.min(12, rowH - 4));
      g.textBaseline = 'middle';
      g.fillText(rowLabel(row), 4, y0 + rowH / 2, labelW - 8);
    } else if (!hostCol && y0 >= nextFree) {
      g.fillStyle = '#57606a';
      g.font = font(9);
      g.textBaseline = 'top';
      g.fillText(rowLabel(row), 4, y0, labelW - 8);
      nextFree = y0 + 11;
    }
    if (rowH >= 18 && cw >= 56) {
      g.font = font(11);
      g.textAlign = 'center';
      g.textBaseline = 'middle';
      row.cell.forEach((i, si) => {
        const t = (V[i][si] - smin) / (smax - smin);
        g.fillStyle = (M.ramp === 'div' ? Math.abs(t - 0.5) > 0.3 : t > 0.55) ? '#fff' : '#1f2328';
        g.fillText(fmtMsN(V[i][si], M.ramp === 'div'), labelW + si * cw + cw / 2, y0 + rowH / 2);
      });
      g.textAlign = 'start';
    }
  });
  for (const { ri, row, isHead } of special) {
    const txt = (isHead ? '▶ ' : '') + rowLabel(row);
    const fs = compact ? 10 : Math.min(12, rowH - 4);
    g.font = font(fs, true);
    const lx = hostCol ? 84 : 4;
    const tw = Math.min(g.measureText(txt).width, labelW - lx - 6);
    const yMid = ri * rowH + rowH / 2;
    g.fillStyle = isHead ? '#fee2e2' : '#e6edf3';
    g.fillRect(lx - 2, yMid - fs / 2 - 2, tw + 4, fs + 4);
    g.fillStyle = isHead ? '#991b1b' : '#1f2328';
    g.textBaseline = 'middle';
    g.fillText(txt, lx, yMid, labelW - lx - 6);
  }
  // Outline a row; short rows get rules above and below instead, so the
  // outline does not paint over the row's own colours.
  const outline = (pos, colr) => {
    const ri = rows.findIndex((row) => row.idx.includes(pos));
    if (ri < 0) return -1;
    g.strokeStyle = colr;
    g.fillStyle = colr;
    if (rowH >= 8) {
      g.lineWidth = 2;
      g.strokeRect(labelW + 1, ri * rowH + 1, W - labelW - 2, rowH - 2);
    } else {
      g.fillRect(labelW, ri * rowH - 2, W - labelW, 1.5);
      g.fillRect(labelW, (ri + 1) * rowH + 0.5, W - labelW, 1.5);
      g.fillRect(labelW - 5, ri * rowH - 2, 4, rowH + 4);
    }
    return ri;
  };
  const headRow = headPos >= 0 ? outline(headPos, '#b42318') : -1;
  const selRow = selPos >= 0 ? outline(selPos, '#1f2328') : -1;
  const focus = stages.indexOf(o.stage);
  if (focus >= 0) {
    g.strokeStyle = '#0b5cad';
    g.lineWidth = 2;
    g.strokeRect(labelW + focus * cw + 1, 1, cw - 2, H - 2);
  }

  const at = (ev) => {
    const rect = cv.getBoundingClientRect();
    const ri = Math.floor((ev.clientY - rect.top) / rowH);
    const si = Math.floor((ev.clientX - rect.left - labelW) / cw);
    return { ri, si: ev.clientX - rect.left < labelW ? -1 : si };
  };
  cv.addEventListener('mousemove', (ev) => {
    const { ri, si } = at(ev);
    if (ri < 0 || ri >= R) { hideTip(); return; }
    const row = rows[ri];
    const s = si >= 0 && si < S ? si : sortStage;
    const i = row.cell[s];
    const r = ranks[i];
    const n = mx.steps[i];
    if (!mx.present[i]) {
      showTip(ev, tipTable(`rank ${r.rank}${r.host ? ' · ' + r.host : ''}`, [['stage', stages[s]]], 'no stage vector from this rank in the window (a missing rank)'));
      return;
    }
    showTip(ev, tipTable(`rank ${r.rank}${r.host ? ' · ' + r.host : ''}${r.rank === o.headRank ? ' · named straggler' : ''}`, [
      ['stage', stages[s]],
      ['behind typical', fmtDelta(mx.m.late[i][s]) + '/step'],
      ['slack behind frontier', fmtMs(mx.m.lag[i][s]) + '/step'],
      ['Δ slack', fmtDelta(mx.m.dlag[i][s]) + '/step'],
      ['own stage time', fmtMs(mx.m.stage[i][s])],
      ['sets the frontier', `${(r.lead_count || [])[s] ?? '—'} of ${n} steps`],
    ], byHost ? `host row: ${row.idx.length} ranks, showing the most suspicious (rank ${r.rank}) · click to open it` : 'click to open this rank'));
  });
  cv.addEventListener('mouseleave', hideTip);
  cv.addEventListener('click', (ev) => {
    const { ri, si } = at(ev);
    if (ri < 0 || ri >= R) return;
    const s = si >= 0 && si < S ? si : sortStage;
    hideTip();
    go({ rank: ranks[rows[ri].cell[s]].rank, stage: si >= 0 && si < S ? stages[si] : o.stage || null });
  });
  wrap.append(cv);

  // The accessible way in: the most-behind ranks at the sort column as
  // buttons.
  const top = mostBehind(mx, sortStage).slice(0, 5);
  const list = el('div', { class: 'hm-top' }, el('span', { class: 'muted' }, `Most behind at ${short(stages[sortStage])}: `),
    top.map((i) => el('button', { class: 'chip rank-chip' + (ranks[i].rank === o.headRank ? ' leader' : ''), 'data-rank': ranks[i].rank,
      onclick: () => go({ rank: ranks[i].rank, stage: stages[sortStage] }) },
    `r${ranks[i].rank}`, ranks[i].host ? ` ${ranks[i].host}` : '', ` ${fmtDelta(mx.m.late[i][sortStage])}`)));

  host.replaceChildren(controls(o, hasHosts, ranks.length, stages[sortStage]),
    el('div', { class: 'muted small hm-help' }, M.help, byHost ? ' · one row per host, showing its most suspicious rank' : ''),
    el('div', { class: 'hm-frame' }, cols, wrap), legend(M, smin, smax, color, headPos >= 0), list);

  // Keep the scroll position across re-renders; on first sight bring the
  // named straggler (or the selected rank) into view.
  const key = `${sr.job_id}|${byHost}|${o.sort}|${metric}`;
  const want = selRow >= 0 ? selRow : headRow;
  if (scrollMemo.has(key) && scrollMemo.get(key).rank === o.rank) wrap.scrollTop = scrollMemo.get(key).top;
  else if (want >= 0 && (want + 1) * rowH > wrap.clientHeight) wrap.scrollTop = Math.max(0, want * rowH - wrap.clientHeight / 2);
  wrap.addEventListener('scroll', () => scrollMemo.set(key, { top: wrap.scrollTop, rank: o.rank }));
  scrollMemo.set(key, { top: wrap.scrollTop, rank: o.rank });
}

function seg(label, opts, cur, onpick, name) {
  return el('div', { class: 'seg', role: 'group', 'aria-label': label },
    opts.map(([v, l]) => el('button', { class: v === cur ? 'on' : null, 'aria-pressed': v === cur ? 'true' : 'false', [`data-${name}`]: v, onclick: () => onpick(v) }, l)));
}

function controls(o, hasHosts, R, sortName) {
  return el('div', { class: 'hm-head' },
    el('span', { class: 'muted' }, 'colour'),
    seg('heatmap metric', Object.entries(METRICS).map(([k, m]) => [k, m.label]), METRICS[o.metric] ? o.metric : 'late', (v) => go({ metric: v === 'late' ? null : v }), 'metric'),
    el('span', { class: 'muted' }, 'order'),
    seg('row order', [['rank', 'rank id'], ['worst', `most behind first (${short(sortName)})`]], o.sort === 'worst' ? 'worst' : 'rank', (v) => go({ hsort: v === 'rank' ? null : v }), 'sort'),
    hasHosts ? [el('span', { class: 'muted' }, 'rows'),
      seg('rows', [['ranks', `ranks (${fmtInt(R)})`], ['hosts', 'hosts']], o.rows === 'hosts' ? 'hosts' : 'ranks', (v) => go({ rows: v === 'ranks' ? null : v }), 'rows')] : null);
}

function legend(M, smin, smax, color, named) {
  const W = 200;
  const H = 10;
  const c = el('canvas', { width: W, height: H, style: `width:${W}px;height:${H}px;border-radius:2px` });
  const g = c.getContext('2d');
  for (let i = 0; i < W; i++) { g.fillStyle = color(smin + ((smax - smin) * i) / (W - 1)); g.fillRect(i, 0, 1, H); }
  return el('div', { class: 'hm-foot' }, el('span', {}, `${M.label} (${M.unit})`),
    el('span', { class: 'mono' }, fmtNum(smin, 1)), c, el('span', { class: 'mono' }, fmtNum(smax, 1)),
    M.ramp === 'div' ? el('span', { class: 'muted' }, 'red = behind') : null,
    named ? el('span', {}, el('span', { class: 'badge leader' }, '▶ named straggler'), ' outlined') : el('span', { class: 'muted' }, 'no rank named'));
}
