// The job page: fetches the report for the URL's window, reference and
// role group, and lays out the views — headline, time axis, stages,
// heatmap, rank drill-down, profiler snippet, evidence details.
import { el, card } from './dom.js';
import { allJobs, cachedJSON, reportPath } from './api.js';
import { fmtInt } from './format.js';
import { go, reportQuery } from './state.js';
import { headlineCard } from './headline.js';
import { drawTimeline, timelineLegend } from './timeline.js';
import { stagesView } from './stages.js';
import { drawHeatmap } from './heatmap.js';
import { rankCard } from './ranks.js';
import { profilerCard } from './profiler.js';
import { detailsCard } from './labels.js';
import { groupSelector } from './groups.js';
import { loadGreyhound, greyhoundView } from './greyhound.js';
import { loadSysom, sysomView } from './sysom.js';
import { loadKair, kairView } from './kair.js';
import { loadJobIncidents, incidentsCard } from './incidents.js';

// loadJob fetches what the page shows. With a role group selected the
// report is asked for that group alone (its own time axis, window and
// reference), and the unfiltered report supplies the group list. The
// collective analysis (greyhound.js) loads beside it; a job with only
// collective telemetry (a pure-NCCL job: no stage vectors, the report
// answers 404) still shows it.
export async function loadJob(route, signal, fresh) {
  const id = route.id;
  const q = reportQuery(route.params);
  const jobs = allJobs(signal, false).catch(() => null);
  const job = cachedJSON(`jobs/${encodeURIComponent(id)}`, signal, fresh).catch((e) => {
    if (e.name === 'AbortError') throw e;
    return null;
  });
  const rep = cachedJSON(reportPath(id, q), signal, fresh);
  const all = route.params.has('group') ? cachedJSON(reportPath(id, reportQuery(route.params, ['group'])), signal, fresh) : rep;
  const gh = loadGreyhound(id, signal, fresh, route.params); // never rejects
  const sy = loadSysom(id, route.params, signal, fresh); // never rejects
  const kr = loadKair(id, route.params, signal, fresh); // never rejects
  const inc = loadJobIncidents(id, signal, fresh); // never rejects
  let r;
  let a;
  try {
    [r, a] = await Promise.all([rep, all]);
  } catch (e) {
    job.catch(() => {}); // an abort rejects it too; this error is reported
    const [g, s, k, i] = await Promise.all([gh, sy, kr, inc]);
    // CPU profiles alone (agent-only job), operator captures alone, or
    // incidents alone also make a page.
    if (e.name === 'AbortError' || e.status !== 404 ||
      (!g.report && (!s || s.missing || s.aborted) && !(k && (k.caps || []).length) && !(i && i.list && i.list.length))) throw e;
    const [j, js] = await Promise.all([job, jobs]);
    return { rep: null, all: null, repError: e, job: j, jobs: js, gh: g, sy: s, kr: k, inc: i };
  }
  const [j, js, g, s, k, i] = await Promise.all([job, jobs, gh, sy, kr, inc]);
  return { rep: r, all: a, job: j, jobs: js, gh: g, sy: s, kr: k, inc: i };
}

// shownGroup is the role group the page shows: the selected one, else the
// largest (the report lists groups largest first).
function shownGroup(model, params) {
  const want = params.get('group');
  const groups = model.rep.groups || [];
  return groups.find((g) => g.group === want) || groups[0] || null;
}

export function renderJob(main, route, model, view) {
  const { rep, all } = model;
  const p = route.params;
  if (!rep) {
    // Collective telemetry only: the stage report's absence is stated,
    // not raised as an error.
    const ghv = greyhoundView(model.gh, { hasStage: false, window: ghWindow(p) });
    main.replaceChildren(jobHead(route, model, view), incidentsCard(model.inc, route.id) || '',
      el('section', { class: 'card empty no-stage' }, 'No stage-vector report: ', (model.repError && model.repError.message) || 'no data',
        '. The collective analysis below needs no stage vectors.'), ghv.node || '');
    ghv.draw();
    mountSysom(main, model);
    scrollTo(main, view);
    return;
  }
  const g = shownGroup(model, p);
  if (!g) {
    const ghv = greyhoundView(model.gh, { hasStage: false, window: ghWindow(p) });
    main.replaceChildren(jobHead(route, model, view), incidentsCard(model.inc, route.id) || '',
      el('section', { class: 'card empty' }, 'The report has no role group with data in this window.'), ghv.node || '');
    ghv.draw();
    mountSysom(main, model);
    scrollTo(main, view);
    return;
  }
  const sr = g.report;
  const cmp = g.comparison || null;
  const roleAware = !!all.role_aware_needed || (all.groups || []).length > 1;
  const groupKey = roleAware ? g.group : null;
  const h = sr.headline || rep.headline;
  const opts = {
    stage: p.get('stage') || null,
    rank: p.get('rank'),
    headRank: h.rank >= 0 ? h.rank : null,
    headStage: h.stage || null,
    metric: p.get('metric') || 'late',
    sort: p.get('hsort') || 'rank',
    rows: p.get('rows') || 'ranks',
  };

  const parts = [jobHead(route, model, view)];
  // The job page opens on its incidents; the engine sections follow.
  const ic = incidentsCard(model.inc, route.id);
  if (ic) parts.push(ic);
  if (roleAware) {
    parts.push(headlineCard(all.headline, null, null, all, { job: true }),
      groupSelector(all.groups || [], g.group),
      headlineCard(h, sr, cmp, rep, { group: true, title: `Role group ${g.group} · ${fmtInt(g.num_ranks)} ranks`, notes: rep.notes }));
  } else {
    parts.push(headlineCard(rep.headline, sr, cmp, rep, { notes: rep.notes }));
  }

  // Time axis.
  const tl = rep.timeline;
  const refSame = cmp && cmp.reference.job_id === rep.job_id;
  const ref = refSame ? { from: cmp.reference.first_step, to: cmp.reference.last_step } : null;
  const refNote = cmp && !refSame ? `reference: run ${cmp.reference.job_id} steps ${cmp.reference.first_step}–${cmp.reference.last_step}` : null;
  const chart = el('div', { class: 'chart', id: 'timeline' });
  const mode = p.get('chart') === 'line' ? 'line' : 'stack';
  parts.push(card('Step time', tl ? `exposed ms/step over steps ${fmtInt(tl.from)}–${fmtInt(tl.to)}${tl.group && roleAware ? ' · role group ' + tl.group : ''}${tl.truncated ? ' (older steps exist)' : ''} · drag to pick a window, shift-drag for the reference` : 'no time axis',
    tl ? timelineLegend(tl, mode, (m) => go({ chart: m === 'stack' ? null : m }), refNote) : null, chart));

  // Stages and heatmap side by side.
  const heat = el('div', { class: 'heat', id: 'heatmap' });
  parts.push(el('div', { class: 'grid' },
    card('Stages', `share of exposed time${cmp ? ' and change against the reference' : ''} · click a stage to focus it`, stagesView(sr, cmp, opts)),
    card('Rank × stage', `${fmtInt(sr.num_ranks)} ranks${groupKey ? ' in ' + groupKey : ''} · click a cell to open the rank`, heat)));

  if (opts.rank != null && opts.rank !== '') {
    parts.push(rankCard({ id: route.id, sr, rank: opts.rank, stage: opts.stage, params: p, group: groupKey, signal: view.signal }));
  }
  // Collective analysis (Greyhound): iteration time, controller, groups,
  // entry lateness, validation.
  const ghv = greyhoundView(model.gh, { hasStage: true, window: ghWindow(p) });
  if (ghv.node) parts.push(ghv.node);
  const pick = p.has('step') ? Number(p.get('step')) : null;
  parts.push(profilerCard(route.id, sr, h, groupKey, pick));
  parts.push(detailsCard(sr));

  main.replaceChildren(...parts);
  if (tl) {
    drawTimeline(chart, {
      timeline: tl, window: rep.window, ref, mode, stage: opts.stage, pick: p.has('step') ? Number(p.get('step')) : null,
      onBrush: (a, b, isRef) => (isRef
        ? go({ ref_from: a, ref_to: b, compare: null, no_reference: null })
        : go({ from: a, to: b, last: null })),
      onPick: (step) => go({ step }),
    });
  }
  drawHeatmap(heat, sr, opts);
  ghv.draw();
  mountSysom(main, model);
  const rv = main.querySelector('#rank-view');
  if (rv && view.scrollToRank) rv.scrollIntoView({ block: 'nearest' });
  scrollTo(main, view);
}

// The section a link (an incident's view link) asked for.
const SECTIONS = { stage: '#headline', greyhound: '#greyhound', sysom: '#sysom', kair: '#kair', incidents: '#incidents' };

function scrollTo(main, view) {
  const sel = view && view.scrollToSection && SECTIONS[view.scrollToSection];
  const n = sel && main.querySelector(sel);
  if (n) n.scrollIntoView({ block: 'start' });
}

// ghWindow is the collective analysis' window from the URL (an incident's
// link), or null for its default.
function ghWindow(p) {
  const from = p.get('gh_from_ns');
  const to = p.get('gh_to_ns');
  return from || to ? { from: from ? Number(from) : null, to: to ? Number(to) : null } : null;
}

// mountSysom appends the CPU-profile section (sysom.js) after the rest is
// laid out: its charts size themselves to the page. The operator-trace
// section (kair.js) follows it.
function mountSysom(main, model) {
  const v = sysomView(model.sy, { job: model.job });
  if (v.node) {
    main.append(v.node);
    v.draw();
  }
  const k = kairView(model.kr, { jobId: model.id });
  if (!k.node) return;
  main.append(k.node);
  k.draw();
}

// jobHead is the title and the window / reference controls: the keyboard
// and form alternative to brushing.
// launchSelector chooses the incarnation (launch) the page reads when the
// job restarted: the newest by default, any earlier one, or all of them on
// one axis with each restart marked. Absent for a job launched once.
function launchSelector(p, rep, job) {
  const inc = (rep && rep.incarnations) || null;
  const list = (inc && inc.list) || (job && job.incarnations) || [];
  if (list.length < 2) return null;
  const newest = list[list.length - 1].n;
  // incarnation=<newest> (an incident's link names its launch) is the newest.
  const cur = p.get('incarnation') === String(newest) ? '' : p.get('incarnation') || '';
  const words = { first: 'first launch', restart: 'a rank restarted', launch: 'new launch', run_id: 'resubmitted', layout: 'new layout' };
  const btn = (value, label, title) => el('button', { type: 'button', class: cur === value ? 'on' : null, 'data-incarnation': value || 'newest', title,
    onclick: () => go({ incarnation: value || null, from: null, to: null, last: null, ref_from: null, ref_to: null, step: null }) }, label);
  return el('div', { class: 'winsel launches', role: 'group', 'aria-label': 'launch' },
    el('span', { class: 'lbl' }, 'Launch'),
    el('div', { class: 'seg' },
      list.map((s) => {
        const steps = s.first_step >= 0 ? `steps ${fmtInt(s.first_step)}–${fmtInt(s.last_step)}` : 'no steps';
        const lost = (s.unshipped || []).length ? ` · ${s.unshipped.length} rank(s) ended without shipping their last steps` : '';
        const v = s.n === newest ? '' : String(s.n);
        return btn(v, `#${s.n}${s.n === newest ? ' (newest)' : ''}`, `${words[s.reason] || s.reason}${s.detail ? ': ' + s.detail : ''} · ${steps}${lost}`);
      }),
      btn('all', 'all', 'every launch on one axis, each restart marked')));
}

export function jobHead(route, model, view) {
  const p = route.params;
  const rep = model && model.rep;
  const job = model && model.job;
  const name = (rep && rep.job_name) || (job && job.name);
  const ranks = job ? job.world_size : null;
  const explicit = p.has('from') || p.has('to');
  const last = p.get('last');
  const win = rep && rep.window;
  // The control of the parameter the API rejected is marked invalid.
  const bad = view && view.error && view.error.field;
  const input = (nm, label, value) => el('label', { class: 'field' }, el('span', { class: 'sr-only' }, label),
    el('input', { type: nm === bad ? 'text' : 'number', min: 0, name: nm, placeholder: label, value: value ?? '', 'aria-label': label,
      'aria-invalid': nm === bad ? 'true' : null, class: nm === bad ? 'invalid' : null }));
  const from = input('from', 'from step', explicit ? p.get('from') : win ? win.from : '');
  const to = input('to', 'to step', explicit ? p.get('to') : win ? win.to : '');
  const applyWindow = (e) => {
    e.preventDefault();
    const f = from.querySelector('input').value;
    const t = to.querySelector('input').value;
    go({ from: f, to: t, last: null });
  };
  const presets = el('div', { class: 'seg', role: 'group', 'aria-label': 'window presets' },
    el('button', { type: 'button', class: !explicit && !last ? 'on' : null, 'data-window': 'default', title: 'since the latest change point, after warm-up',
      onclick: () => go({ from: null, to: null, last: null }) }, 'since change'),
    ['50', '200', '1000'].map((n) => el('button', { type: 'button', class: last === n ? 'on' : null, 'data-window': 'last' + n,
      onclick: () => go({ last: n, from: null, to: null }) }, `last ${n}`)));
  const windowForm = el('form', { class: 'winsel', 'aria-label': 'window', onsubmit: applyWindow },
    el('span', { class: 'lbl' }, 'Window'), presets, from, el('span', { class: 'muted' }, '–'), to,
    el('button', { class: 'btn', type: 'submit' }, 'Apply'));

  // Reference: automatic (before the latest change point), explicit
  // steps, another job (run A vs run B), or none.
  const refMode = p.has('compare') ? 'job' : p.has('ref_from') || p.has('ref_to') ? 'steps' : p.get('no_reference') === 'true' ? 'none' : 'auto';
  const shown = rep ? shownGroup(model, p) : null;
  const cmp = shown && shown.comparison;
  const rf = input('ref_from', 'reference from', p.get('ref_from') ?? (cmp ? cmp.reference.first_step : ''));
  const rt = input('ref_to', 'reference to', p.get('ref_to') ?? (cmp ? cmp.reference.last_step : ''));
  const others = ((model && model.jobs && model.jobs.jobs) || []).filter((j) => j.id !== route.id && j.vectors > 0);
  const jobSel = el('select', { name: 'compare', 'aria-label': 'compare with job' },
    el('option', { value: '' }, 'choose a job…'),
    others.map((j) => el('option', { value: j.id, selected: p.get('compare') === j.id || null }, j.id)),
    p.has('compare') && !others.some((j) => j.id === p.get('compare')) ? el('option', { value: p.get('compare'), selected: true }, p.get('compare')) : null);
  const modeSel = el('select', { name: 'ref_mode', 'aria-label': 'compare with' },
    [['auto', 'before the change point'], ['steps', 'explicit steps…'], ['job', 'another job…'], ['none', 'nothing']].map(([v, l]) =>
      el('option', { value: v, selected: v === refMode || null }, l)));
  const stepsBox = el('span', { class: 'ref-steps', hidden: refMode !== 'steps' || null }, rf, el('span', { class: 'muted' }, '–'), rt);
  const jobBox = el('span', { class: 'ref-job', hidden: refMode !== 'job' || null }, jobSel);
  modeSel.addEventListener('change', () => {
    stepsBox.hidden = modeSel.value !== 'steps';
    jobBox.hidden = modeSel.value !== 'job';
    if (modeSel.value === 'auto') go({ ref_from: null, ref_to: null, compare: null, no_reference: null });
    if (modeSel.value === 'none') go({ ref_from: null, ref_to: null, compare: null, no_reference: 'true' });
  });
  const applyRef = (e) => {
    e.preventDefault();
    if (modeSel.value === 'steps') {
      go({ ref_from: rf.querySelector('input').value, ref_to: rt.querySelector('input').value, compare: null, no_reference: null });
    } else if (modeSel.value === 'job' && jobSel.value) {
      go({ compare: jobSel.value, ref_from: null, ref_to: null, no_reference: null });
    }
  };
  const refForm = el('form', { class: 'winsel', 'aria-label': 'reference window', onsubmit: applyRef },
    el('span', { class: 'lbl' }, 'Compare with'), modeSel, stepsBox, jobBox, el('button', { class: 'btn', type: 'submit' }, 'Apply'));

  return el('div', { class: 'jobhead' },
    el('div', { class: 'title' }, el('h1', { class: 'mono' }, route.id), name && name !== route.id ? el('span', { class: 'name' }, name) : null,
      el('span', { class: 'muted meta' }, [
        ranks ? `${fmtInt(ranks)} ranks` : null,
        job && job.vectors > 0 && job.first_step >= 0 ? `steps ${fmtInt(job.first_step)}–${fmtInt(job.last_step)} stored${(job.incarnations || []).length > 1 ? ' in the newest launch' : ''}` : null,
        rep && rep.window ? `showing ${fmtInt(rep.window.from)}–${fmtInt(rep.window.to)}` : null,
      ].filter(Boolean).join(' · '))),
    launchSelector(p, rep, job),
    el('div', { class: 'controls' }, windowForm, refForm),
    view && view.error ? el('p', { class: 'error-line', role: 'alert' }, view.error.message, view.error.field ? ` (field: ${view.error.field})` : '') : null);
}
