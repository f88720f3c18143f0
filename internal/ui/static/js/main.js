// laggard web UI entry point: routes the URL hash to the job list or a
// job page, shows loading, empty and error states (the API's message and
// field), and refreshes the current view on a timer.
import { el, $, hideTip } from './dom.js';
import { allJobs } from './api.js';
import { parseRoute, setReplaceHandler, listHref, jobHref, clusterHref } from './state.js';
import { renderJobs, loadOpenIncidents } from './jobs.js';
import { loadJob, renderJob, jobHead } from './job.js';
import { greyhoundSig } from './greyhound.js';
import { sysomSig } from './sysom.js';
import { kairSig } from './kair.js';
import { incidentsSig } from './incidents.js';
import { loadIncident, renderIncident, incidentSig } from './incident.js';
import { loadCluster, renderCluster, clusterSig } from './cluster.js';

const REFRESH_MS = 10000;

const state = {
  ctrl: null, // aborts the in-flight load when the route changes
  timer: null,
  shown: null, // { key, sig } of what is on screen
  model: null, // the last job model (kept on screen when a reload fails)
  rank: null, // the rank the drill-down showed last (scroll to it only when it changes)
  section: null, // the section a link scrolled to last (scroll only when it changes)
};

function setCrumbs(route, model) {
  const c = $('crumbs');
  const sep = () => el('span', { class: 'sep' }, '/');
  for (const a of document.querySelectorAll('.views a')) {
    if (a.dataset.view === (route.view === 'cluster' || route.view === 'incident' ? 'cluster' : 'list')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  // The top-level views are named by the navigation beside.
  if (route.view === 'list' || route.view === 'cluster') c.replaceChildren();
  else if (route.view === 'incident') {
    const job = model && model.inc && model.inc.job;
    c.replaceChildren(el('a', { href: clusterHref() }, 'Cluster'), sep(),
      ...(job ? [el('a', { href: jobHref(job), class: 'mono' }, job), sep()] : []), el('span', { class: 'mono' }, 'incident ' + route.id));
  } else c.replaceChildren(el('a', { href: listHref() }, 'Jobs'), sep(), el('span', { class: 'mono' }, route.id));
}

function showError(err, context) {
  const b = $('banner');
  b.replaceChildren(
    el('strong', {}, err.status ? `API error ${err.status}` : 'Error'),
    el('div', { class: 'msg' },
      el('div', { class: 'err-msg' }, (context ? context + ': ' : '') + err.message),
      el('div', { class: 'detail' }, [err.path ? 'GET ' + err.path : null, err.field ? `field: ${err.field}` : null].filter(Boolean).join('  ·  '))),
    el('button', { class: 'dismiss', 'aria-label': 'dismiss', onclick: () => { b.hidden = true; } }, '×'));
  b.hidden = false;
}

const clearError = () => { $('banner').hidden = true; };

function setLoading(on) {
  document.body.classList.toggle('busy', on);
  $('main').setAttribute('aria-busy', on ? 'true' : 'false');
  const u = $('updated');
  u.classList.toggle('loading', on);
  if (!on) u.textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
}

function schedule() {
  clearTimeout(state.timer);
  if ($('autorefresh').checked) state.timer = setTimeout(() => load({ fresh: true, quiet: true }), REFRESH_MS);
}

// load shows the current route. fresh bypasses the response cache (the
// refresh timer); quiet keeps the page as it is unless the data changed.
async function load(opts = {}) {
  clearTimeout(state.timer);
  if (state.ctrl) state.ctrl.abort();
  const ctrl = (state.ctrl = new AbortController());
  const route = parseRoute();
  const key = location.hash;
  const main = $('main');
  setCrumbs(route);
  if (!opts.quiet) hideTip();
  // First visit to a view: a placeholder; otherwise keep the old content
  // (dimmed) so brushing keeps its context while the report loads.
  const sameJob = route.view === 'job' && state.model && state.model.id === route.id;
  const placeholder = { list: 'Loading jobs…', cluster: 'Loading the open incidents…', incident: `Loading incident ${route.id}…` }[route.view] ||
    `Loading the report for ${route.id}…`;
  const sameList = (route.view === 'list' && main.querySelector('table.jobs')) || (route.view === 'cluster' && main.querySelector('#fleet'));
  if (!opts.quiet && !sameJob && !sameList) {
    main.replaceChildren(el('p', { class: 'muted pad loading-msg' }, placeholder));
  }
  setLoading(true);
  // show renders unless a quiet refresh found the same data on screen.
  const show = (sig, render) => {
    if (!(opts.quiet && state.shown && state.shown.key === key && state.shown.sig === sig)) {
      render();
      state.shown = { key, sig };
    }
  };
  try {
    if (route.view === 'list') {
      const [body, open] = await Promise.all([allJobs(ctrl.signal, opts.fresh), loadOpenIncidents(ctrl.signal, opts.fresh)]);
      show(JSON.stringify(body) + incidentsSig(open), () => renderJobs(main, body, route.params, open));
      state.model = null;
    } else if (route.view === 'cluster') {
      const m = await loadCluster(route, ctrl.signal, opts.fresh);
      show(clusterSig(m), () => renderCluster(main, route, m));
      state.model = null;
    } else if (route.view === 'incident') {
      const m = await loadIncident(route, ctrl.signal, opts.fresh);
      setCrumbs(route, m);
      show(incidentSig(m), () => renderIncident(main, route, m));
      state.model = null;
    } else {
      const model = await loadJob(route, ctrl.signal, opts.fresh);
      model.id = route.id;
      const sig = (model.rep ? JSON.stringify(model.rep).length + ':' + JSON.stringify(model.rep.headline) + ':' + (model.rep.timeline ? model.rep.timeline.to : '') : 'no-report') +
        ':' + greyhoundSig(model.gh) + ':' + sysomSig(model.sy) + ':' + kairSig(model.kr) + ':' + incidentsSig(model.inc);
      if (!(opts.quiet && state.shown && state.shown.key === key && state.shown.sig === sig)) {
        const rank = route.params.get('rank');
        const section = route.params.get('section');
        const fresh = !state.shown || state.shown.key !== key;
        renderJob(main, route, model, { signal: ctrl.signal, scrollToRank: rank != null && rank !== state.rank,
          scrollToSection: section && (fresh || section !== state.section) ? section : null });
        state.rank = rank;
        state.section = section;
        state.shown = { key, sig };
      }
      state.model = model;
    }
    clearError();
  } catch (e) {
    if (e.name === 'AbortError') return;
    showError(e, { list: 'listing jobs', cluster: 'listing incidents', incident: `loading incident ${route.id}` }[route.view] || `loading job ${route.id}`);
    if (route.view === 'incident' || route.view === 'cluster') {
      if (!opts.quiet) {
        main.replaceChildren(el('section', { class: 'card empty' }, route.view === 'incident' ? `No incident ${route.id} to show. ` : 'Cannot list the incidents. ',
          el('a', { href: listHref() }, '← back to jobs')));
      }
    } else if (route.view === 'job') {
      if (state.model && state.model.id === route.id && !opts.quiet) {
        // Keep the last good report on screen, with the rejected control marked.
        renderJob(main, route, state.model, { signal: ctrl.signal, error: e });
      } else if (!state.model || state.model.id !== route.id) {
        main.replaceChildren(jobHead(route, null, { error: e }),
          el('section', { class: 'card empty' }, 'No report to show. ',
            e.field ? el('a', { href: '#/jobs/' + encodeURIComponent(route.id) }, 'Reset the window and reference') : null,
            e.field ? ' · ' : null, el('a', { href: listHref() }, '← back to jobs')));
      }
    } else if (!main.querySelector('table.jobs')) {
      main.replaceChildren(el('section', { class: 'card empty' }, 'Cannot list jobs.'));
    }
  } finally {
    if (state.ctrl === ctrl) {
      setLoading(false);
      schedule();
    }
  }
}

// ---------- boot ----------
const ar = $('autorefresh');
try {
  ar.checked = localStorage.getItem('laggard.autorefresh') !== 'off';
} catch (e) {
  ar.checked = true; // storage blocked
}
ar.addEventListener('change', () => {
  try { localStorage.setItem('laggard.autorefresh', ar.checked ? 'on' : 'off'); } catch (e) { /* ignore */ }
  if (ar.checked) load({ fresh: true, quiet: true });
  else clearTimeout(state.timer);
});
let resizeT = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeT);
  resizeT = setTimeout(() => load({ quiet: false }), 200);
});
setReplaceHandler(() => load({ quiet: true }));
window.addEventListener('hashchange', () => load());
load();
