// View state lives in the URL hash so every view is linkable and the back
// button walks through windows, groups and selections:
//
//   #/?sort=exposed&dir=desc                     job list
//   #/jobs/<id>?from=A&to=B&ref_from=..&group=..  job page
//        &stage=<name>&rank=<r>&hsort=..&rows=..&metric=..&chart=..&step=..
//        &gh_from_ns=..&gh_to_ns=..                the collective analysis' window
//        &sy_from_ns=..&sy_to_ns=..&sy_base_from_ns=..&sy_base_to_ns=..
//                                                  the CPU profiles' window and baseline
//        &section=stage|greyhound|sysom|kair       the section to scroll to
//   #/incidents/<id>                             incident page
//   #/cluster?period=24h&fsort=lost              open incidents and the fleet view
//
// Report parameters are passed to GET /api/v1/jobs/<id>/report as they
// are; the others only change what the page shows.
export const REPORT_PARAMS = ['from', 'to', 'last', 'ref_from', 'ref_to', 'compare', 'no_reference', 'group', 'tau', 'model_fit', 'incarnation'];

export function parseRoute(hash = location.hash) {
  const h = hash.replace(/^#/, '') || '/';
  const i = h.indexOf('?');
  const path = i < 0 ? h : h.slice(0, i);
  const params = new URLSearchParams(i < 0 ? '' : h.slice(i + 1));
  const m = path.match(/^\/jobs\/([^/?]+)\/?$/);
  if (m) return { view: 'job', id: decodeURIComponent(m[1]), params };
  const i2 = path.match(/^\/incidents\/([^/?]+)\/?$/);
  if (i2) return { view: 'incident', id: decodeURIComponent(i2[1]), params };
  if (/^\/(cluster|incidents)\/?$/.test(path)) return { view: 'cluster', params };
  return { view: 'list', params };
}

export function incidentHref(id, params) {
  const q = params ? params.toString() : '';
  return '#/incidents/' + encodeURIComponent(id) + (q ? '?' + q : '');
}

export function clusterHref(params) {
  const q = params ? params.toString() : '';
  return '#/cluster' + (q ? '?' + q : '');
}

// routeHref is the href of a route with other params.
export function routeHref(r, params) {
  if (r.view === 'job') return jobHref(r.id, params);
  if (r.view === 'incident') return incidentHref(r.id, params);
  if (r.view === 'cluster') return clusterHref(params);
  return listHref(params);
}

export function jobHref(id, params) {
  const q = params ? params.toString() : '';
  return '#/jobs/' + encodeURIComponent(id) + (q ? '?' + q : '');
}

export function listHref(params) {
  const q = params ? params.toString() : '';
  return '#/' + (q ? '?' + q : '');
}

// reportQuery keeps the report parameters of params, in a stable order so
// equal queries hit the same cache entry.
export function reportQuery(params, drop = []) {
  const q = new URLSearchParams();
  for (const k of REPORT_PARAMS) {
    if (!drop.includes(k) && params.has(k)) q.set(k, params.get(k));
  }
  return q;
}

// withChanges returns params with changes applied: null or '' deletes.
export function withChanges(params, changes) {
  const p = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) {
    if (v == null || v === '') p.delete(k);
    else p.set(k, String(v));
  }
  return p;
}

let onReplace = null;
export function setReplaceHandler(fn) {
  onReplace = fn;
}

// go applies changes to the current route's params. A new history entry
// by default (back returns to the previous view); replace for refinements
// that should not pile up (hover, scroll).
export function go(changes, opts = {}) {
  const r = parseRoute();
  const p = withChanges(r.params, changes);
  const href = routeHref(r, p);
  if (href === location.hash) return;
  if (opts.replace) {
    history.replaceState(null, '', href);
    if (onReplace) onReplace();
  } else {
    location.hash = href;
  }
}
