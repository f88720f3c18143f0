// The evidence behind the headline, in the paper's terms: the App. B
// labels with the reason each fired, the §6.2 baselines on the same
// window, the App. A contract findings, telemetry quality against its
// gates, and the configuration the report ran with.
import { el } from './dom.js';
import { fmtInt, fmtPct, fmtNum, fmtMs, stageChip, BASELINE_NAMES } from './format.js';

const AXIS_COLORS = {
  accounting: '#8c959f', model_fit: '#0072B2', direct_gain: '#009E73', device_evidence: '#56B4E9',
  ambiguity: '#E69F00', role_clarity: '#CC79A7', telemetry: '#D55E00',
};

function labelsList(sr) {
  const labels = sr.labels || [];
  if (!labels.length) return el('p', { class: 'muted' }, 'No labels emitted.');
  return el('ul', { class: 'labels' }, labels.map((l) => {
    const ax = String(l.axis || '').toLowerCase().replace(/[\s-]+/g, '_');
    return el('li', { class: 'label', 'data-label': l.name, style: `border-left-color:${AXIS_COLORS[ax] || '#8c959f'}` },
      el('div', { class: 'top' }, el('span', { class: 'nm' }, l.name), el('span', { class: 'axis' }, l.axis || ''), l.stage ? stageChip(l.stage, sr.stages) : null),
      l.reason ? el('div', { class: 'why' }, l.reason) : null);
  }));
}

function baselines(sr) {
  const stages = sr.stages || [];
  const rows = [{ method: 'StageFrontier (frontier shares)', top1: sr.top1, top2: sr.top2, routing: sr.routing, total_ms: sr.exposed_ms, sf: true }]
    .concat(sr.baselines || []);
  return el('table', { class: 't baselines' },
    el('thead', {}, el('tr', {}, el('th', {}, 'method'), el('th', {}, 'top-1'), el('th', {}, 'top-2'), el('th', { class: 'num' }, 'set'),
      el('th', { class: 'num', title: 'what the summary claims the window costs, relative to the exposed makespan (Propositions 1–2)' }, 'claimed / exposed'))),
    el('tbody', {}, rows.map((b) => {
      const agree = b.sf || b.top1 === sr.top1;
      return el('tr', { class: b.sf ? 'sf' : null },
        el('td', {}, BASELINE_NAMES[b.method] || b.method),
        el('td', { class: agree ? null : 'diff', title: agree ? null : 'disagrees with the frontier top-1' }, b.top1 ? stageChip(b.top1, stages) : '—', agree ? '' : ' ≠'),
        el('td', {}, (b.top2 || []).map((s) => [stageChip(s, stages), ' '])),
        el('td', { class: 'num', title: (b.routing || []).join(', ') }, String((b.routing || []).length)),
        el('td', { class: 'num' }, sr.exposed_ms > 0 && b.total_ms != null ? '×' + fmtNum(b.total_ms / sr.exposed_ms, 2) : '—'));
    })));
}

function quality(sr) {
  const q = sr.quality || {};
  const cfg = sr.config || {};
  const qi = (k, v, bad, title) => el('div', { class: 'q' + (bad ? ' bad' : ''), title: title || null }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v));
  const missing = q.missing_ranks || [];
  return el('div', { class: 'qgrid' },
    qi('missing ranks', missing.length ? missing.slice(0, 8).join(', ') + (missing.length > 8 ? ` +${missing.length - 8}` : '') : '0', missing.length > (cfg.max_missing_ranks || 0)),
    qi('missing cells', fmtInt(q.missing_cells), q.missing_cells > 0),
    qi('max closure share', fmtPct(q.max_closure_share), cfg.closure_residual_share != null && q.max_closure_share > cfg.closure_residual_share, `gate ${fmtPct(cfg.closure_residual_share)}`),
    qi('max overlap share', fmtPct(q.max_overlap_share), cfg.overlap_error_share != null && q.max_overlap_share > cfg.overlap_error_share, `gate ${fmtPct(cfg.overlap_error_share)}`),
    qi('dropped / nested', `${fmtInt(q.dropped)} / ${fmtInt(q.nested)}`, q.dropped > 0 || q.nested > 0),
    qi('event samples', `${fmtInt(q.event_samples)}${q.event_samples ? ' · ' + fmtPct(q.event_ready_ratio) + ' ready' : ''}`,
      q.event_samples > 0 && (q.event_samples < (cfg.min_event_samples || 0) || q.event_ready_ratio < (cfg.event_ready_ratio || 0))),
    qi('role groups', fmtInt(q.role_groups), q.role_groups > 1),
    qi('telescope error', fmtMs(sr.telescope_err_ms), sr.telescope_err_ms > 1e-6 * (sr.exposed_ms || 1), 'Theorem 1: Σ advances − exposed, should be round-off'),
    qi('leader switches', `${fmtInt(sr.leader_switches)} (${fmtPct(sr.leader_switch_rate)})`, sr.leader_switch_rate > (cfg.leader_switch_rate || 1)));
}

function config(sr) {
  const cfg = sr.config || {};
  return el('dl', { class: 'config' }, Object.entries(cfg).map(([k, v]) => [el('dt', {}, k), el('dd', { class: 'mono' }, String(v))]));
}

export function detailsCard(sr, notes) {
  const contract = sr.contract || [];
  const section = (title, open, ...body) => el('details', { class: 'detail', open: open || null }, el('summary', {}, title), body);
  return el('section', { class: 'card details-card', 'aria-labelledby': 'details-title' },
    el('h2', { id: 'details-title' }, 'Evidence', el('span', { class: 'sub' }, 'labels, baselines, contract and telemetry quality (the paper\'s notation)')),
    section(`Labels (${(sr.labels || []).length})`, true, labelsList(sr)),
    section('Baselines on the same window (§6.2)', true, el('div', { class: 'scroll-x' }, baselines(sr))),
    section(`Contract findings (${contract.length})`, contract.length > 0,
      contract.length ? el('ul', { class: 'findings' }, contract.map((c) => el('li', {}, el('b', {}, c.check), ': ', c.detail))) : el('p', { class: 'muted' }, 'No findings.')),
    section('Telemetry quality', true, quality(sr)),
    notes && notes.length ? section(`Notes (${notes.length})`, true, el('ul', { class: 'findings' }, notes.map((n) => el('li', {}, n)))) : null,
    section('Configuration', false, config(sr)));
}
