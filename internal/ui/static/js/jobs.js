// The job list: every job with its current background diagnosis (the
// detector's headline: stage, straggler rank or why none, exposed step
// time, last change) and its open incident, sortable, each row linking
// to the job page.
import { el } from './dom.js';
import { cachedJSON, incidentsPath } from './api.js';
import { fmtInt, fmtMs, stageChip, withheldText, ts } from './format.js';
import { jobHref, incidentHref, clusterHref, go } from './state.js';
import { stateBadge, causeText } from './incidents.js';

const diag = (j) => j.diagnosis || null;
const head = (j) => (diag(j) && diag(j).headline) || null;

// Sort keys: each returns a comparable value (null sorts last).
const COLUMNS = [
  { key: 'id', label: 'job', val: (j) => j.id },
  { key: 'ranks', label: 'ranks', num: true, val: (j) => j.world_size },
  { key: 'steps', label: 'steps', num: true, val: (j) => (j.vectors > 0 ? j.last_step : null) },
  { key: 'stage', label: 'stage', val: (j) => (head(j) && head(j).stage) || null },
  // Named stragglers first, then withheld, then no diagnosis.
  { key: 'rank', label: 'straggler', val: (j) => (head(j) ? (head(j).rank >= 0 ? head(j).rank : 1e12) : null) },
  { key: 'exposed', label: 'exposed / step', num: true, val: (j) => (diag(j) && diag(j).exposed_ms > 0 ? diag(j).exposed_ms : null) },
  { key: 'change', label: 'last change', val: (j) => (diag(j) && diag(j).last_change ? diag(j).last_change.step : null) },
  { key: 'evaluated', label: 'evaluated', val: (j) => (diag(j) ? diag(j).evaluated_at : null) },
];
// Shown when the server has incidents: open ones first, then recovering.
const INCIDENT_COLUMN = { key: 'incident', label: 'incident', val: (j) => (j.incident ? (j.incident.state === 'open' ? 0 : 1) : null) };

// loadOpenIncidents never rejects: {list} of every unresolved incident,
// {missing} when the server has no incident routes, {error}.
export async function loadOpenIncidents(signal, fresh) {
  try {
    const [o, r] = await Promise.all(['open', 'recovering'].map((state) => cachedJSON(incidentsPath({ state }), signal, fresh)));
    return { list: [...(o.incidents || []), ...(r.incidents || [])] };
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    return e.status === 404 || e.status === 503 ? { missing: true } : { error: e };
  }
}

function incidentCell(j) {
  const i = j.incident;
  if (!i) return el('span', { class: 'muted' }, '—');
  return el('a', { href: incidentHref(i.id), class: 'inc-cell', title: i.headline || '' }, stateBadge(i.state), ' ', causeText(i));
}

function cmp(a, b) {
  if (a == null && b == null) return 0;
  if (a == null) return 1;
  if (b == null) return -1;
  return typeof a === 'number' && typeof b === 'number' ? a - b : String(a).localeCompare(String(b));
}

function straggler(j) {
  const d = diag(j);
  if (!d) return el('span', { class: 'muted' }, j.vectors > 0 ? 'not evaluated yet' : '—');
  if (d.error && !d.headline) return el('span', { class: 'badge bad', title: d.error }, 'error');
  const h = d.headline;
  if (h.rank >= 0) {
    return el('span', { class: 'badge leader', title: h.withheld_why || '' }, `rank ${h.rank}`, h.host ? ` · ${h.host}` : '');
  }
  const tie = (h.tie_set || []).length ? ` {${h.tie_set.join(', ')}}` : '';
  return el('span', { class: 'withheld', title: h.withheld_why || '' }, 'none: ', withheldText(h.withheld), tie);
}

function lastChange(j) {
  const c = diag(j) && diag(j).last_change;
  if (!c) return el('span', { class: 'muted' }, '—');
  const up = c.kind === 'onset';
  const top = (c.stages || [])[0];
  return el('span', { class: 'change ' + c.kind, title: top ? `largest stage shift: ${top.stage} ${top.delta_ms > 0 ? '+' : ''}${top.delta_ms.toFixed(1)} ms/step` : '' },
    up ? '▲ ' : '▼ ', `${c.kind} @${fmtInt(c.step)} `, el('span', { class: 'mono' }, `${fmtMs(c.before_ms)} → ${fmtMs(c.after_ms)}`));
}

export function renderJobs(main, body, params, open) {
  const withIncidents = !!(open && open.list);
  // Each job's newest unresolved incident.
  const byJob = new Map();
  for (const i of (withIncidents ? open.list : [])) {
    const cur = byJob.get(i.job);
    if (!cur || (cur.state !== 'open' && i.state === 'open') || ((i.opened || {}).wall_ns > (cur.opened || {}).wall_ns && (cur.state === i.state))) byJob.set(i.job, i);
  }
  const jobs = (body.jobs || []).map((j) => (byJob.has(j.id) ? { ...j, incident: byJob.get(j.id) } : j));
  const columns = withIncidents ? [...COLUMNS.slice(0, 3), INCIDENT_COLUMN, ...COLUMNS.slice(3)] : COLUMNS;
  if (!jobs.length) {
    main.replaceChildren(el('section', { class: 'card empty' }, 'No jobs registered yet. Instrumented trainers register with ',
      el('code', {}, 'PUT /api/v1/jobs/{id}'), '.'));
    return;
  }
  const key = params.get('sort') || 'id';
  const col = columns.find((c) => c.key === key) || columns[0];
  const desc = params.get('dir') === 'desc';
  jobs.sort((a, b) => {
    const va = col.val(a);
    const vb = col.val(b);
    // Missing values stay last in both directions.
    if (va == null || vb == null) return cmp(va, vb) || a.id.localeCompare(b.id);
    return (desc ? -cmp(va, vb) : cmp(va, vb)) || a.id.localeCompare(b.id);
  });
  const th = (c) => {
    const on = c.key === col.key;
    const next = on && !desc ? 'desc' : 'asc';
    return el('th', { class: c.num ? 'num' : null, 'aria-sort': on ? (desc ? 'descending' : 'ascending') : 'none', scope: 'col' },
      el('button', { class: 'sort' + (on ? ' on' : ''), 'data-sort': c.key, onclick: () => go({ sort: c.key, dir: next }),
        title: `sort by ${c.label}` }, c.label, on ? (desc ? ' ↓' : ' ↑') : ''));
  };
  const rows = jobs.map((j) => {
    const href = jobHref(j.id, null);
    const d = diag(j);
    const h = head(j);
    return el('tr', { class: 'click', 'data-job': j.id, title: h ? h.text : '', onclick: (e) => { if (e.target.tagName !== 'A') location.hash = href; } },
      el('td', {}, el('a', { href, class: 'mono' }, j.id), j.name && j.name !== j.id ? el('div', { class: 'muted small' }, j.name) : null),
      el('td', { class: 'num' }, fmtInt(j.world_size)),
      el('td', { class: 'num' }, j.vectors > 0 ? `${fmtInt(j.first_step)}–${fmtInt(j.last_step)}` : el('span', { class: 'muted' }, 'no data')),
      withIncidents ? el('td', { class: 'incident' }, incidentCell(j)) : null,
      el('td', { class: 'stage' }, h && h.stage ? stageChip(h.stage) : el('span', { class: 'muted' }, '—')),
      el('td', { class: 'straggler' }, straggler(j)),
      el('td', { class: 'num' }, d && d.exposed_ms > 0 ? fmtMs(d.exposed_ms) : '—'),
      el('td', {}, lastChange(j)),
      el('td', { class: 'mono muted small' }, d ? ts(d.evaluated_at) : '—', d && d.error ? el('span', { class: 'badge bad', title: d.error }, ' error') : null));
  });
  main.replaceChildren(el('section', { class: 'card', 'aria-labelledby': 'jobs-title' },
    el('h2', { id: 'jobs-title' }, 'Jobs', el('span', { class: 'sub' }, `${jobs.length}${body.next ? '+' : ''} registered · diagnosis from the background evaluation of each job's default window`)),
    body.next ? el('p', { class: 'note' }, `Showing the first ${jobs.length} jobs (by id); more exist after ${body.next}.`) : null,
    withIncidents && open.list.length
      ? el('p', { class: 'inc-banner' }, el('b', {}, `${open.list.length} open incident${open.list.length === 1 ? '' : 's'}`),
        ` in ${byJob.size} job${byJob.size === 1 ? '' : 's'} · `, el('a', { href: clusterHref() }, 'see the cluster page'))
      : null,
    el('div', { class: 'scroll-x' }, el('table', { class: 't jobs' },
      el('thead', {}, el('tr', {}, columns.map(th))),
      el('tbody', {}, rows)))));
}
