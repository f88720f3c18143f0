// The incident page (#/incidents/<id>): one slowdown of one job, from
// GET /api/v1/incidents/<id>. Top to bottom: the plain-language headline
// with its state, since when, the time it cost and the confidence; the
// timeline (incidentchart.js); the cause chain of the stated cause, one
// row per layer with the engine, its evidence, confidence and reason;
// every competing hypothesis side by side with what supports and what
// argues against it, and the engines' contradictions (never hidden);
// what to do; what laggard is still waiting for; links into each engine
// view on the incident's windows; the evidence, each with its own view;
// the audit log; and the same machine in other jobs' incidents.
import { el, card } from './dom.js';
import { cachedJSON, incidentPath, incidentsPath } from './api.js';
import { fmtMs, fmtInt, fmtTime, fmtDate, fmtDur } from './format.js';
import { jobHref, incidentHref } from './state.js';
import {
  stateBadge, confBadge, causeText, lostText, sinceText, slowerText, ago, scopeText, categoryText, chainRows, targetText, targetKey,
  engineName, engineColor, kindText, requestText, requestTerm, viewHref, windowLinks, incidentTable, ENGINES, JOB_LIMIT,
} from './incidents.js';
import { drawIncidentChart, chartLegend } from './incidentchart.js';

// loadIncident reads the incident, and beside it the job (its name) and
// the job's other incidents; only the incident itself may fail the page.
export async function loadIncident(route, signal, fresh) {
  const inc = await cachedJSON(incidentPath(route.id), signal, fresh);
  const soft = (p) => p.catch((e) => {
    if (e.name === 'AbortError') throw e;
    return null;
  });
  const [job, others] = await Promise.all([
    soft(cachedJSON(`jobs/${encodeURIComponent(inc.job)}`, signal, false)),
    soft(cachedJSON(incidentsPath({ job: inc.job, limit: JOB_LIMIT }), signal, fresh)),
  ]);
  return { inc, job, others: (others && others.incidents) || null };
}

export function incidentSig(m) {
  const i = m.inc;
  return `${i.id}:${i.state}:${(i.updated || {}).wall_ns}:${(i.evidence || []).length}:${(i.audit || []).length}:${(i.waiting || []).length}`;
}

function fact(k, ...v) {
  return el('div', { class: 'fact' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v));
}

export function renderIncident(main, route, model) {
  const inc = model.inc;
  const evidence = inc.evidence || [];
  const byId = new Map(evidence.map((e) => [e.id, e]));
  const chart = el('div', { class: 'chart inc-chart', id: 'inc-timeline' });
  const parts = [
    head(inc, model.job),
    summary(inc),
    card('Timeline', `step time on the wall clock · the windows before, during and after · below, every piece of evidence by engine and every action laggard took (hover for the text, click a finding to open its view)`,
      chartLegend(inc), chart),
    chainCard(inc, byId),
    hypothesesCard(inc, byId),
    el('div', { class: 'grid' }, recommendationsCard(inc), waitingCard(inc)),
    linksCard(inc),
    evidenceCard(inc),
    auditCard(inc),
  ];
  if ((inc.related || []).length) parts.push(relatedCard(inc));
  if (model.others && model.others.length > 1) {
    parts.push(card(`Other incidents of ${inc.job}`, 'newest first', incidentTable(model.others, { current: inc.id, caption: `incidents of ${inc.job}` })));
  }
  parts.push(detailsCard(inc));
  main.replaceChildren(...parts);
  drawIncidentChart(chart, inc);
}

function head(inc, job) {
  const name = job && job.name && job.name !== inc.job ? job.name : null;
  return el('div', { class: 'jobhead inc-head' },
    el('div', { class: 'title' },
      el('h1', {}, 'Incident ', el('span', { class: 'mono' }, inc.id)),
      stateBadge(inc.state),
      el('span', { class: 'muted meta' }, 'in job ', el('a', { href: jobHref(inc.job), class: 'mono inc-job-link' }, inc.job), name ? ` · ${name}` : '',
        job && job.world_size ? ` · ${fmtInt(job.world_size)} ranks` : '',
        (inc.incarnations || []).length > 1 ? ` · spans launches ${inc.incarnations.map((n) => '#' + n).join(', ')}` : '')));
}

function summary(inc) {
  const o = inc.opened || {};
  const lost = inc.lost || {};
  const top = (inc.hypotheses || [])[0];
  const detected = inc.detected_ns > 0 && o.wall_ns > 0 ? inc.detected_ns - o.wall_ns : null;
  const stateText = {
    open: 'the job is still slow',
    recovering: 'the step time is back to normal; laggard waits out the hold-down before closing it (a relapse re-opens it)',
    resolved: {
      job_stopped: 'the job stopped reporting while it was slow',
      step_series: 'the step time came back without a clear change point, and stayed for the hold-down window',
    }[inc.resolved_by] || 'the job has been healthy for the hold-down window',
  }[inc.state] || '';
  return el('section', { class: 'card headline inc-summary state-' + inc.state, id: 'inc-summary', 'aria-label': 'incident summary' },
    el('p', { class: 'inc-headline headline-big' }, inc.headline || 'No summary yet.'),
    el('div', { class: 'facts' },
      fact('State', stateBadge(inc.state), el('span', { class: 'muted' }, ` ${stateText}`), inc.relapses ? el('span', { class: 'note inline' }, ` relapsed ${inc.relapses}×`) : null),
      fact('Since', el('span', { class: 'inc-since' }, sinceText(inc)),
        inc.state === 'resolved' && inc.resolved
          ? el('span', { class: 'muted' }, ` · until ${fmtTime(inc.resolved.wall_ns)} (step ${fmtInt(inc.resolved.step)}), ${fmtDur(inc.resolved.wall_ns - o.wall_ns)}`)
          : el('span', { class: 'muted' }, ` · ${ago(o.wall_ns)}`)),
      fact('Lost time', el('span', { class: 'inc-lost' }, lostText(lost)),
        lost.partial ? el('span', { class: 'muted', title: 'the step samples do not cover the whole incident' }, ' · so far (partial)') : null),
      fact('Confidence', confBadge(inc.confidence), top && top.reason ? el('span', { class: 'muted inc-conf-reason' }, ` · ${top.reason}`) : null),
      fact('Cause', el('span', { class: 'inc-cause' }, causeText(inc)), inc.category ? el('span', { class: 'muted' }, ` · ${categoryText(inc.category)}`) : null),
      fact('Where', el('span', { class: 'inc-scope' }, scopeText(inc.scope))),
      slowerText(inc) ? fact('Step time', slowerText(inc)) : null,
      detected != null && detected >= 0 ? fact('Detected', `${fmtDur(detected)} after the onset`) : null),
    (inc.contradictions || []).length
      ? el('div', { class: 'note inc-contradiction', role: 'note' }, el('b', {}, 'The engines disagree. '), inc.contradictions.join(' '),
        ' Contradicted evidence lowers the confidence; nothing is stated until it is resolved.')
      : null);
}

// chainCard: the stated cause's chain; without one the strongest
// hypothesis', marked as not stated.
function chainCard(inc, byId) {
  const hs = inc.hypotheses || [];
  const stated = hs.filter((h) => h.stated);
  if (!hs.length) {
    return card('Why', 'the cause chain', el('p', { class: 'muted inc-no-chain' }, 'No hypothesis yet: the engines have found nothing that points at a rank, link, host or operator.'));
  }
  const shown = stated.length ? stated : [hs[0]];
  return card('Why', 'the cause chain, from what the job sees (top) to what lies beneath: one row per layer, with the engine, its evidence, confidence and reason',
    el('div', { class: 'inc-chains' }, shown.map((h) => el('div', { class: 'inc-chain-block', 'data-target': targetKey(h.target) },
      el('div', { class: 'inc-chain-title' }, stated.length ? 'Cause: ' : 'Not stated — leading suspicion: ', el('b', {}, targetText(h.target)), ' ', confBadge(h.confidence),
        el('span', { class: 'muted small' }, ` · ${categoryText(h.category)} · ${(h.engines || []).map(engineName).join(', ')}`)),
      chainRows(h, [...byId.values()])))));
}

function evidenceList(ids, byId, cls) {
  const list = (ids || []).map((id) => byId.get(id) || { id, text: id, engine: '' });
  if (!list.length) return el('p', { class: 'muted small' }, 'none');
  return el('ul', { class: 'inc-ev-list ' + cls }, list.map((e) => el('li', { 'data-evidence': e.id },
    el('span', { class: 'sw', style: `background:${engineColor(e.engine)}` }), ' ', el('b', {}, engineName(e.engine)), ': ', e.text)));
}

function hypothesesCard(inc, byId) {
  const hs = inc.hypotheses || [];
  if (hs.length < 2 && !(inc.contradictions || []).length) {
    return hs.length
      ? card('Hypotheses', 'only one candidate cause', hypothesis(hs[0], byId))
      : card('Hypotheses', '', el('p', { class: 'muted' }, 'No candidate yet.'));
  }
  return card('Competing hypotheses', 'every candidate cause, side by side, with what supports it and what argues against it; none is dropped to make the story simpler',
    (inc.contradictions || []).length
      ? el('ul', { class: 'inc-contradictions' }, inc.contradictions.map((c) => el('li', {}, el('b', {}, 'Contradiction: '), c)))
      : null,
    el('div', { class: 'inc-hyps', style: `grid-template-columns: repeat(${Math.min(hs.length, 3)}, minmax(0, 1fr))` }, hs.map((h) => hypothesis(h, byId))));
}

function hypothesis(h, byId) {
  return el('div', { class: 'inc-hyp' + (h.stated ? ' stated' : ''), 'data-target': targetKey(h.target), 'data-stated': h.stated ? 'true' : 'false' },
    el('div', { class: 'inc-hyp-top' }, el('b', { class: 'inc-hyp-target' }, targetText(h.target)), ' ',
      h.stated ? el('span', { class: 'badge inc-stated' }, 'stated cause') : el('span', { class: 'badge inc-notstated' }, 'not stated'), ' ', confBadge(h.confidence)),
    el('p', { class: 'inc-hyp-reason' }, h.reason || ''),
    el('div', { class: 'small muted' }, `${categoryText(h.category)} · engines: ${(h.engines || []).map(engineName).join(', ') || '—'}`),
    el('div', { class: 'k' }, `Supports (${(h.support || []).length})`), evidenceList(h.support, byId, 'support'),
    el('div', { class: 'k' }, `Against (${(h.against || []).length})`), evidenceList(h.against, byId, 'against'));
}

function recommendationsCard(inc) {
  const rs = inc.recommendations || [];
  return card('What to do', rs.length ? '' : 'nothing yet',
    rs.length ? el('ol', { class: 'inc-recs' }, rs.map((r) => el('li', { 'data-for': r.for || '' }, r.text))) : el('p', { class: 'muted' }, 'No recommendation until a cause is clearer.'));
}

function waitingCard(inc) {
  const ws = inc.waiting || [];
  return card('Still waiting for', 'the evidence laggard asks the engines for next',
    ws.length
      ? el('ul', { class: 'inc-waiting' }, ws.map((w) => el('li', { 'data-kind': w.kind, 'data-asked': w.asked ? 'true' : 'false' },
        el('b', { title: requestTerm(w.kind) }, requestText(w.kind)), (w.ranks || []).length ? ` of rank${w.ranks.length > 1 ? 's' : ''} ${w.ranks.join(', ')}` : '',
        el('span', { class: 'badge ' + (w.asked ? 'route' : 'cocrit') }, w.asked ? 'asked' : 'not asked yet'),
        el('div', { class: 'small muted' }, w.reason))))
      : el('p', { class: 'muted inc-waiting-none' }, inc.state === 'resolved' ? 'Nothing: the incident is closed.' : 'Nothing: every engine that can answer has answered.'));
}

function linksCard(inc) {
  const links = windowLinks(inc);
  return card('Open in the engine views', 'each view opens on this incident’s windows',
    links.length
      ? el('ul', { class: 'inc-views' }, links.map((l) => el('li', { 'data-engine': l.engine },
        el('span', { class: 'sw', style: `background:${engineColor(l.engine)}` }),
        el('a', { href: l.href, class: 'inc-view-link', 'data-section': l.section }, l.label),
        el('span', { class: 'muted small' }, ` · ${l.detail}`))))
      : el('p', { class: 'muted' }, 'No window to open the views on yet.'));
}

function evidenceCard(inc) {
  const evs = inc.evidence || [];
  const rows = evs.map((e) => {
    const v = viewHref(e.view);
    const w = e.window || {};
    return el('tr', { 'data-evidence': e.id, 'data-engine': e.engine, class: 'sig-' + e.signal },
      el('td', { class: 'mono small' }, fmtTime(w.from_ns > 0 ? w.from_ns : e.at_ns)),
      el('td', { class: 'mono small' }, w.to_step > w.from_step ? `${fmtInt(w.from_step)}–${fmtInt(w.to_step)}` : w.from_step > 0 ? fmtInt(w.from_step) : '—'),
      el('td', {}, el('span', { class: 'sw', style: `background:${engineColor(e.engine)};margin-right:5px` }), engineName(e.engine)),
      el('td', { title: e.kind }, kindText(e.kind)),
      el('td', { class: 'inc-ev-text' }, e.text, e.reason ? el('div', { class: 'small muted' }, 'why: ', e.reason) : null,
        e.detail ? el('details', { class: 'inc-ev-detail' }, el('summary', { class: 'small muted' }, 'engine details'), el('pre', { class: 'mono small' }, JSON.stringify(e.detail, null, 1))) : null),
      el('td', {}, e.confidence ? confBadge(e.confidence) : el('span', { class: 'muted' }, '—')),
      el('td', {}, v ? el('a', { href: v.href, class: 'inc-ev-view', 'data-section': v.section, title: v.api }, 'open') : el('span', { class: 'muted' }, '—')));
  });
  return el('section', { class: 'card', 'aria-labelledby': 'inc-ev-title' },
    el('h2', { id: 'inc-ev-title' }, `Evidence (${fmtInt(evs.length)})`, el('span', { class: 'sub' }, 'every engine finding joined to this incident, in time order; “open” shows it in its engine view on its window')),
    el('div', { class: 'scroll-x' }, el('table', { class: 't inc-evidence' },
      el('thead', {}, el('tr', {}, ['when', 'steps', 'engine', 'what', 'finding', 'confidence', 'view'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows))));
}

function auditCard(inc) {
  const acts = inc.audit || [];
  return card(`Audit log (${fmtInt(acts.length)})`, 'every action laggard took or declined for this incident',
    acts.length
      ? el('div', { class: 'scroll-x' }, el('table', { class: 't inc-audit' },
        el('thead', {}, el('tr', {}, ['when', 'action', 'ranks', 'result', 'reference', 'what happened'].map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, acts.map((a) => el('tr', { 'data-kind': a.kind, 'data-result': a.result },
          el('td', { class: 'mono small' }, fmtTime(a.at_ns)),
          el('td', { title: requestTerm(a.kind) }, requestText(a.kind)),
          el('td', { class: 'mono small' }, (a.ranks || []).join(', ') || '—'),
          el('td', {}, el('span', { class: 'badge inc-result result-' + a.result }, a.result)),
          el('td', { class: 'mono small' }, a.ref || '—'),
          el('td', {}, a.text))))))
      : el('p', { class: 'muted' }, 'No action taken yet.'));
}

function relatedCard(inc) {
  return card('The same machine elsewhere', 'a host or link that was the cause in other jobs’ incidents is evidence about the machine, not the job',
    el('ul', { class: 'inc-related' }, inc.related.map((r) => el('li', { 'data-incident': r.incident },
      r.text, ' ', el('a', { href: incidentHref(r.incident) }, r.incident), el('span', { class: 'muted small' }, ` · ${r.job} · ${fmtDate(r.at_ns)} · lost ${fmtDur((r.lost_seconds || 0) * 1e9)}`)))));
}

// detailsCard: the identifiers, windows and the engines' terms.
function detailsCard(inc) {
  const w = inc.windows || {};
  const span = (s) => (s && (s.to_step > 0 || s.from_ns > 0)
    ? `steps ${fmtInt(s.from_step)}–${fmtInt(s.to_step)}${s.from_ns > 0 ? ` · ${fmtTime(s.from_ns)}–${fmtTime(s.to_ns)}` : ''}` : '—');
  const o = inc.opened || {};
  const rows = [
    ['id', inc.id], ['schema', inc.schema], ['job', inc.job], ['launch (incarnation)', String(inc.incarnation ?? 0)],
    ['opened', `${fmtDate(o.wall_ns)} · step ${fmtInt(o.step)}`], ['detected', fmtDate(inc.detected_ns)],
    ['updated', `${fmtDate((inc.updated || {}).wall_ns)} · step ${fmtInt((inc.updated || {}).step)}`],
    ['window before', span(w.before)], ['window during', span(w.during)], ['window after', span(w.after)],
    ['healthy / slow step', `${fmtMs(inc.healthy_ms)} / ${fmtMs(inc.slow_ms)}`],
    ['onset evidence', (inc.onset || []).join(', ') || '—'], ['relief evidence', (inc.relief || []).join(', ') || '—'],
    ['lost', `${fmtNum3(inc.lost && inc.lost.seconds)} s · ${fmtNum3(inc.lost && inc.lost.rank_seconds)} rank-s · ${fmtInt(inc.lost && inc.lost.steps)} steps${inc.lost && inc.lost.partial ? ' (partial)' : ''}`],
  ];
  return el('section', { class: 'card details-card', 'aria-labelledby': 'inc-details-title' },
    el('h2', { id: 'inc-details-title' }, 'Details', el('span', { class: 'sub' }, 'identifiers, windows and the engines behind the words')),
    el('details', { class: 'detail' }, el('summary', {}, 'Incident record'),
      el('dl', { class: 'config' }, rows.map(([k, v]) => [el('dt', {}, k), el('dd', { class: 'mono' }, v)]))),
    el('details', { class: 'detail' }, el('summary', {}, 'Engines'),
      el('dl', { class: 'config' }, Object.entries(ENGINES).map(([k, e]) => [el('dt', {}, e.name), el('dd', {}, `${e.what} (${k})`)]))));
}

const fmtNum3 = (x) => (x == null || !isFinite(x) ? '—' : String(Math.round(x * 1000) / 1000));
