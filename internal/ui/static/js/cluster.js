// The cluster page (#/cluster): the incidents open now across every job
// (GET /api/v1/incidents?state=open and ?state=recovering), those
// resolved within the period, and the fleet view (GET /api/v1/hosts): the
// hosts and links that were the stated cause of incidents, by how many
// incidents and how much time they cost, over a period. The same machine
// in incidents of different jobs is evidence about the machine.
//
// URL: period = 1h | 24h | 7d | 30d | all (default 24h); fsort =
// incidents | lost | ranks (default incidents; ranks: the time lost
// across all ranks, what a slow rank of a large job costs).
//
// The period goes to the API as a duration back from the server's now
// (since=24h), so the browser's clock does not matter.
import { el, card } from './dom.js';
import { cachedJSON, incidentsPath, hostsPath } from './api.js';
import { fmtInt, fmtDate } from './format.js';
import { go } from './state.js';
import { incidentTable, fmtSeconds, categoryText, incidentLink } from './incidents.js';

const PERIODS = [['1h', 3600], ['24h', 86400], ['7d', 7 * 86400], ['30d', 30 * 86400], ['all', 0]];
const DEFAULT_PERIOD = '24h';
const RESOLVED_LIMIT = 200;


// periodOf reads the URL's period; since is the API's since: a duration,
// or 0 (the beginning) for all time.
function periodOf(params) {
  const want = params.get('period') || DEFAULT_PERIOD;
  const p = PERIODS.find(([k]) => k === want) || PERIODS.find(([k]) => k === DEFAULT_PERIOD);
  return { key: p[0], seconds: p[1], since: p[1] ? p[0] : '0' };
}

// loadCluster: the open list is required (it fails the page); the
// resolved list and the fleet rows may each fail on their own.
export async function loadCluster(route, signal, fresh) {
  const per = periodOf(route.params);
  const soft = (p) => p.then((v) => ({ v }), (e) => {
    if (e.name === 'AbortError') throw e;
    return { e };
  });
  const [open, rec, res, hosts] = await Promise.all([
    cachedJSON(incidentsPath({ state: 'open' }), signal, fresh),
    soft(cachedJSON(incidentsPath({ state: 'recovering' }), signal, fresh)),
    soft(cachedJSON(incidentsPath({ state: 'resolved', limit: RESOLVED_LIMIT, since: per.since }), signal, fresh)),
    soft(cachedJSON(hostsPath(per.since), signal, fresh)),
  ]);
  const unresolved = [...(open.incidents || []), ...((rec.v && rec.v.incidents) || [])]
    .sort((a, b) => ((b.opened || {}).wall_ns || 0) - ((a.opened || {}).wall_ns || 0));
  return { per, unresolved, truncated: !!(open.truncated || (rec.v && rec.v.truncated)), recErr: rec.e || null, resolved: res, hosts };
}

export function clusterSig(m) {
  return JSON.stringify([m.per.key, m.unresolved.map((i) => [i.id, i.state, (i.updated || {}).wall_ns]),
    m.resolved.v ? (m.resolved.v.incidents || []).map((i) => i.id) : 'e', m.hosts.v ? m.hosts.v.hosts : 'e']);
}

export function renderCluster(main, route, m) {
  const p = route.params;
  const fsort = ['lost', 'ranks'].includes(p.get('fsort')) ? p.get('fsort') : 'incidents';
  const periodSel = el('div', { class: 'winsel', role: 'group', 'aria-label': 'period' },
    el('span', { class: 'lbl' }, 'Period'),
    el('div', { class: 'seg' }, PERIODS.map(([k]) => el('button', { type: 'button', class: k === m.per.key ? 'on' : null, 'data-period': k,
      onclick: () => go({ period: k === DEFAULT_PERIOD ? null : k }) }, k === 'all' ? 'all time' : `last ${k}`))));
  const open = m.unresolved;
  const resolved = m.resolved.v ? m.resolved.v.incidents || [] : null;
  const jobs = new Set(open.map((i) => i.job));
  main.replaceChildren(
    el('div', { class: 'jobhead' }, el('div', { class: 'title' }, el('h1', {}, 'Cluster'),
      el('span', { class: 'muted meta' }, `${fmtInt(open.length)} open incident${open.length === 1 ? '' : 's'} in ${fmtInt(jobs.size)} job${jobs.size === 1 ? '' : 's'}`)),
    el('div', { class: 'controls' }, periodSel)),
    el('section', { class: 'card', id: 'open-incidents', 'aria-labelledby': 'open-title' },
      el('h2', { id: 'open-title' }, 'Open incidents', el('span', { class: 'sub' }, 'every job’s unresolved slowdowns, newest first')),
      m.recErr ? el('p', { class: 'error-line' }, `Cannot list the recovering incidents: ${m.recErr.message}`) : null,
      m.truncated ? el('p', { class: 'note' }, 'More open incidents exist than the server lists at once: the newest are shown.') : null,
      open.length ? incidentTable(open, { job: true, cls: 'inc-open-table', caption: 'open incidents' }) : el('p', { class: 'muted inc-none' }, 'No open incidents: every job runs at its healthy pace.')),
    fleetCard(m, fsort),
    el('section', { class: 'card', id: 'resolved-incidents', 'aria-labelledby': 'resolved-title' },
      el('h2', { id: 'resolved-title' }, 'Resolved in the period', el('span', { class: 'sub' }, m.per.seconds ? `updated in the last ${m.per.key}` : 'all time')),
      m.resolved.e ? el('p', { class: 'error-line' }, `Cannot list the resolved incidents: ${m.resolved.e.message}`)
        : resolved.length ? [m.resolved.v.truncated ? el('p', { class: 'note' }, `The newest ${fmtInt(resolved.length)} shown; more were resolved in the period.`) : null,
          incidentTable(resolved, { job: true, cls: 'inc-resolved-table', caption: 'resolved incidents' })] : el('p', { class: 'muted' }, 'None.')));
}

// targetWords names a fleet row: "host node-000", "link 4 → 5 in job J".
function targetWords(r) {
  const l = String(r.target || '').match(/^link:(\d+)-(\d+)(?:@(.+))?$/);
  if (l) return el('span', {}, `link ${l[1]} → ${l[2]}`, l[3] ? el('span', { class: 'muted' }, ` in ${l[3]}`) : null);
  if (r.host) return el('span', {}, 'host ', el('b', { class: 'mono' }, r.host));
  return el('span', { class: 'mono' }, r.target);
}

function fleetCard(m, fsort) {
  const head = (sub) => el('h2', { id: 'fleet-title' }, 'Fleet', el('span', { class: 'sub' }, sub));
  if (m.hosts.e) {
    return el('section', { class: 'card', id: 'fleet', 'aria-labelledby': 'fleet-title' }, head('hosts and links by incidents'),
      el('p', { class: 'error-line' }, `Cannot load the fleet view: ${m.hosts.e.message}`));
  }
  const rows = (m.hosts.v.hosts || []).slice();
  const key = { incidents: (r) => r.incidents || 0, lost: (r) => r.lost_seconds || 0, ranks: (r) => r.lost_rank_seconds || 0 };
  const order = [fsort, ...['incidents', 'lost', 'ranks'].filter((k) => k !== fsort)];
  rows.sort((a, b) => order.reduce((d, k) => d || key[k](b) - key[k](a), 0) || String(a.target).localeCompare(String(b.target)));
  const maxLost = Math.max(1e-9, ...rows.map((r) => r.lost_seconds || 0));
  const th = (key, label, num) => el('th', { scope: 'col', class: num ? 'num' : null, 'aria-sort': fsort === key ? 'descending' : 'none' },
    el('button', { class: 'sort' + (fsort === key ? ' on' : ''), 'data-fsort': key, title: `sort by ${label}`, onclick: () => go({ fsort: key === 'incidents' ? null : key }) }, label, fsort === key ? ' ↓' : ''));
  return el('section', { class: 'card', id: 'fleet', 'aria-labelledby': 'fleet-title' },
    head(`the hosts and links stated as the cause of incidents ${m.per.seconds ? 'in the last ' + m.per.key : 'of all time'}: the same machine across jobs points at the machine`),
    rows.length
      ? el('div', { class: 'scroll-x' }, el('table', { class: 't fleet' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'host or link'), th('incidents', 'incidents', true), el('th', { scope: 'col' }, 'jobs'),
          th('lost', 'lost time', true), th('ranks', 'across ranks', true), el('th', { scope: 'col' }, 'cause kinds'),
          el('th', { scope: 'col' }, 'last'), el('th', { scope: 'col' }, 'incidents'))),
        el('tbody', {}, rows.map((r) => el('tr', { 'data-target': r.target, class: r.jobs && r.jobs.length > 1 ? 'fleet-multi' : null },
          el('td', {}, targetWords(r), r.jobs && r.jobs.length > 1 ? el('span', { class: 'badge leader', title: 'the cause in more than one job' }, ` ${r.jobs.length} jobs`) : null),
          el('td', { class: 'num fleet-count' }, fmtInt(r.incidents)),
          el('td', { class: 'small' }, (r.jobs || []).map((j, i) => [i ? ', ' : '', el('a', { href: '#/jobs/' + encodeURIComponent(j), class: 'mono' }, j)])),
          el('td', { class: 'num bar-cell fleet-lost' }, el('span', { class: 'hbar' }, el('span', { class: 'fill', style: `display:block;width:${(100 * (r.lost_seconds || 0)) / maxLost}%;background:#b42318` })), fmtSeconds(r.lost_seconds)),
          el('td', { class: 'num fleet-ranks' }, fmtSeconds(r.lost_rank_seconds)),
          el('td', { class: 'small' }, (r.categories || []).map(categoryText).join(', ')),
          el('td', { class: 'mono small' }, fmtDate(r.last_ns)),
          el('td', { class: 'small' }, (r.incident_ids || []).slice(0, 6).map((id, i) => [i ? ' ' : '', incidentLink({ id })]),
            (r.incident_ids || []).length > 6 ? ` +${r.incident_ids.length - 6}` : ''))))))
      : el('p', { class: 'muted fleet-none' }, `No host or link was stated as a cause ${m.per.seconds ? 'in the last ' + m.per.key : 'yet'}.`));
}
