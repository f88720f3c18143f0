// Incidents (issue 17): one diagnosis per slowdown across every engine.
// This module holds what the incident page (incident.js), the cluster
// page (cluster.js), the job page's incident card and the job list share:
// the plain words for states, engines, layers and requests; the links
// from a piece of evidence's API view (GET /api/v1/jobs/<id>/<view>?<window>)
// to the page section of that view with the same window; and the job
// page's card (the open incident, or the latest, over the job's list).
//
// The paper's terms stay in titles and details: headlines are the
// server's plain sentence.
import { el } from './dom.js';
import { cachedJSON, incidentsPath } from './api.js';
import { fmtMs, fmtInt, fmtTime, fmtDate, fmtDur } from './format.js';
import { jobHref, incidentHref, REPORT_PARAMS } from './state.js';
import { ranksText } from './greyhound.js';

// ---------- words ----------
export const ENGINES = {
  stagefrontier: { name: 'StageFrontier', what: 'step stages', color: '#0072B2', section: 'stage' },
  greyhound: { name: 'Greyhound', what: 'collectives', color: '#E69F00', section: 'greyhound' },
  sysom: { name: 'SysOM-AI', what: 'CPU profiles', color: '#009E73', section: 'sysom' },
  kair: { name: 'KAIR', what: 'operator traces', color: '#CC79A7', section: 'kair' },
};
export const engineName = (e) => (ENGINES[e] ? ENGINES[e].name : String(e || '—'));
export const engineColor = (e) => (ENGINES[e] ? ENGINES[e].color : '#8c959f');
export const ENGINE_ORDER = ['stagefrontier', 'greyhound', 'sysom', 'kair'];

// What each kind of evidence is, in words (the kind itself is in the title).
const KIND = {
  'stagefrontier.change_point': 'step time changed',
  'stagefrontier.leader': 'slowest rank of a stage',
  'stagefrontier.progress': 'step times',
  'greyhound.change_point': 'iteration time changed',
  'greyhound.phase': 'collective analysis moved on',
  'greyhound.cross_group': 'group comparison',
  'greyhound.validation': 'GPU and link benchmark',
  'greyhound.verdict': 'collective analysis concluded',
  'greyhound.late_rank': 'last rank into a collective',
  'sysom.slow_rank': 'late rank in collectives',
  'sysom.waterline': 'unusual CPU use',
  'sysom.diagnosis': 'layer-by-layer diagnosis',
  'sysom.temporal': 'change against the job’s own past',
  'kair.rank': 'rank whose operators stand out',
  'kair.culprit': 'operator the others wait for',
};
export const kindText = (k) => KIND[k] || String(k || '').replace(/^[a-z]+\./, '').replace(/_/g, ' ');

export const LAYERS = {
  stage: 'Step stage', collective: 'Collective', operator: 'Operator', gpu: 'GPU', cpu: 'CPU', os: 'Operating system', network: 'Network',
};
export const layerText = (l) => LAYERS[l] || String(l || '—');

const STATE = { open: 'open', recovering: 'recovering', resolved: 'resolved' };
export const stateBadge = (s) => el('span', { class: 'badge inc-state state-' + s, 'data-state': s }, STATE[s] || s);

const CONF = { high: 'high confidence', low: 'low confidence', withheld: 'withheld' };
const CONF_HELP = {
  high: 'stated: one engine names it with high confidence and none contradicts, or two independent engines agree',
  low: 'not enough to state a cause: weak, single or contradicted evidence',
  withheld: 'the engine declined to name a target, and says why',
};
export const confBadge = (c) => el('span', { class: 'badge inc-conf conf-' + (c || 'none'), 'data-confidence': c || '', title: CONF_HELP[c] || '' }, CONF[c] || c || '—');

const CATEGORY = {
  compute: 'compute', communication: 'communication', data: 'data loading', os: 'operating system', network: 'network', uniform: 'every rank alike', unknown: 'unknown',
};
export const categoryText = (c) => CATEGORY[c] || String(c || '—');

const REQUEST = {
  greyhound_validation: ['GPU and link benchmark', 'Greyhound validation'],
  kair_capture: ['operator trace', 'KAIR capture'],
  sysom_profile: ['CPU profile window', 'SysOM-AI profile window'],
};
export const requestText = (k) => (REQUEST[k] ? REQUEST[k][0] : String(k || '').replace(/_/g, ' '));
export const requestTerm = (k) => (REQUEST[k] ? REQUEST[k][1] : String(k || ''));

// targetText names a target in words: "rank 2 on node-000", "the link
// from rank 4 to rank 5", "every rank".
export function targetText(t) {
  if (!t) return '—';
  switch (t.kind) {
    case 'rank': return `rank ${t.rank ?? 0}` + (t.host ? ` on ${t.host}` : '');
    case 'link': return `the link from rank ${t.src ?? 0} to rank ${t.dst ?? 0}`;
    case 'host': return `host ${t.name}`;
    case 'group': return `group ${t.name}`;
    case 'operator': return `${t.name}` + (t.rank >= 0 ? ` on rank ${t.rank ?? 0}` : ' on every rank');
    case 'job': return 'every rank alike';
    default: return t.name || t.kind || '—';
  }
}

// targetKey is internal/incident's Target.Key (a hypothesis' identity).
export function targetKey(t) {
  switch (t.kind) {
    case 'rank': return `rank:${t.rank ?? 0}`;
    case 'link': return `link:${t.src ?? 0}-${t.dst ?? 0}`;
    case 'operator': return `op:${t.name}@${t.rank ?? 0}`;
    case 'job': return 'job';
    default: return `${t.kind}:${t.name || ''}`;
  }
}

// causeText is the stated cause in words, or what the page may say
// instead: never a suspect presented as the cause.
export function causeText(inc) {
  const stated = (inc.hypotheses || []).filter((h) => h.stated);
  if (stated.length) return stated.map((h) => targetText(h.target)).join('; ');
  const n = (inc.hypotheses || []).length;
  if (n > 1) return `not stated: ${n} competing suspects`;
  if (n === 1) return `not stated: ${targetText(inc.hypotheses[0].target)} suspected`;
  return 'not stated yet';
}

export const fmtSeconds = (s) => (s == null || !isFinite(s) ? '—' : fmtDur(s * 1e9));

// lostText: the job's time and the ranks' time it cost.
export function lostText(lost, short) {
  if (!lost || !(lost.seconds > 0)) return '—';
  const base = fmtSeconds(lost.seconds);
  if (short) return base;
  const bits = [`${base} of training time`];
  if (lost.rank_seconds > lost.seconds) bits.push(`${fmtSeconds(lost.rank_seconds)} across all ranks`);
  if (lost.steps) bits.push(`over ${fmtInt(lost.steps)} slow steps`);
  return bits.join(' · ');
}

// ago is how long before now (the browser's clock) ns was.
export const ago = (ns) => (ns > 0 ? fmtDur(Math.max(0, Date.now() * 1e6 - ns)) + ' ago' : '');

export function sinceText(inc) {
  const o = inc.opened || {};
  return `${fmtDate(o.wall_ns)}${o.step >= 0 ? ` · step ${fmtInt(o.step)}` : ''}`;
}

// slowerText: healthy → slow step time.
export function slowerText(inc) {
  if (!(inc.healthy_ms > 0 && inc.slow_ms > 0)) return '';
  const rel = (inc.slow_ms - inc.healthy_ms) / inc.healthy_ms;
  return `${fmtMs(inc.healthy_ms)} → ${fmtMs(inc.slow_ms)} per step (${rel >= 0 ? '+' : ''}${Math.round(100 * rel)}%)`;
}

export const incidentLink = (inc, label) => el('a', { href: incidentHref(inc.id), class: 'inc-link', 'data-incident': inc.id }, label || inc.id);

// ---------- links into the engine views ----------
const has = (v) => v != null && v !== '' && Number(v) !== 0;

// viewHref maps an evidence's view (an API path, with or without the
// /api/v1 prefix or an origin) to the job page with that view's window:
// the report's steps as they are; Greyhound's and SysOM-AI's
// nanoseconds as gh_* and sy_* (the page passes them on to the API); a
// KAIR capture and step. It returns {href, section, api} or null when the
// path is not a job view.
export function viewHref(path) {
  if (!path) return null;
  let u;
  try {
    u = new URL(path, document.baseURI); // any base: only the path and query are read
  } catch (e) {
    return null;
  }
  let p = u.pathname.replace(/^\/+/, '');
  const at = p.indexOf('api/v1/');
  if (at >= 0) p = p.slice(at + 'api/v1/'.length);
  const m = p.match(/(?:^|\/)jobs\/([^/]+)(?:\/(.*?))?\/?$/);
  if (!m) return null;
  const job = decodeURIComponent(m[1]);
  const rest = m[2] || '';
  const q = u.searchParams;
  const out = new URLSearchParams();
  const copy = (from, to) => {
    if (q.has(from) && q.get(from) !== '') out.set(to || from, q.get(from));
  };
  const sysomWindow = () => {
    copy('from_ns', 'sy_from_ns');
    copy('to_ns', 'sy_to_ns');
    copy('base_from_ns', 'sy_base_from_ns');
    copy('base_to_ns', 'sy_base_to_ns');
  };
  let section;
  switch (rest) {
    case '':
    case 'report':
      for (const k of REPORT_PARAMS) copy(k);
      section = 'stage';
      break;
    case 'greyhound':
      copy('from_ns', 'gh_from_ns');
      copy('to_ns', 'gh_to_ns');
      copy('incarnation');
      section = 'greyhound';
      break;
    case 'sysom':
    case 'osstats':
      sysomWindow();
      copy('incarnation');
      section = 'sysom';
      break;
    case 'flamegraph':
      sysomWindow();
      copy('rank', 'fg_rank');
      copy('group', 'fg_group');
      section = 'sysom';
      break;
    case 'flamegraph/diff':
      sysomWindow();
      if (q.has('a_rank') && q.has('b_rank')) {
        out.set('df_mode', 'peer');
        copy('a_rank', 'df_a');
        copy('b_rank', 'df_b');
      } else if (q.has('rank')) {
        out.set('df_mode', 'baseline');
        copy('rank', 'df_a');
      }
      section = 'sysom';
      break;
    case 'kair':
      copy('capture', 'kair_capture');
      section = 'kair';
      break;
    case 'kair/timeline':
      copy('capture', 'kair_capture');
      copy('step', 'kair_step');
      section = 'kair';
      break;
    default: {
      const c = rest.match(/^captures\/([^/]+)$/);
      if (!c) return null;
      out.set('kair_capture', decodeURIComponent(c[1]));
      section = 'kair';
    }
  }
  out.set('section', section);
  return { href: jobHref(job, out), section, job, api: `/api/v1/jobs/${m[1]}${rest ? '/' + rest : ''}${u.search}` };
}

// captureOf is the KAIR capture the incident has: the newest capture in
// its audit log, else the one a KAIR finding was read from.
function captureOf(inc) {
  const acts = (inc.audit || []).filter((a) => a.kind === 'kair_capture' && a.ref).slice().reverse();
  const done = acts.find((a) => a.result === 'done') || acts[0];
  if (done) return done.ref;
  for (const e of inc.evidence || []) {
    if (e.engine !== 'kair' || !e.view) continue;
    const v = viewHref(e.view);
    if (v) return new URLSearchParams(v.href.split('?')[1]).get('kair_capture');
  }
  return null;
}

// windowLinks are the incident's own links into each engine view, on its
// windows: the step-stage report over the slow steps against the steps
// before; the collective analysis from before the onset to the end; the
// CPU profiles over the slow stretch against the stretch before; the
// operator trace the incident asked for.
export function windowLinks(inc) {
  const w = inc.windows || {};
  const b = w.before || {};
  const d = w.during || {};
  const a = w.after || {};
  const job = inc.job;
  const link = (section, params) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (has(v) || (k === 'incarnation' && v != null)) p.set(k, String(v));
    p.set('section', section);
    return { section, href: jobHref(job, p), params: p };
  };
  // The launch the incident is in: its steps count in that launch (a job
  // restarted later must not read them in the newest).
  const inc0 = inc.incarnation ?? 0;
  const out = [];
  const stage = link('stage', { from: d.from_step, to: d.to_step >= d.from_step ? d.to_step : null, ref_from: b.to_step > 0 ? b.from_step : null, ref_to: b.to_step || null, incarnation: inc0 });
  if (d.from_step != null) out.push({ engine: 'stagefrontier', label: 'Step stages over the slow steps', detail: 'StageFrontier report', ...stage });
  if (d.from_ns > 0) {
    out.push({ engine: 'greyhound', label: 'Collectives from before the onset', detail: 'Greyhound report',
      ...link('greyhound', { gh_from_ns: b.from_ns || d.from_ns, gh_to_ns: a.to_ns || d.to_ns, incarnation: inc0 }) });
    out.push({ engine: 'sysom', label: 'CPU profiles of the slow stretch against before', detail: 'SysOM-AI report',
      ...link('sysom', { sy_from_ns: d.from_ns, sy_to_ns: d.to_ns > d.from_ns ? d.to_ns : null,
        sy_base_from_ns: b.to_ns > b.from_ns ? b.from_ns : null, sy_base_to_ns: b.to_ns > b.from_ns ? b.to_ns : null, incarnation: inc0 }) });
  }
  const cap = captureOf(inc);
  if (cap) out.push({ engine: 'kair', label: `Operator trace ${cap}`, detail: 'KAIR capture', ...link('kair', { kair_capture: cap }) });
  return out;
}

// ---------- loading ----------
// JOB_LIMIT bounds the job page's list (the newest; the count says so).
export const JOB_LIMIT = 50;

// loadJobIncidents never rejects (the page must not fail for it):
// {list} newest first, {missing} when the server has no incident routes,
// {error}, or {aborted}.
export async function loadJobIncidents(id, signal, fresh) {
  try {
    const body = await cachedJSON(incidentsPath({ job: id, limit: JOB_LIMIT }), signal, fresh);
    return { list: (body && body.incidents) || [], truncated: !!(body && body.truncated) };
  } catch (e) {
    if (e.name === 'AbortError') return { aborted: true };
    // 404: a server without incident routes; 503: its incident layer is off.
    if (e.status === 404 || e.status === 503) return { missing: true };
    return { error: e };
  }
}

export function incidentsSig(x) {
  if (!x || !x.list) return x && x.error ? 'error' : 'none';
  return x.list.map((i) => `${i.id}:${i.state}:${(i.updated || {}).wall_ns}:${(i.evidence || []).length}:${(i.audit || []).length}`).join(',');
}

// current is the incident a page opens on: the newest unresolved one, else
// the newest.
export function current(list) {
  return list.find((i) => i.state !== 'resolved') || list[0] || null;
}

// ---------- the job page's card ----------
// chainRows are a hypothesis' cause chain, top (what the job sees) to
// bottom (what lies beneath), one row per layer.
export function chainRows(h, evidence) {
  const byId = new Map((evidence || []).map((e) => [e.id, e]));
  return el('ol', { class: 'inc-chain', 'data-target': targetKey(h.target) },
    (h.chain || []).map((l, i) => el('li', { class: 'inc-chain-row conf-' + (l.confidence || 'none'), 'data-layer': l.layer, 'data-engine': l.engine },
      el('div', { class: 'inc-chain-layer' }, el('span', { class: 'inc-step' }, String(i + 1)), layerText(l.layer)),
      el('div', { class: 'inc-chain-engine' }, el('span', { class: 'sw', style: `background:${engineColor(l.engine)}` }), engineName(l.engine)),
      el('div', { class: 'inc-chain-text' }, l.text,
        l.reason ? el('div', { class: 'small muted inc-chain-reason' }, 'why: ', l.reason) : null,
        byId.size && (l.evidence || []).some((id) => byId.has(id))
          ? el('div', { class: 'small muted inc-chain-ev' }, (l.evidence || []).filter((id) => byId.has(id)).map((id) => kindText(byId.get(id).kind)).join(' · '))
          : null),
      el('div', { class: 'inc-chain-conf' }, confBadge(l.confidence)))));
}

// incidentsCard is the job page's top: the open incident (or the newest),
// its cause chain and a list of the job's incidents.
export function incidentsCard(x, jobId) {
  if (!x || x.missing || x.aborted) return null;
  const head = (sub) => el('h2', { id: 'inc-card-title' }, 'Incidents', sub ? el('span', { class: 'sub' }, sub) : null);
  if (x.error) {
    return el('section', { class: 'card inc-card', id: 'incidents', 'aria-labelledby': 'inc-card-title' }, head(),
      el('p', { class: 'error-line', role: 'alert' }, `Cannot load the incidents: ${x.error.message}`));
  }
  const list = x.list;
  if (!list.length) {
    return el('section', { class: 'card inc-card inc-none', id: 'incidents', 'aria-labelledby': 'inc-card-title' }, head(),
      el('p', { class: 'muted' }, 'No incidents: laggard has seen no slowdown in this job.'));
  }
  const cur = current(list);
  const stated = (cur.hypotheses || []).filter((h) => h.stated);
  const shown = stated.length ? stated : (cur.hypotheses || []).slice(0, 1);
  const open = list.filter((i) => i.state !== 'resolved').length;
  return el('section', { class: 'card inc-card state-' + cur.state, id: 'incidents', 'aria-labelledby': 'inc-card-title', 'data-incident': cur.id },
    head(`${x.truncated ? 'the newest ' : ''}${fmtInt(list.length)} incident${list.length === 1 ? '' : 's'} · ${open ? `${open} open` : 'none open'} · one diagnosis per slowdown across every engine`),
    el('div', { class: 'inc-current' },
      el('div', { class: 'inc-current-top' }, stateBadge(cur.state), confBadge(cur.confidence),
        el('span', { class: 'muted small' }, cur.state === 'resolved' ? 'the latest incident' : 'the open incident'),
        el('a', { class: 'btn inc-open', href: incidentHref(cur.id) }, 'Open the incident →')),
      el('p', { class: 'inc-headline' }, cur.headline || 'No summary yet.'),
      el('div', { class: 'facts' },
        fact('Since', sinceText(cur), cur.state !== 'resolved' ? el('span', { class: 'muted' }, ` · ${ago(cur.opened && cur.opened.wall_ns)}`) : null),
        fact('Lost time', lostText(cur.lost, true), cur.lost && cur.lost.partial ? el('span', { class: 'muted', title: 'the step samples do not cover the whole incident' }, ' (so far, partial)') : null),
        fact('Cause', el('span', { class: 'inc-cause' }, causeText(cur))),
        slowerText(cur) ? fact('Step time', slowerText(cur)) : null),
      shown.length
        ? el('div', { class: 'inc-card-chain' }, el('div', { class: 'k' }, stated.length ? 'Why (cause chain)' : 'Leading suspicion (not stated as the cause)'), chainRows(shown[0]))
        : null,
      (cur.contradictions || []).length ? el('div', { class: 'note inc-contradiction' }, 'Engines disagree: ', cur.contradictions.join(' ')) : null),
    list.length > 1 || cur.state === 'resolved' ? incidentTable(list, { job: false, current: cur.id, caption: `All incidents of ${jobId}` }) : null);
}

function fact(k, ...v) {
  return el('div', { class: 'fact' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v));
}

// incidentTable lists incidents: job (opts.job), state, since, cause,
// lost time, confidence.
export function incidentTable(list, opts = {}) {
  return el('div', { class: 'scroll-x' }, el('table', { class: 't inc-table' + (opts.cls ? ' ' + opts.cls : '') },
    opts.caption ? el('caption', { class: 'sr-only' }, opts.caption) : null,
    el('thead', {}, el('tr', {},
      opts.job ? el('th', { scope: 'col' }, 'job') : null,
      el('th', { scope: 'col' }, 'incident'), el('th', { scope: 'col' }, 'state'), el('th', { scope: 'col' }, 'since'),
      el('th', { scope: 'col' }, 'cause'), el('th', { scope: 'col', class: 'num' }, 'lost time'), el('th', { scope: 'col' }, 'confidence'))),
    el('tbody', {}, list.map((i) => el('tr', { class: 'click' + (i.id === opts.current ? ' selected' : ''), 'data-incident': i.id, 'data-job': opts.job ? i.job : null,
      title: i.headline || '', onclick: (e) => { if (e.target.tagName !== 'A') location.hash = incidentHref(i.id); } },
      opts.job ? el('td', {}, el('a', { href: jobHref(i.job), class: 'mono' }, i.job)) : null,
      el('td', {}, incidentLink(i)),
      el('td', { class: 'inc-state-cell' }, stateBadge(i.state)),
      el('td', { class: 'mono small' }, fmtTime((i.opened || {}).wall_ns), el('div', { class: 'muted' }, i.state === 'resolved' && i.resolved ? `resolved ${fmtTime(i.resolved.wall_ns)}` : ago((i.opened || {}).wall_ns))),
      el('td', { class: 'inc-cause-cell' }, causeText(i), i.category && i.category !== 'unknown' && i.category !== 'uniform' ? el('div', { class: 'muted small' }, categoryText(i.category)) : null),
      el('td', { class: 'num' }, lostText(i.lost, true), i.lost && i.lost.partial ? el('div', { class: 'muted small', title: 'the step samples do not cover the whole incident' }, 'so far') : null),
      el('td', {}, confBadge(i.confidence)))))));
}

// scopeText is where the incident is, in words.
export function scopeText(s) {
  if (!s) return '—';
  const bits = [];
  if ((s.ranks || []).length) bits.push(`rank${s.ranks.length > 1 ? 's' : ''} ${ranksText(s.ranks)}`);
  if ((s.hosts || []).length) bits.push(`host${s.hosts.length > 1 ? 's' : ''} ${s.hosts.join(', ')}`);
  if ((s.links || []).length) bits.push(s.links.map((l) => `link ${l.src ?? 0}→${l.dst ?? 0}`).join(', '));
  if ((s.groups || []).length) bits.push(`group${s.groups.length > 1 ? 's' : ''} ${s.groups.join(', ')}`);
  if ((s.operators || []).length) bits.push(`operator${s.operators.length > 1 ? 's' : ''} ${s.operators.join(', ')}`);
  if (!bits.length || s.whole) bits.unshift('the whole job');
  return bits.join(' · ');
}
