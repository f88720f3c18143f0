// laggard web UI: job list and StageFrontier job report view.
// Plain ES2020, no dependencies, no build step. Talks only to /api/v1 on the
// same origin (the base is derived from this script's URL so the UI also
// works behind a path prefix).
'use strict';
(function () {
  const BASE = new URL('..', document.currentScript.src);
  const REFRESH_MS = 5000;
  const SVGNS = 'http://www.w3.org/2000/svg';

  // Okabe–Ito palette: colour-blind safe, stable per default stage.
  const STAGE_COLORS = {
    'data.next_wait': '#E69F00',
    'model.fwd_loss_cpu_wall': '#56B4E9',
    'model.backward_cpu_wall': '#0072B2',
    'callbacks.cpu_wall': '#009E73',
    'optim.step_cpu_wall': '#CC79A7',
    'step.other_cpu_wall': '#A0A4A8',
  };
  const EXTRA_COLORS = ['#D55E00', '#F0E442', '#332288', '#44AA99', '#882255', '#117733', '#999933', '#AA4499'];
  const SHORT = {
    'data.next_wait': 'data', 'model.fwd_loss_cpu_wall': 'forward', 'model.backward_cpu_wall': 'backward',
    'callbacks.cpu_wall': 'callbacks', 'optim.step_cpu_wall': 'optim', 'step.other_cpu_wall': 'other',
  };
  const AXIS_COLORS = {
    accounting: '#8c959f', model_fit: '#0072B2', direct_gain: '#009E73', device_evidence: '#56B4E9',
    ambiguity: '#E69F00', role_clarity: '#CC79A7', telemetry: '#D55E00',
  };
  const BASELINE_NAMES = {
    per_stage_max: 'Per-stage max', per_stage_avg: 'Per-stage average', rank_spread: 'Raw rank spread',
    slowest_rank_breakdown: 'Slowest-rank breakdown', rank0_local: 'Rank-0 local total',
  };

  const state = {
    timer: null, route: null, ctrl: null, lastReport: null, lastJob: null,
    hm: { metric: 'lag', sort: 'rank', rows: 'fit' },
  };

  // ---------- small DOM helpers ----------
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') n.className = v;
      else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, v === true ? '' : v);
    }
    for (const k of kids.flat(Infinity)) if (k != null && k !== false) n.append(k instanceof Node ? k : String(k));
    return n;
  }
  function sv(tag, attrs, ...kids) {
    const n = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null) n.setAttribute(k, v);
    for (const k of kids.flat(Infinity)) if (k != null && k !== false) n.append(k instanceof Node ? k : String(k));
    return n;
  }
  const $ = (id) => document.getElementById(id);

  // ---------- formatting ----------
  function fmtMs(ms) {
    if (ms == null || !isFinite(ms)) return '—';
    const a = Math.abs(ms);
    if (a >= 100000) return (ms / 1000).toFixed(0) + ' s';
    if (a >= 10000) return (ms / 1000).toFixed(1) + ' s';
    if (a >= 100) return ms.toFixed(0) + ' ms';
    if (a >= 10) return ms.toFixed(1) + ' ms';
    return ms.toFixed(2) + ' ms';
  }
  const fmtNum = (x, d = 1) => (x == null || !isFinite(x) ? '—' : Number(x).toFixed(d));
  const fmtPct = (x) => (x == null || !isFinite(x) ? '—' : (100 * x).toFixed(x < 0.1 ? 1 : 0) + '%');
  const fmtInt = (x) => (x == null ? '—' : Number(x).toLocaleString('en-US'));
  function stageColor(name, i) {
    return STAGE_COLORS[name] || EXTRA_COLORS[i % EXTRA_COLORS.length];
  }
  const short = (name) => SHORT[name] || name;
  function stageChip(name, stages) {
    const i = stages ? stages.indexOf(name) : 0;
    return el('span', { class: 'chip', title: name }, el('span', { class: 'sw', style: `background:${stageColor(name, i)}` }), short(name));
  }
  // niceTicks returns ~n round tick values covering [lo, hi].
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, n);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
    return out;
  }

  // ---------- API ----------
  class ApiError extends Error {
    constructor(status, message, field, path) {
      super(message);
      this.status = status; this.field = field; this.path = path;
    }
  }
  async function api(path, signal) {
    const url = new URL('api/v1/' + path, BASE);
    let res;
    try {
      res = await fetch(url, { headers: { Accept: 'application/json' }, signal });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'cannot reach the laggard server (' + e.message + ')', null, url.pathname);
    }
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { /* handled below */ }
    if (!res.ok || (body && typeof body.error === 'string')) {
      const msg = body && body.error ? body.error : (text.trim().slice(0, 200) || res.statusText);
      throw new ApiError(res.status, msg, body && body.field, url.pathname + url.search);
    }
    if (body == null) throw new ApiError(res.status, 'response is not JSON', null, url.pathname + url.search);
    return body;
  }

  // ---------- banner / status ----------
  function showError(err, context) {
    const b = $('banner');
    b.replaceChildren(
      el('strong', {}, err.status ? `API error ${err.status}` : 'Error'),
      el('div', { class: 'msg' },
        el('div', {}, (context ? context + ': ' : '') + err.message),
        el('div', { class: 'detail' }, [err.path ? 'GET ' + err.path : null, err.field ? `field: ${err.field}` : null].filter(Boolean).join('  ·  '))),
      el('button', { title: 'Dismiss', onclick: () => { b.hidden = true; } }, '×'));
    b.hidden = false;
  }
  const clearError = () => { $('banner').hidden = true; };
  function setUpdated(loading) {
    const u = $('updated');
    u.classList.toggle('loading', !!loading);
    if (!loading) u.textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
  }

  // ---------- routing ----------
  // #/ → job list; #/jobs/<id>?last=N | ?from=A&to=B [&tau=..&model_fit=..]
  function parseHash() {
    const h = location.hash.replace(/^#/, '') || '/';
    const [p, q] = h.split('?');
    const params = new URLSearchParams(q || '');
    const m = p.match(/^\/jobs\/([^/]+)\/?$/);
    if (m) return { view: 'job', id: decodeURIComponent(m[1]), params };
    return { view: 'list', params };
  }
  function jobHash(id, params) {
    const q = params && params.toString();
    return '#/jobs/' + encodeURIComponent(id) + (q ? '?' + q : '');
  }
  function setCrumbs(route) {
    const c = $('crumbs');
    if (route.view === 'list') c.replaceChildren(el('span', {}, 'Jobs'));
    else c.replaceChildren(el('a', { href: '#/' }, 'Jobs'), el('span', { class: 'sep' }, '/'), el('span', {}, route.id));
  }

  function navigate() {
    if (state.ctrl) state.ctrl.abort();
    state.route = parseHash();
    state.lastReport = null;
    state.sig = null;
    hideTip();
    clearError();
    setCrumbs(state.route);
    $('main').replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    load();
  }
  function schedule() {
    clearTimeout(state.timer);
    if ($('autorefresh').checked) state.timer = setTimeout(load, REFRESH_MS);
  }
  async function load() {
    clearTimeout(state.timer);
    if (state.ctrl) state.ctrl.abort();
    const ctrl = (state.ctrl = new AbortController());
    const route = state.route;
    setUpdated(true);
    try {
      if (route.view === 'list') await loadList(ctrl.signal);
      else await loadJob(route, ctrl.signal);
      clearError();
    } catch (e) {
      if (e.name === 'AbortError') return;
      showError(e, route.view === 'list' ? 'listing jobs' : `loading job ${route.id}`);
      if (route.view === 'job' && !state.lastReport) {
        $('main').replaceChildren(el('div', { class: 'empty' }, 'No report to show. ', el('a', { href: '#/' }, '← back to jobs')));
      }
    } finally {
      if (state.ctrl === ctrl) { setUpdated(false); schedule(); }
    }
  }

  // ---------- job list ----------
  async function loadList(signal) {
    const body = await api('jobs', signal);
    const sig = JSON.stringify(body);
    if (sig === state.sig && $('main').querySelector('table')) return;
    state.sig = sig;
    const jobs = (body.jobs || []).slice().sort((a, b) => String(b.created || '').localeCompare(String(a.created || '')) || a.id.localeCompare(b.id));
    if (!jobs.length) {
      $('main').replaceChildren(el('div', { class: 'card empty' }, 'No jobs registered yet. Instrumented trainers register with ', el('code', {}, 'PUT /api/v1/jobs/{id}'), '.'));
      return;
    }
    const rows = jobs.map((j) => {
      const seen = j.vectors > 0 ? j.last_step - j.first_step + 1 : null;
      const href = jobHash(j.id, null);
      return el('tr', { class: 'click', onclick: () => { location.hash = href; } },
        el('td', { style: 'white-space:nowrap' }, el('a', { href, class: 'mono' }, j.id)),
        el('td', {}, j.name || el('span', { class: 'muted' }, '—')),
        el('td', { class: 'num' }, fmtInt(j.world_size)),
        el('td', { class: 'num' }, seen == null ? '—' : fmtInt(seen)),
        el('td', { class: 'num' }, j.vectors > 0 ? fmtInt(j.last_step) : '—'),
        el('td', { class: 'num' }, fmtInt(j.vectors)),
        el('td', { class: 'mono', style: 'white-space:nowrap', title: ((j.schema && j.schema.stages) || []).join(' → ') }, (j.schema && j.schema.version) || '—', ' · ', String(((j.schema && j.schema.stages) || []).length), ' stages'),
        el('td', {}, Object.entries(j.labels || {}).map(([k, v]) => el('span', { class: 'chip', style: 'margin-right:4px' }, `${k}=${v}`))),
        el('td', { class: 'mono muted', style: 'white-space:nowrap' }, j.created ? j.created.replace('T', ' ').replace(/\.\d+/, '').replace('Z', ' UTC') : '—'));
    });
    $('main').replaceChildren(el('div', { class: 'card' },
      el('h2', {}, 'Jobs', el('span', { class: 'sub' }, `${jobs.length} registered`)),
      el('table', { class: 't' },
        el('thead', {}, el('tr', {}, ['id', 'name'].map((h) => el('th', {}, h)),
          ['world size', 'steps seen', 'last step', 'vectors'].map((h) => el('th', { class: 'num' }, h)),
          ['schema', 'labels', 'created'].map((h) => el('th', {}, h)))),
        el('tbody', {}, rows))));
  }

  // ---------- job view ----------
  function reportQuery(params) {
    const q = new URLSearchParams();
    if (params.get('from') != null || params.get('to') != null) {
      if (params.get('from')) q.set('from', params.get('from'));
      if (params.get('to')) q.set('to', params.get('to'));
    } else q.set('last', params.get('last') || '200');
    for (const k of ['tau', 'model_fit']) if (params.get(k) != null) q.set(k, params.get(k));
    return q;
  }
  async function loadJob(route, signal) {
    const id = encodeURIComponent(route.id);
    const [rep, job] = await Promise.all([
      api(`jobs/${id}/report?` + reportQuery(route.params), signal),
      api(`jobs/${id}`, signal).catch((e) => (e.name === 'AbortError' ? Promise.reject(e) : null)),
    ]);
    // Skip identical refreshes: no flicker, hover and scroll stay put.
    const sig = JSON.stringify([rep, job]);
    if (sig === state.sig && $('main').querySelector('.grid')) return;
    state.sig = sig;
    state.lastReport = rep;
    state.lastJob = job;
    renderJob(route, rep, job);
  }

  function renderJob(route, rep, job) {
    const stages = rep.stages || [];
    const main = $('main');
    const wrapScroll = main.querySelector('.hm-wrap');
    const keepScroll = wrapScroll ? wrapScroll.scrollTop : 0;
    const step = el('div', { class: 'chart' });
    const share = el('div', {});
    const heat = el('div', {});
    main.replaceChildren(
      jobHeader(route, rep, job),
      el('div', { class: 'grid' },
        el('div', { class: 'card span2' }, headline(rep)),
        el('div', { class: 'card' }, el('h2', {}, 'Step time', el('span', { class: 'sub' }, 'exposed makespan F[t,S] per step, stacked by frontier advance a[t,s]')),
          legend(stages), step),
        el('div', { class: 'card' }, el('h2', {}, 'Stage share of exposed time', el('span', { class: 'sub' }, rep.raw_only ? 'raw advances (shares withheld)' : 'Σ advance / Σ exposed')), share),
        el('div', { class: 'stack' }, el('div', { class: 'card' }, heat), baselinesCard(rep)),
        labelsCard(rep)));
    drawStepChart(step, rep);
    drawShare(share, rep);
    drawHeatmap(heat, rep);
    const w = main.querySelector('.hm-wrap');
    if (w && wrapScroll) w.scrollTop = keepScroll;
  }

  function jobHeader(route, rep, job) {
    const p = route.params;
    const ranged = p.get('from') != null || p.get('to') != null;
    const last = ranged ? null : (p.get('last') || '200');
    const go = (params) => { location.hash = jobHash(route.id, params); };
    const seg = el('div', { class: 'seg', role: 'group', 'aria-label': 'window' }, ['50', '200', '1000'].map((n) =>
      el('button', { class: last === n ? 'on' : null, onclick: () => go(new URLSearchParams({ last: n })) }, `last ${n}`)));
    const from = el('input', { type: 'number', placeholder: 'from step', value: ranged ? p.get('from') : rep.first_step, 'aria-label': 'from step' });
    const to = el('input', { type: 'number', placeholder: 'to step', value: ranged ? p.get('to') : rep.last_step, 'aria-label': 'to step' });
    const apply = () => {
      const q = new URLSearchParams();
      if (from.value) q.set('from', from.value);
      if (to.value) q.set('to', to.value);
      go(q);
    };
    for (const i of [from, to]) i.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
    return el('div', { class: 'jobhead' },
      el('h1', { class: 'mono' }, rep.job_id || route.id),
      job && job.name ? el('span', { class: 'name' }, job.name) : null,
      el('span', { class: 'muted' }, `steps ${fmtInt(rep.first_step)}–${fmtInt(rep.last_step)} · ${fmtInt(rep.num_steps)} steps × ${fmtInt(rep.num_ranks)} ranks`),
      el('div', { class: 'winsel' }, el('span', { class: 'muted' }, 'Window'), seg,
        from, el('span', { class: 'muted' }, '–'), to, el('button', { class: 'btn', onclick: apply }, ranged ? 'Apply ✓' : 'Apply')));
  }

  function leaderHost(rep) {
    const r = (rep.ranks || []).find((x) => x.rank === rep.leader_rank);
    return r && r.host ? r.host : null;
  }

  function headline(rep) {
    const stages = rep.stages || [];
    const perStep = rep.num_steps ? rep.exposed_ms / rep.num_steps : null;
    const routing = rep.routing || [];
    const host = leaderHost(rep);
    const claim = el('div', { class: 'claim' },
      rep.top1 ? ['Routed to ', stageChip(rep.top1, stages), ' ', el('span', { class: 'muted' }, '(routing set {'),
        routing.map((s, i) => [i ? el('span', { class: 'muted' }, ', ') : null, el('b', { class: 'mono', style: 'font-size:14px' }, s)]),
        el('span', { class: 'muted' }, '})'), ', '] : 'No routing stage in this window, ',
      rep.leader_rank >= 0 ? [el('b', {}, `leader rank ${rep.leader_rank}`), host ? [' on host ', el('b', { class: 'mono' }, host)] : null]
        : el('span', { class: 'muted' }, 'no confident leader rank'),
      el('span', { class: 'muted' }, ` — ${fmtMs(perStep)}/step exposed.`));
    const kpis = el('div', { class: 'kpis' },
      kpi(fmtMs(perStep), 'exposed / step'),
      kpi(rep.share && rep.top1 ? fmtPct(rep.share[stages.indexOf(rep.top1)]) : '—', 'top-1 share'),
      kpi(String(routing.length), `set size (τ=${fmtNum(rep.config && rep.config.candidate_threshold, 2)})`),
      kpi(`${rep.leader_switches ?? '—'}`, `leader switches (${fmtPct(rep.leader_switch_rate)})`),
      kpi(rep.telescope_err_ms != null ? rep.telescope_err_ms.toExponential(1) : '—', 'telescope err ms'));
    const notes = [];
    if (rep.raw_only) notes.push(el('div', { class: 'note' }, '⚠ Window denominator is below the floor; percentages are withheld and raw advances are shown (StageFrontier §3).'));
    if ((rep.co_critical_stages || []).length) notes.push(el('div', { class: 'note' }, '≈ Co-critical stages: ', rep.co_critical_stages.map((s) => stageChip(s, stages)), ' — optimizing one may leave the other as the bottleneck.'));
    return [el('div', { class: 'headline' }, claim, kpis), ...notes];
  }
  const kpi = (v, k) => el('div', { class: 'kpi' }, el('div', { class: 'v' }, v), el('div', { class: 'k' }, k));

  function legend(stages) {
    return el('div', { class: 'legend' }, stages.map((s, i) =>
      el('span', { title: s }, el('span', { class: 'sw', style: `background:${stageColor(s, i)}` }), short(s))),
    el('span', {}, el('span', { class: 'sw', style: 'background:#1f2328;height:2px' }), 'exposed'));
  }

  // ---------- (a) step-time series ----------
  function drawStepChart(host, rep) {
    const pts = rep.step_series || [];
    const stages = rep.stages || [];
    if (!pts.length) { host.replaceChildren(el('div', { class: 'empty' }, 'No steps in window.')); return; }
    const W = Math.max(320, host.clientWidth || 800), H = 282;
    const m = { l: 52, r: 64, t: 10, b: 26 };
    const iw = W - m.l - m.r, ih = H - m.t - m.b;
    const ymax = Math.max(...pts.map((p) => p.exposed_ms)) * 1.06 || 1;
    const n = pts.length;
    const x = (i) => m.l + (n === 1 ? iw / 2 : (i * iw) / (n - 1));
    const y = (v) => m.t + ih - (v / ymax) * ih;
    const svg = sv('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'step time chart' });
    const yt = niceTicks(0, ymax, 5);
    svg.append(sv('g', { class: 'grid' }, yt.map((v) => sv('line', { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }))));
    // Stacked areas, first stage at the bottom (stage order = boundary order).
    const base = new Array(n).fill(0);
    stages.forEach((s, si) => {
      const top = pts.map((p, i) => base[i] + ((p.advance_ms || [])[si] || 0));
      let d = '';
      for (let i = 0; i < n; i++) d += (i ? 'L' : 'M') + x(i).toFixed(1) + ',' + y(top[i]).toFixed(1);
      for (let i = n - 1; i >= 0; i--) d += 'L' + x(i).toFixed(1) + ',' + y(base[i]).toFixed(1);
      svg.append(sv('path', { d: d + 'Z', fill: stageColor(s, si), 'fill-opacity': 0.82, stroke: 'none' }));
      for (let i = 0; i < n; i++) base[i] = top[i];
    });
    let line = '';
    pts.forEach((p, i) => { line += (i ? 'L' : 'M') + x(i).toFixed(1) + ',' + y(p.exposed_ms).toFixed(1); });
    svg.append(sv('path', { d: line, fill: 'none', stroke: '#1f2328', 'stroke-width': 1.3, 'stroke-linejoin': 'round' }));
    // Median reference so spikes read against the typical step.
    const sorted = pts.map((p) => p.exposed_ms).sort((a, b) => a - b);
    const p50 = sorted[Math.floor(sorted.length / 2)];
    svg.append(sv('line', { x1: m.l, x2: W - m.r, y1: y(p50), y2: y(p50), stroke: '#1f2328', 'stroke-dasharray': '4 3', 'stroke-opacity': 0.6 }),
      sv('text', { x: W - m.r + 6, y: y(p50) - 2, style: 'fill:#1f2328' }, 'p50'),
      sv('text', { x: W - m.r + 6, y: y(p50) + 11, style: 'fill:#1f2328' }, fmtMs(p50)));
    // Axes.
    const ax = sv('g', { class: 'axis' });
    ax.append(sv('line', { x1: m.l, x2: W - m.r, y1: m.t + ih, y2: m.t + ih }));
    const tstep = yt.length > 1 ? yt[1] - yt[0] : 1;
    yt.forEach((v) => ax.append(sv('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, tstep >= 1 ? v.toFixed(0) + ' ms' : fmtMs(v))));
    const s0 = pts[0].step, s1 = pts[n - 1].step;
    niceTicks(s0, s1, Math.max(2, Math.floor(iw / 90))).forEach((st) => {
      const i = pts.findIndex((p) => p.step >= st);
      if (i < 0) return;
      ax.append(sv('line', { x1: x(i), x2: x(i), y1: m.t + ih, y2: m.t + ih + 4 }),
        sv('text', { x: x(i), y: m.t + ih + 17, 'text-anchor': 'middle' }, String(st)));
    });
    svg.append(ax);
    // Hover: nearest step, guide line, tooltip with the stacked advances.
    const guide = sv('line', { y1: m.t, y2: m.t + ih, stroke: '#1f2328', 'stroke-width': 1, visibility: 'hidden' });
    const dot = sv('circle', { r: 3.5, fill: '#1f2328', visibility: 'hidden' });
    const hit = sv('rect', { x: m.l, y: m.t, width: iw, height: ih, fill: 'transparent' });
    svg.append(guide, dot, hit);
    const hostOf = (r) => { const s = (rep.ranks || []).find((x) => x.rank === r); return s && s.host ? ' (' + s.host + ')' : ''; };
    hit.addEventListener('mousemove', (ev) => {
      const rect = svg.getBoundingClientRect();
      const i = Math.max(0, Math.min(n - 1, Math.round(((ev.clientX - rect.left - m.l) / iw) * (n - 1))));
      const p = pts[i];
      guide.setAttribute('x1', x(i)); guide.setAttribute('x2', x(i)); guide.setAttribute('visibility', 'visible');
      dot.setAttribute('cx', x(i)); dot.setAttribute('cy', y(p.exposed_ms)); dot.setAttribute('visibility', 'visible');
      const rows = stages.map((s, si) => [s, si, (p.advance_ms || [])[si] || 0]).reverse();
      showTip(ev, el('div', {}, el('div', { class: 'tt-title' }, `step ${p.step} · ${fmtMs(p.exposed_ms)} exposed`),
        el('table', {}, rows.map(([s, si, a]) => el('tr', {},
          el('td', {}, el('span', { class: 'sw', style: `background:${stageColor(s, si)};margin-right:6px` }), short(s)),
          el('td', { class: 'num' }, fmtMs(a)),
          el('td', { class: 'num' }, p.exposed_ms > 0 ? fmtPct(a / p.exposed_ms) : '—')))),
        el('div', { style: 'margin-top:4px;color:#9da7b3' }, `final-boundary leader rank ${p.leader_rank}${hostOf(p.leader_rank)}, tie ${p.tie_size}, gap ${fmtMs(p.gap_ms)}`)));
    });
    hit.addEventListener('mouseleave', () => { guide.setAttribute('visibility', 'hidden'); dot.setAttribute('visibility', 'hidden'); hideTip(); });
    host.replaceChildren(svg);
  }

  // ---------- (b) stage-share bar ----------
  function drawShare(host, rep) {
    const stages = rep.stages || [];
    const raw = !!rep.raw_only || !rep.share;
    const adv = rep.advance_ms || [];
    const total = adv.reduce((a, b) => a + Math.max(0, b), 0);
    const val = stages.map((_, i) => (raw ? (total > 0 ? Math.max(0, adv[i]) / total : 0) : rep.share[i] || 0));
    const order = stages.map((_, i) => i).sort((a, b) => val[b] - val[a]);
    const routing = new Set(rep.routing || []);
    const cocrit = new Set(rep.co_critical_stages || []);
    const W = Math.max(280, host.clientWidth || 480), barY = 24, barH = 34, H = barY + barH + 26;
    const svg = sv('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'stage share bar' });
    svg.append(sv('defs', {}, sv('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
      sv('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#1f2328', 'stroke-width': 1.6, 'stroke-opacity': 0.35 }))));
    const sumV = val.reduce((a, b) => a + b, 0) || 1;
    let x0 = 0, routeEnd = 0, cum = 0;
    const tau = (rep.config && rep.config.candidate_threshold) || 0.8;
    for (const i of order) {
      const w = (val[i] / sumV) * W;
      const s = stages[i];
      const g = sv('g', {});
      g.append(sv('rect', { x: x0, y: barY, width: Math.max(0, w - 1), height: barH, fill: stageColor(s, i) }));
      if (cocrit.has(s)) g.append(sv('rect', { x: x0, y: barY, width: Math.max(0, w - 1), height: barH, fill: 'url(#hatch)' }));
      if (s === rep.top1) g.append(sv('rect', { x: x0 + 1, y: barY + 1, width: Math.max(0, w - 3), height: barH - 2, fill: 'none', stroke: '#1f2328', 'stroke-width': 2 }));
      if (w > 34) {
        const dark = ['#0072B2', '#CC79A7', '#009E73', '#332288', '#882255', '#117733', '#AA4499'].includes(stageColor(s, i));
        g.append(sv('text', { x: x0 + w / 2, y: barY + barH / 2 + 4, 'text-anchor': 'middle', style: `fill:${dark ? '#fff' : '#1f2328'};font-weight:600;font-size:12px` },
          raw ? fmtMs(adv[i]) : fmtPct(val[i])));
      }
      g.addEventListener('mousemove', (ev) => showTip(ev, shareTip(rep, i)));
      g.addEventListener('mouseleave', hideTip);
      svg.append(g);
      x0 += w;
      cum += val[i];
      if (routing.has(s)) routeEnd = x0;
    }
    // Routing-set bracket: the leading-share prefix reaching τ (§4).
    if (routeEnd > 0) {
      svg.append(sv('path', { d: `M1,${barY - 3}V${barY - 9}H${routeEnd - 2}V${barY - 3}`, fill: 'none', stroke: '#0b5cad', 'stroke-width': 1.5 }),
        sv('text', { x: 2, y: barY - 13, style: 'fill:#0b5cad;font-weight:600' }, `routing set (${routing.size}) — cumulative share ≥ τ=${tau}`));
    }
    if (!raw) {
      const tx = tau * W;
      svg.append(sv('line', { x1: tx, x2: tx, y1: barY - 2, y2: barY + barH + 5, stroke: '#1f2328', 'stroke-dasharray': '3 2' }),
        sv('text', { x: Math.min(W - 4, tx), y: barY + barH + 17, 'text-anchor': tx > W - 30 ? 'end' : 'middle' }, `τ ${Math.round(tau * 100)}%`));
    }
    // Table: the numbers behind the bar, in share order.
    const gains = rep.gain_ms || {};
    const gainKeys = Object.keys(gains).sort();
    const n = rep.num_steps || 1;
    const table = el('table', { class: 't', style: 'margin-top:8px' },
      el('thead', {}, el('tr', {}, el('th', {}, 'stage'), el('th', { class: 'num' }, raw ? 'advance' : 'share'), el('th', { class: 'num' }, 'ms/step'),
        gainKeys.map((k) => el('th', { class: 'num', title: `clipped direct-exposure gain G_s vs ${k} (§4 eq.4), per step` }, 'G ', k.replace('_median', ''))))),
      el('tbody', {}, order.map((i) => {
        const s = stages[i];
        return el('tr', {},
          el('td', { style: 'white-space:nowrap' }, stageChip(s, stages), ' ',
            s === rep.top1 ? el('span', { class: 'badge top1' }, 'top-1') : null,
            routing.has(s) && s !== rep.top1 ? el('span', { class: 'badge route' }, 'routing') : null, ' ',
            cocrit.has(s) ? el('span', { class: 'badge cocrit', title: 'co-critical (App. C ambiguity set)' }, '≈') : null),
          el('td', { class: 'num' }, raw ? fmtMs(adv[i]) : fmtPct(rep.share[i])),
          el('td', { class: 'num' }, fmtNum(adv[i] / n, 1)),
          gainKeys.map((k) => el('td', { class: 'num' }, fmtNum(((gains[k] || [])[i] || 0) / n, 1))));
      })));
    host.replaceChildren(svg, el('div', { style: 'overflow-x:auto' }, table));
  }
  function shareTip(rep, i) {
    const s = rep.stages[i];
    const n = rep.num_steps || 1;
    const rows = [['advance Σ', fmtMs(rep.advance_ms[i])], ['per step', fmtMs(rep.advance_ms[i] / n)]];
    if (rep.share && !rep.raw_only) rows.unshift(['share', fmtPct(rep.share[i])]);
    for (const [k, g] of Object.entries(rep.gain_ms || {})) rows.push([`gain vs ${k}`, fmtMs((g || [])[i])]);
    return el('div', {}, el('div', { class: 'tt-title' }, s), el('table', {}, rows.map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, v)))));
  }

  // ---------- (c) rank × stage heatmap ----------
  const METRICS = {
    lag: { key: 'lag_ms', label: 'lag', perStep: true, diverging: false, agg: 'min', ramp: 'blue', help: 'Σ(F − P) ÷ steps: slack behind the frontier at each boundary (§3 eq.3); 0 = this rank sets the frontier' },
    delta_lag: { key: 'delta_lag_ms', label: 'Δ lag', perStep: true, diverging: true, agg: 'extreme', ramp: 'div', help: '(lag[s] − lag[s−1]) ÷ steps: − = the rank spent longer in the stage than the frontier advanced' },
    mean_stage_ms: { key: 'mean_stage_ms', label: 'mean stage', perStep: false, diverging: false, agg: 'max', ramp: 'seq', help: 'mean raw stage duration on the rank (includes waits it observed)' },
  };
  const SEQ = [[255, 247, 236], [253, 212, 158], [252, 141, 89], [215, 48, 31], [127, 0, 0]];
  const BLUE = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  const DIV = [[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130], [178, 24, 43]];
  function ramp(stops, t) {
    t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i;
    const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }

  function drawHeatmap(host, rep) {
    const stages = rep.stages || [];
    const ranks = rep.ranks || [];
    const M = METRICS[state.hm.metric];
    const n = M.perStep ? rep.num_steps || 1 : 1;
    const value = (r, s) => ((r[M.key] || [])[s] || 0) / n;
    const S = stages.length;
    // "more suspicious" per metric: the frontier-setting rank has the
    // smallest lag, the slow rank the largest stage time, Δ lag either sign.
    const worse = M.agg === 'min' ? (a, b) => a < b : M.agg === 'max' ? (a, b) => a > b : (a, b) => Math.abs(a) > Math.abs(b);
    // Row order: by rank id, or suspects first by the routed stage's column.
    const order = ranks.slice().sort((a, b) => a.rank - b.rank);
    const top = Math.max(0, stages.indexOf(rep.top1));
    if (state.hm.sort === 'value') order.sort((a, b) => (worse(value(a, top), value(b, top)) ? -1 : worse(value(b, top), value(a, top)) ? 1 : a.rank - b.rank));
    // Bucketing keeps 1,024+ ranks readable: each row shows the bucket's
    // most suspicious value so a straggler is never averaged away.
    const MAXROWS = 128;
    const k = state.hm.rows === 'fit' && order.length > MAXROWS ? Math.ceil(order.length / MAXROWS) : 1;
    const rows = [];
    for (let i = 0; i < order.length; i += k) rows.push(order.slice(i, i + k));
    const cell = rows.map((b) => stages.map((_, s) => {
      let best = null;
      for (const r of b) { const v = value(r, s); if (best === null || worse(v, best.v)) best = { v, r }; }
      return best;
    }));
    let lo = Infinity, hi = -Infinity;
    for (const row of cell) for (const c of row) { lo = Math.min(lo, c.v); hi = Math.max(hi, c.v); }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    const amax = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    const smin = M.diverging ? -amax : Math.min(0, lo), smax = M.diverging ? amax : hi > smin ? hi : smin + 1;
    const stops = { seq: SEQ, blue: BLUE, div: DIV }[M.ramp];
    const color = (v) => ramp(stops, (v - smin) / (smax - smin));

    const rowH = rows.length <= 24 ? 20 : rows.length <= 64 ? 13 : rows.length <= 128 ? 8 : 12;
    const labelW = 150, leaderIdx = rows.findIndex((b) => b.some((r) => r.rank === rep.leader_rank));
    const wrap = el('div', { class: 'hm-wrap' });
    const cols = el('div', { class: 'hm-cols' });
    const aggName = { min: 'min', max: 'max', extreme: 'max |v|' }[M.agg];
    const head = el('div', { class: 'hm-head' },
      el('h2', { style: 'margin:0' }, 'Rank × stage', el('span', { class: 'sub' }, `${fmtInt(ranks.length)} ranks`)),
      el('span', { style: 'margin-left:auto' }, 'metric '), seg3(Object.entries(METRICS).map(([id, m]) => [id, m.label]), state.hm.metric, (v) => { state.hm.metric = v; drawHeatmap(host, rep); }),
      el('span', {}, 'sort '), select([['rank', 'rank id'], ['value', `suspects first (${short(rep.top1 || stages[0] || '')})`]], state.hm.sort, (v) => { state.hm.sort = v; drawHeatmap(host, rep); }),
      ranks.length > MAXROWS ? [el('span', {}, 'rows '), select([['fit', `≤${MAXROWS}`], ['all', 'all']], state.hm.rows, (v) => { state.hm.rows = v; drawHeatmap(host, rep); })] : null);
    host.replaceChildren(head, el('div', { class: 'muted', style: 'font-size:12px;margin:-2px 0 6px' }, M.help, k > 1 ? el('b', {}, ` · ${k} ranks per row, showing the ${aggName}`) : null), cols, wrap, heatLegend(M, smin, smax, color, rep, leaderIdx >= 0));
    const W = Math.max(300, wrap.clientWidth || 600);
    const cw = (W - labelW) / Math.max(1, S);
    stages.forEach((s, i) => cols.append(el('span', { style: `left:${labelW + i * cw}px;width:${cw}px`, title: s }, short(s))));
    const H = rows.length * rowH;
    const dpr = window.devicePixelRatio || 1;
    const cv = el('canvas', { width: Math.round(W * dpr), height: Math.round(H * dpr), style: `width:${W}px;height:${H}px` });
    const g = cv.getContext('2d');
    g.scale(dpr, dpr);
    g.font = `${Math.min(12, rowH - 2)}px ui-monospace, "DejaVu Sans Mono", monospace`;
    g.textBaseline = 'middle';
    const labelEvery = rowH >= 11 ? 1 : Math.ceil(12 / rowH);
    rows.forEach((b, ri) => {
      const y0 = ri * rowH;
      cell[ri].forEach((c, si) => { g.fillStyle = color(c.v); g.fillRect(labelW + si * cw, y0, Math.ceil(cw) - (cw > 8 ? 1 : 0), rowH - (rowH > 6 ? 1 : 0)); });
      const isLeader = ri === leaderIdx;
      if (isLeader) { g.fillStyle = '#fee2e2'; g.fillRect(0, y0, labelW - 4, rowH); }
      if (ri % labelEvery === 0 || isLeader) {
        const r = b[0];
        const txt = b.length > 1 ? `r${b[0].rank}…${b[b.length - 1].rank}` : `r${r.rank}${r.host ? ' ' + r.host : ''}`;
        g.fillStyle = isLeader ? '#991b1b' : '#57606a';
        g.font = `${isLeader ? 'bold ' : ''}${Math.min(12, Math.max(9, rowH - 2))}px ui-monospace, "DejaVu Sans Mono", monospace`;
        g.fillText((isLeader ? '▶ ' : '') + txt, 4, y0 + rowH / 2, labelW - 10);
      }
      // Values in cells when they fit.
      if (rowH >= 18 && cw >= 48) {
        g.font = '11px ui-monospace, "DejaVu Sans Mono", monospace';
        cell[ri].forEach((c, si) => {
          const t = (c.v - smin) / (smax - smin);
          g.fillStyle = (M.diverging ? Math.abs(t - 0.5) > 0.3 : t > 0.55) ? '#fff' : '#1f2328';
          g.textAlign = 'center';
          g.fillText(fmtNum(c.v, Math.abs(c.v) >= 100 ? 0 : 1), labelW + si * cw + cw / 2, y0 + rowH / 2);
          g.textAlign = 'start';
        });
      }
    });
    if (leaderIdx >= 0) {
      g.strokeStyle = '#b42318'; g.lineWidth = 2;
      g.strokeRect(labelW + 1, leaderIdx * rowH + 1, W - labelW - 2, rowH - 2 - (rowH > 6 ? 1 : 0) + 1);
    }
    cv.addEventListener('mousemove', (ev) => {
      const rect = cv.getBoundingClientRect();
      const ri = Math.floor((ev.clientY - rect.top) / rowH), si = Math.floor((ev.clientX - rect.left - labelW) / cw);
      if (ri < 0 || ri >= rows.length || si < 0 || si >= S) { hideTip(); return; }
      const c = cell[ri][si], r = c.r, b = rows[ri];
      const per = rep.num_steps || 1;
      showTip(ev, el('div', {},
        el('div', { class: 'tt-title' }, `rank ${r.rank}${r.host ? ' · ' + r.host : ''}${r.rank === rep.leader_rank ? ' · leader' : ''}`),
        b.length > 1 ? el('div', { style: 'color:#9da7b3' }, `row = ranks ${b[0].rank}…${b[b.length - 1].rank} (${b.length}); showing the ${aggName} (rank ${r.rank})`) : null,
        el('div', { style: 'margin-bottom:3px' }, stages[si]),
        el('table', {}, [
          ['lag / step', fmtMs(((r.lag_ms || [])[si] || 0) / per)],
          ['Δ lag / step', fmtMs(((r.delta_lag_ms || [])[si] || 0) / per)],
          ['mean stage', fmtMs((r.mean_stage_ms || [])[si])],
          ['leads boundary', `${(r.lead_count || [])[si] ?? '—'} / ${per} steps`],
          ['rank total / step', fmtMs((r.total_ms || 0) / per)],
        ].map(([k2, v]) => el('tr', {}, el('td', {}, k2), el('td', { class: 'num' }, v))))));
    });
    cv.addEventListener('mouseleave', hideTip);
    wrap.append(cv);
    const key = `${rep.job_id}|${k}|${state.hm.sort}`;
    if (leaderIdx >= 0 && state.hm.scrolled !== key) {
      state.hm.scrolled = key;
      const y = leaderIdx * rowH;
      if (y + rowH > wrap.clientHeight) wrap.scrollTop = Math.max(0, y - wrap.clientHeight / 2);
    }
  }
  function heatLegend(M, smin, smax, color, rep, hasLeader) {
    const W = 220, H = 10;
    const c = el('canvas', { width: W, height: H, style: `width:${W}px;height:${H}px;border-radius:2px` });
    const g = c.getContext('2d');
    for (let i = 0; i < W; i++) { g.fillStyle = color(smin + ((smax - smin) * i) / (W - 1)); g.fillRect(i, 0, 1, H); }
    const unit = M.perStep ? 'ms/step' : 'ms';
    return el('div', { class: 'hm-foot' },
      el('span', {}, M.label + ' (' + unit + ')'),
      el('span', { class: 'mono' }, fmtNum(smin, 1)), c, el('span', { class: 'mono' }, fmtNum(smax, 1)),
      hasLeader ? el('span', {}, el('span', { class: 'badge leader' }, `▶ leader rank ${rep.leader_rank}`), ' outlined') : el('span', {}, 'no confident leader'));
  }
  function seg3(opts, cur, onchange) {
    return el('div', { class: 'seg' }, opts.map(([v, l]) => el('button', { class: v === cur ? 'on' : null, onclick: () => onchange(v) }, l)));
  }
  function select(opts, cur, onchange) {
    const s = el('select', { onchange: (e) => onchange(e.target.value) }, opts.map(([v, l]) => el('option', { value: v, selected: v === cur }, l)));
    return s;
  }

  // ---------- (d) labels, contract, quality ----------
  function labelsCard(rep) {
    const stages = rep.stages || [];
    const labels = rep.labels || [];
    const cfg = rep.config || {};
    const q = rep.quality || {};
    const items = labels.length ? labels.map((l) => {
      const ax = String(l.axis || '').toLowerCase().replace(/[\s-]+/g, '_');
      return el('div', { class: 'label', style: `border-left-color:${AXIS_COLORS[ax] || '#8c959f'}` },
        el('div', { class: 'top' }, el('span', { class: 'nm' }, l.name), el('span', { class: 'axis' }, l.axis || ''), l.stage ? stageChip(l.stage, stages) : null),
        l.reason ? el('div', { class: 'why' }, l.reason) : null);
    }) : [el('div', { class: 'muted' }, 'No labels emitted.')];
    const qi = (k, v, bad, title) => el('div', { class: 'q' + (bad ? ' bad' : ''), title: title || null }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v));
    const missing = q.missing_ranks || [];
    const qual = el('div', { class: 'qgrid' },
      qi('missing ranks', missing.length ? missing.slice(0, 8).join(', ') + (missing.length > 8 ? ` +${missing.length - 8}` : '') : '0', missing.length > (cfg.max_missing_ranks || 0)),
      qi('missing cells', fmtInt(q.missing_cells), q.missing_cells > 0),
      qi('max closure share', fmtPct(q.max_closure_share), cfg.closure_residual_share != null && q.max_closure_share > cfg.closure_residual_share, `gate ${fmtPct(cfg.closure_residual_share)}`),
      qi('max overlap share', fmtPct(q.max_overlap_share), cfg.overlap_error_share != null && q.max_overlap_share > cfg.overlap_error_share, `gate ${fmtPct(cfg.overlap_error_share)}`),
      qi('dropped / nested', `${fmtInt(q.dropped)} / ${fmtInt(q.nested)}`, q.dropped > 0 || q.nested > 0),
      qi('event samples', `${fmtInt(q.event_samples)} · ${fmtPct(q.event_ready_ratio)} ready`,
        q.event_samples > 0 && (q.event_samples < (cfg.min_event_samples || 0) || q.event_ready_ratio < (cfg.event_ready_ratio || 0)),
        `gates: ≥${cfg.min_event_samples} samples, ≥${fmtPct(cfg.event_ready_ratio)} ready`),
      qi('role groups', fmtInt(q.role_groups), q.role_groups > 1));
    const contract = rep.contract || [];
    return el('div', { class: 'card' },
      el('h2', {}, 'Evidence labels', el('span', { class: 'sub' }, `${labels.length} emitted · App. B`)),
      el('div', { class: 'labels' }, items),
      el('div', { class: 'sectionsub' }, `Contract checks (${contract.length})`),
      contract.length ? el('ul', { class: 'findings' }, contract.map((c) => el('li', {}, c))) : el('div', { class: 'muted', style: 'font-size:12px' }, 'No findings.'),
      el('div', { class: 'sectionsub' }, 'Telemetry quality'), qual);
  }

  // ---------- (e) baselines ----------
  function baselinesCard(rep) {
    const stages = rep.stages || [];
    const chips = (xs) => (xs || []).map((s) => [stageChip(s, stages), ' ']);
    const rows = [{ method: 'StageFrontier', top1: rep.top1, top2: rep.top2, routing: rep.routing, total_ms: rep.exposed_ms, sf: true }]
      .concat(rep.baselines || []);
    return el('div', { class: 'card' },
      el('h2', {}, 'Baselines', el('span', { class: 'sub' }, 'same window, other stage-attribution rules (§6.2)')),
      el('table', { class: 't' },
        el('thead', {}, el('tr', {}, el('th', {}, 'method'), el('th', {}, 'top-1'), el('th', {}, 'top-2'), el('th', { class: 'num' }, 'set'), el('th', { class: 'num', title: 'what the summary claims the window costs, relative to the exposed makespan' }, 'claimed / exposed'))),
        el('tbody', {}, rows.map((b) => {
          const agree = b.sf || b.top1 === rep.top1;
          return el('tr', { class: b.sf ? 'sf' : null },
            el('td', {}, BASELINE_NAMES[b.method] || b.method),
            el('td', { class: agree ? null : 'diff', title: agree ? null : 'disagrees with StageFrontier top-1' }, b.top1 ? stageChip(b.top1, stages) : '—', agree ? '' : ' ≠'),
            el('td', {}, chips(b.top2)),
            el('td', { class: 'num', title: (b.routing || []).join(', ') }, String((b.routing || []).length)),
            el('td', { class: 'num' }, rep.exposed_ms > 0 && b.total_ms != null ? '×' + fmtNum(b.total_ms / rep.exposed_ms, 2) : '—'));
        }))));
  }

  // ---------- tooltip ----------
  function showTip(ev, content) {
    const t = $('tooltip');
    t.replaceChildren(content);
    t.hidden = false;
    const pad = 14, r = t.getBoundingClientRect();
    let x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
    if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - pad);
    t.style.left = x + 'px';
    t.style.top = y + 'px';
  }
  function hideTip() { $('tooltip').hidden = true; }

  // ---------- boot ----------
  const ar = $('autorefresh');
  try { ar.checked = localStorage.getItem('laggard.autorefresh') !== 'off'; } catch (e) { /* storage blocked */ }
  ar.addEventListener('change', () => {
    try { localStorage.setItem('laggard.autorefresh', ar.checked ? 'on' : 'off'); } catch (e) { /* ignore */ }
    if (ar.checked) load(); else clearTimeout(state.timer);
  });
  let resizeT = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeT);
    resizeT = setTimeout(() => { if (state.route && state.route.view === 'job' && state.lastReport) renderJob(state.route, state.lastReport, state.lastJob); }, 150);
  });
  window.addEventListener('hashchange', navigate);
  navigate();
})();
