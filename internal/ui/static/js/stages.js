// Stage shares of exposed time (§3 eq.2) with the routing set and top-1
// marked, and — when the window has a reference — reference vs current
// ms/step and the change, with the excess routing highlighted: a steady
// large stage and an exposed tail that changed are both visible.
import { el, showTip, hideTip, tipTable } from './dom.js';
import { fmtMs, fmtMsN, fmtDelta, fmtPct, stageColor, short, describe, withheldShort } from './format.js';
import { go } from './state.js';

export function stagesView(sr, cmp, opts) {
  const stages = sr.stages || [];
  const n = sr.num_steps || 1;
  const raw = !!sr.raw_only || !sr.share;
  const adv = sr.advance_ms || [];
  const posTotal = adv.reduce((a, b) => a + Math.max(0, b), 0) || 1;
  const share = stages.map((_, i) => (raw ? Math.max(0, adv[i]) / posTotal : sr.share[i] || 0));
  const routing = new Set(sr.routing || []);
  const cocrit = new Set(sr.co_critical_stages || []);
  const excess = new Set((cmp && cmp.excess_routing) || []);
  const evidence = new Map((sr.stage_evidence || []).map((e) => [e.stage, e]));
  const delta = new Map(((cmp && cmp.stages) || []).map((d) => [d.stage, d]));
  const maxShare = Math.max(...share, 0.0001);
  const maxDelta = Math.max(...[...delta.values()].map((d) => Math.abs(d.delta_ms)), 0.0001);
  const tau = (sr.config && sr.config.candidate_threshold) || 0.8;

  const marks = (s) => [
    s === opts.headStage ? el('span', { class: 'badge head', title: 'the stage the headline points at' }, '▶ headline') : null,
    s === sr.top1 ? el('span', { class: 'badge top1', title: 'largest share of exposed time' }, 'top-1') : null,
    routing.has(s) && s !== sr.top1 ? el('span', { class: 'badge route', title: `in the routing set (cumulative share ≥ τ=${tau})` }, 'routing') : null,
    cmp && s === cmp.excess_top1 ? el('span', { class: 'badge excess', title: 'rose most against the reference' }, 'excess top-1')
      : excess.has(s) ? el('span', { class: 'badge excess', title: 'in the excess routing set' }, 'excess') : null,
    cocrit.has(s) ? el('span', { class: 'badge cocrit', title: 'co-critical: fixing one may expose another (App. C)' }, '≈ co-critical') : null,
  ];
  const leaderCell = (s) => {
    const ev = evidence.get(s);
    if (!ev || !ev.leader) return '—';
    const l = ev.leader;
    if (l.rank >= 0) return el('button', { class: 'linkish', onclick: (e) => { e.stopPropagation(); go({ stage: s, rank: l.rank }); } }, `rank ${l.rank}`);
    return el('span', { class: 'muted', title: l.why || '' }, withheldShort(l.withheld));
  };
  const rows = stages.map((s, i) => {
    const d = delta.get(s);
    const ev = evidence.get(s);
    const color = stageColor(s, i);
    const sel = opts.stage === s;
    const tr = el('tr', { class: 'click' + (sel ? ' selected' : '') + (routing.has(s) ? ' routed' : '') + (excess.has(s) ? ' excess' : ''),
      'data-stage': s, 'aria-selected': sel ? 'true' : 'false',
      onclick: () => go({ stage: sel ? null : s }) },
      el('th', { scope: 'row' },
        el('button', { class: 'stage-btn', 'aria-pressed': sel ? 'true' : 'false', title: `${s} — ${describe(s)}\nclick: focus this stage in the heatmap` },
          el('span', { class: 'sw', style: `background:${color}` }), short(s)),
        el('div', { class: 'marks' }, marks(s))),
      el('td', { class: 'bar-cell' },
        el('div', { class: 'hbar' }, el('div', { class: 'fill', style: `width:${(100 * share[i]) / maxShare}%;background:${color}` })),
        el('span', { class: 'num' }, raw ? fmtMs(adv[i] / n) : fmtPct(share[i]))),
      el('td', { class: 'num' }, fmtMsN(adv[i] / n)),
      cmp ? [
        el('td', { class: 'num muted' }, d ? fmtMsN(d.ref_ms) : '—'),
        el('td', { class: 'delta-cell' + (d && d.delta_ms > 0 ? ' up' : ' down') },
          d ? el('div', { class: 'dbar' }, el('div', { class: 'fill', style: `width:${(50 * Math.abs(d.delta_ms)) / maxDelta}%;${d.delta_ms >= 0 ? 'left:50%' : 'right:50%'}` })) : null,
          el('span', { class: 'num' }, d ? fmtMsN(d.delta_ms, true) : '—')),
      ] : null,
      el('td', { class: 'num', title: 'exposed tail created in this stage: how much further the typical rank trails the frontier after it (ms/step)' },
        ev ? fmtMsN(ev.tail_ms, true) : '—'),
      el('td', { class: 'leader-cell' }, leaderCell(s)));
    tr.addEventListener('mousemove', (ev2) => showTip(ev2, stageTip(sr, i, d, ev)));
    tr.addEventListener('mouseleave', hideTip);
    return tr;
  });
  const summary = el('p', { class: 'sub-line' },
    raw ? el('span', { class: 'note inline' }, 'exposed time is below the floor: raw advances, no shares. ') : null,
    'Routing set ', el('b', {}, '{', (sr.routing || []).map(short).join(', '), '}'), ` reaches τ=${tau} of exposed time`,
    cmp ? [' · excess over the reference ', el('b', { class: 'excess-text' }, '{', (cmp.excess_routing || []).map(short).join(', '), '}'),
      cmp.material ? '' : ' (the change is not material)'] : ' · no reference window to compare with');
  return el('div', { class: 'stages' }, summary,
    el('div', { class: 'scroll-x' }, el('table', { class: 't stages-table' },
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col' }, 'stage'),
        el('th', { scope: 'col', title: 'Σ advance / Σ exposed (§3 eq.2)' }, raw ? 'advance' : 'share'),
        el('th', { scope: 'col', class: 'num', title: 'mean frontier advance per step in this window (ms)' }, 'ms/step'),
        cmp ? [el('th', { scope: 'col', class: 'num', title: 'mean frontier advance per step in the reference window (ms)' }, 'ref'),
          el('th', { scope: 'col', class: 'num', title: 'change against the reference (ms/step)' }, 'Δ')] : null,
        el('th', { scope: 'col', class: 'num', title: 'exposed tail created in the stage (ms/step): + a rank falls behind here, − the waiting ranks catch up' }, 'tail'),
        el('th', { scope: 'col' }, 'leader'))),
      el('tbody', {}, rows))));
}

function stageTip(sr, i, d, ev) {
  const n = sr.num_steps || 1;
  const rows = [['advance / step', fmtMs(sr.advance_ms[i] / n)]];
  if (sr.share && !sr.raw_only) rows.push(['share', fmtPct(sr.share[i])]);
  if (ev) rows.push(['typical rank own time', fmtMs(ev.typical_stage_ms)], ['typical lag behind frontier', fmtMs(ev.typical_lag_ms)], ['exposed tail', fmtDelta(ev.tail_ms)]);
  if (d) rows.push(['reference / step', fmtMs(d.ref_ms)], ['Δ / step', fmtDelta(d.delta_ms)], ['typical rank ref → cur', `${fmtMs(d.ref_typical_ms)} → ${fmtMs(d.cur_typical_ms)}`]);
  for (const [k, g] of Object.entries(sr.gain_ms || {})) rows.push([`gain vs ${k.replace('_', ' ')}`, fmtMs(((g || [])[i] || 0) / n)]);
  return tipTable(sr.stages[i], rows, ev && ev.leader ? ev.leader.why : null);
}
