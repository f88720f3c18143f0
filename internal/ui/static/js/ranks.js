// Rank drill-down: one rank against the frontier. The window report has
// per-rank data only as window sums (lag, lead counts, mean stage time),
// so the per-step view asks the report API for one step at a time
// (from=to=step, no reference) and reads that step's rank row: its stage
// durations d[t,r,·] and its slack F − P at each boundary. That is one
// request per step; an API returning a rank's step series would make it
// one request (see the note in the panel).
import { el, card, showTip, hideTip, tipTable } from './dom.js';
import { cachedJSON, reportPath } from './api.js';
import { fmtMs, fmtDelta, fmtInt, short, stageColor } from './format.js';
import { rankMatrix } from './heatmap.js';
import { go, withChanges } from './state.js';

const SPANS = [8, 16, 32];

export function rankCard(ctx) {
  const { sr, rank } = ctx;
  const mx = rankMatrix(sr);
  const i = mx.ranks.findIndex((r) => String(r.rank) === String(rank));
  if (i < 0) {
    return card(`Rank ${rank}`, 'not in this window', el('p', { class: 'muted' }, `Rank ${rank} has no data in steps ${sr.first_step}–${sr.last_step}${ctx.group ? ' of role group ' + ctx.group : ''}. `,
      el('button', { class: 'btn', onclick: () => go({ rank: null }) }, 'close')));
  }
  const rs = mx.ranks[i];
  if (!mx.present[i]) {
    return card(`Rank ${rs.rank}${rs.host ? ' · ' + rs.host : ''}`, 'no data in this window', el('p', { class: 'muted' },
      `Rank ${rs.rank} sent no stage vector for steps ${fmtInt(sr.first_step)}–${fmtInt(sr.last_step)} (it is among the missing ranks). `,
      el('button', { class: 'btn', onclick: () => go({ rank: null }) }, 'close')));
  }
  const n = mx.steps[i];
  const S = mx.S;
  const ev = sr.stage_evidence || [];
  // The stage where this rank falls furthest behind the typical rank.
  let worst = 0;
  for (let s = 1; s < S; s++) if (mx.m.late[i][s] > mx.m.late[i][worst]) worst = s;
  const focus = mx.stages.indexOf(ctx.stage) >= 0 ? mx.stages.indexOf(ctx.stage) : worst;
  const late = mx.m.late[i][focus];
  const leads = (rs.lead_count || [])[focus] || 0;
  const sentence = late > 0.5
    ? `Rank ${rs.rank} reaches the end of ${mx.stages[focus]} ${fmtMs(late)}/step later than the typical rank and sets the frontier there on ${leads} of ${n} steps.`
    : `Rank ${rs.rank} is not behind the typical rank at ${mx.stages[focus]} (${fmtDelta(late)}/step); it sets the frontier there on ${leads} of ${n} steps.`;
  const finalLeads = (sr.step_series || []).filter((p) => p.leader_rank === rs.rank).length;
  const table = el('table', { class: 't rank-table' },
    el('thead', {}, el('tr', {}, ['stage', 'own time', 'typical rank', 'behind typical', 'slack', 'sets frontier'].map((h, k) =>
      el('th', { scope: 'col', class: k ? 'num' : null }, h)))),
    el('tbody', {}, mx.stages.map((s, k) => el('tr', { class: k === focus ? 'selected' : null, 'data-stage': s },
      el('th', { scope: 'row' }, el('span', { class: 'sw', style: `background:${stageColor(s, k)}` }), ' ', short(s)),
      el('td', { class: 'num' }, fmtMs(mx.m.stage[i][k])),
      el('td', { class: 'num muted' }, ev[k] ? fmtMs(ev[k].typical_stage_ms) : '—'),
      el('td', { class: 'num' + (mx.m.late[i][k] > 0.5 ? ' bad' : '') }, fmtDelta(mx.m.late[i][k])),
      el('td', { class: 'num' }, fmtMs(mx.m.lag[i][k])),
      el('td', { class: 'num' }, `${(rs.lead_count || [])[k] || 0} / ${n}`)))));
  const steps = el('div', { class: 'rank-steps', 'aria-live': 'polite' });
  const body = [
    el('p', { class: 'rank-sentence' }, sentence),
    el('div', { class: 'scroll-x' }, table),
    el('p', { class: 'muted small' }, `Window sums over steps ${fmtInt(sr.first_step)}–${fmtInt(sr.last_step)} (${n} steps reported by this rank). `,
      `It is the latest rank at the step's final boundary on ${finalLeads} of ${sr.num_steps} steps (a step-closing collective makes that boundary a near-tie, so the stage boundaries above say more).`),
    steps,
  ];
  const c = card(`Rank ${rs.rank}${rs.host ? ' · ' + rs.host : ''}`, 'drill-down: this rank against the frontier',
    el('button', { class: 'btn close', 'aria-label': 'close the rank drill-down', onclick: () => go({ rank: null }) }, '× close'), body);
  c.id = 'rank-view';
  c.dataset.rank = rs.rank;
  loadSteps(steps, ctx, rs, focus);
  return c;
}

// loadSteps fetches single-step reports for a span of steps ending at the
// picked step (or the window's end) and draws the rank against the
// frontier at each.
async function loadSteps(host, ctx, rs, focus) {
  const { sr } = ctx;
  const span = SPANS.includes(Number(ctx.params.get('span'))) ? Number(ctx.params.get('span')) : SPANS[0];
  const all = (sr.step_series || []).map((p) => p.step);
  let end = all.length - 1;
  const pick = Number(ctx.params.get('step'));
  if (ctx.params.has('step')) {
    const k = all.findIndex((s) => s >= pick);
    if (k >= 0) end = Math.min(all.length - 1, k + Math.floor(span / 2));
  }
  const chosen = all.slice(Math.max(0, end - span + 1), end + 1);
  const head = el('div', { class: 'rank-steps-head' },
    el('h3', {}, `Per step: rank ${rs.rank} vs the frontier, steps ${fmtInt(chosen[0])}–${fmtInt(chosen[chosen.length - 1])}`),
    el('div', { class: 'seg', role: 'group', 'aria-label': 'steps to load' }, SPANS.map((k) =>
      el('button', { class: k === span ? 'on' : null, 'aria-pressed': k === span ? 'true' : 'false', onclick: () => go({ span: k === SPANS[0] ? null : k }) }, `${k} steps`))));
  const status = el('p', { class: 'muted small loading-line' }, `Loading ${chosen.length} single-step reports…`);
  const note = el('p', { class: 'muted small api-note' },
    'The job report carries per-rank data only as window sums, so each step here is its own report request (from=to=step, no_reference). ',
    'A per-rank step series in the API (e.g. the rank\'s d[t,r,·] and slack for a step range) would make this one request and allow longer spans.');
  host.replaceChildren(head, status, note);
  const base = withChanges(new URLSearchParams(), { no_reference: 'true', group: ctx.group || null });
  const out = new Array(chosen.length);
  let next = 0;
  let failed = null;
  const worker = async () => {
    while (next < chosen.length && !failed) {
      const k = next++;
      const q = withChanges(base, { from: chosen[k], to: chosen[k] });
      try {
        out[k] = await cachedJSON(reportPath(ctx.id, q), ctx.signal);
      } catch (e) {
        if (e.name === 'AbortError') return;
        failed = e;
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  if (ctx.signal && ctx.signal.aborted) return;
  if (failed) {
    status.replaceWith(el('p', { class: 'error-line' }, `Could not load the per-step reports: ${failed.message}`, failed.field ? ` (field: ${failed.field})` : ''));
    return;
  }
  const rows = [];
  for (let k = 0; k < chosen.length; k++) {
    const rep = out[k];
    const g = (rep.groups || []).find((x) => !ctx.group || x.group === ctx.group) || (rep.groups || [])[0];
    const one = g && g.report;
    const me = one && (one.ranks || []).find((r) => r.rank === rs.rank);
    const pt = one && (one.step_series || [])[0];
    if (!me || !pt || !(me.total_ms > 0)) { rows.push({ step: chosen[k], missing: true }); continue; }
    rows.push({ step: chosen[k], d: me.mean_stage_ms, slack: me.lag_ms, a: pt.advance_ms, F: pt.exposed_ms, stages: one.stages });
  }
  status.replaceWith(stepBars(rows, rs, focus));
}

function stepBars(rows, rs, focus) {
  const ok = rows.filter((r) => !r.missing);
  if (!ok.length) return el('p', { class: 'muted' }, 'This rank reported none of these steps.');
  const stages = ok[0].stages;
  const maxT = Math.max(...ok.map((r) => Math.max(r.F, r.d.reduce((a, b) => a + b, 0))), 1);
  const pct = (v) => `${(100 * v) / maxT}%`;
  const bar = (vals, cls, title) => el('div', { class: 'sbar ' + cls, title }, vals.map((v, s) =>
    el('span', { class: 'seg-' + s + (s === focus ? ' focus' : ''), style: `width:${pct(Math.max(0, v))};background:${stageColor(stages[s], s)}` })));
  const table = el('div', { class: 'step-bars', role: 'table', 'aria-label': `rank ${rs.rank} stage durations vs frontier advances per step` },
    el('div', { class: 'sb-row sb-head', role: 'row' }, el('span', { role: 'columnheader' }, 'step'), el('span', { role: 'columnheader' },
      `rank ${rs.rank} (top) vs frontier advances (bottom), ms`), el('span', { role: 'columnheader', class: 'num' }, `${short(stages[focus])} slack`)),
    rows.map((r) => {
      if (r.missing) return el('div', { class: 'sb-row missing', role: 'row', 'data-step': r.step }, el('span', {}, fmtInt(r.step)), el('span', { class: 'muted' }, 'no vector from this rank'), el('span', {}));
      const row = el('div', { class: 'sb-row', role: 'row', 'data-step': r.step },
        el('span', { class: 'mono', role: 'cell' }, fmtInt(r.step)),
        el('div', { class: 'sb-bars', role: 'cell' }, bar(r.d, 'rank', `rank ${rs.rank}`), bar(r.a, 'frontier', 'frontier')),
        el('span', { class: 'num' + (r.slack[focus] < 0.05 ? ' bad' : ''), role: 'cell',
          title: r.slack[focus] < 0.05 ? 'this rank sets the frontier here' : 'how far behind the frontier this rank is at the end of the stage' },
        r.slack[focus] < 0.05 ? 'sets F' : fmtMs(r.slack[focus])));
      row.addEventListener('mousemove', (ev) => showTip(ev, tipTable(`step ${r.step}`, stages.map((s, k) => [short(s), `${fmtMs(r.d[k])} · F +${fmtMs(r.a[k])} · slack ${fmtMs(r.slack[k])}`]),
        `rank total ${fmtMs(r.d.reduce((a, b) => a + b, 0))} · frontier ${fmtMs(r.F)}`)));
      row.addEventListener('mouseleave', hideTip);
      return row;
    }));
  return table;
}
