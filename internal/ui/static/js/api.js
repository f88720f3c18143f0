// The same-origin JSON API under /api/v1. The base is derived from this
// module's URL (…/ui/js/api.js → …/), so the UI also works behind a path
// prefix.
import { currentToken, signIn } from './signin.js';

const BASE = new URL('../../', import.meta.url);

// ApiError carries what the API said: its message, the offending field
// (query parameter), the HTTP status and the request path.
export class ApiError extends Error {
  constructor(status, message, field, path) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.field = field || null;
    this.path = path;
  }
}

// headers are every API request's headers: the signed-in token, if any,
// goes out as Authorization: Bearer (signin.js).
function headers() {
  const h = { Accept: 'application/json' };
  const t = currentToken();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function getJSON(path, signal) {
  const url = new URL('api/v1/' + path, BASE);
  const where = url.pathname + url.search;
  let res;
  for (;;) {
    try {
      res = await fetch(url, { headers: headers(), signal });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'cannot reach the laggard server (' + e.message + ')', null, where);
    }
    if (res.status !== 401) break;
    // The server requires a token (or refused ours): ask for one, then
    // retry. A 403 (a token without the read scope) is shown as an error.
    let reason = res.statusText;
    try {
      reason = JSON.parse(await res.text()).error || reason;
    } catch (e) {
      // not JSON: keep the status text
    }
    await signIn(reason, signal);
  }
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (e) {
    // not JSON: reported below with the body's first line
  }
  if (!res.ok || (body && typeof body.error === 'string')) {
    const msg = body && body.error ? body.error : text.trim().slice(0, 200) || res.statusText;
    throw new ApiError(res.status, msg, body && body.field, where);
  }
  if (body == null) throw new ApiError(res.status, 'response is not JSON', null, where);
  return body;
}

// A small LRU of recent responses: changing a UI-only setting (sort,
// selected stage or rank) re-renders without asking the server again, and
// back/forward between two windows is instant.
const cache = new Map();
const CACHE_MAX = 24;

export async function cachedJSON(path, signal, fresh) {
  if (!fresh && cache.has(path)) {
    const v = cache.get(path);
    cache.delete(path);
    cache.set(path, v);
    return v;
  }
  const v = await getJSON(path, signal);
  cache.set(path, v);
  while (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value);
  return v;
}

// allJobs reads every page of the job list (the API pages it by id with
// ?after=), up to maxPages pages.
export async function allJobs(signal, fresh, maxPages = 40) {
  const first = await cachedJSON('jobs', signal, fresh);
  if (!first.next) return first;
  const jobs = (first.jobs || []).slice();
  let next = first.next;
  for (let i = 1; next && i < maxPages; i++) {
    const page = await cachedJSON('jobs?after=' + encodeURIComponent(next), signal, fresh);
    jobs.push(...(page.jobs || []));
    next = page.next;
  }
  return { jobs, next: next || undefined };
}

// reportPath is the report endpoint for a job and query.
export function reportPath(id, query) {
  const q = query.toString();
  return `jobs/${encodeURIComponent(id)}/report` + (q ? '?' + q : '');
}

// greyhoundPath is the collective analysis (Greyhound) endpoint for a job.
export function greyhoundPath(id) {
  return `jobs/${encodeURIComponent(id)}/greyhound`;
}

// The incident routes (issue 17): the list (newest first; evidence
// omitted), one incident with its evidence and view links, and the fleet
// rows. since is what the API takes: Unix nanoseconds (0: the beginning),
// an RFC 3339 time or a duration back from the server's now ("24h", "7d").
export function incidentsPath(q) {
  const s = new URLSearchParams(q || {}).toString();
  return 'incidents' + (s ? '?' + s : '');
}

export function incidentPath(id) {
  return `incidents/${encodeURIComponent(id)}`;
}

export function hostsPath(sinceNS) {
  return 'hosts' + (sinceNS ? `?since=${encodeURIComponent(sinceNS)}` : '');
}
