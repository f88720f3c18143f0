// The job page's "Operators · KAIR" section: operator-level traces
// (torch.profiler) recorded on every rank for a few steps and analysed by
// KAIR (§III): which rank (Stage 1, the K-S divergence of the ranks'
// completion rhythms, Fig. 4), which of its operators (Stage 2, a_i) and
// why (Stage 3, the blame walk over the step's dependency DAG).
//
// Reads GET /api/v1/jobs/<id>/captures (the capture list), GET …/kair
// ?capture=<cid> (capture + TraceReport; 409 with the reason when fewer
// than two ranks uploaded) and GET …/kair/timeline?capture=&step= (one
// step's events per rank on the aligned clock); "Capture now" POSTs
// …/captures. View state in the URL hash: kair_capture, kair_step.
//
// Every string from the API reaches the page as text (el() and canvas
// fillText), never as markup. A 404 on the capture list (a server without
// KAIR) leaves the section out.
import { el, sv, card, showTip, hideTip, tipTable } from './dom.js';
import { ApiError, cachedJSON } from './api.js';
import { currentToken, signIn } from './signin.js';
import { fmtInt, fmtNum, fmtDate } from './format.js';
import { RAMPS, rampRGB } from './heatmap.js';
import { go } from './state.js';

const BASE = new URL('../../', import.meta.url);
const jobBase = (id) => `jobs/${encodeURIComponent(id)}/`;

export const NO_CAPTURES = 'No captures yet — Capture now, or the server triggers one when a straggler appears.';

const STATE_HELP = {
  pending: 'waiting for the ranks to pick the plan up',
  recording: 'ranks are recording and uploading their traces',
  complete: 'every asked rank uploaded',
  partial: 'the deadline passed with some ranks missing',
  expired: 'the deadline passed before enough ranks uploaded',
  cancelled: 'cancelled by an operator',
};
const VERDICT = { culprit: 'root cause found', culprit_rank: 'culprit rank found', none: 'nothing to blame', inconclusive: 'inconclusive' };
const RHYTHM = { straggler: 'straggler', none: 'rhythms agree', inconclusive: 'inconclusive' };
const KIND = { op: 'operator', edge: 'dependency edge', inconclusive: 'inconclusive' };
const CAT_COLOR = {
  cpu_op: '#56B4E9', gpu_kernel: '#0072B2', memcpy: '#009E73', memset: '#44AA99', collective: '#E69F00',
  user_range: '#CC79A7', runtime: '#882255', python: '#999933', other: '#A0A4A8',
};

// ---------- formatting ----------

function fmtNS(ns) {
  if (ns == null || !isFinite(ns)) return '—';
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 1 : 2) + ' s';
  if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e8 ? 0 : a >= 1e7 ? 1 : 2) + ' ms';
  if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e5 ? 0 : 1) + ' µs';
  return Math.round(ns) + ' ns';
}

// fmtP is a p-value; the engine writes -1 for "no sample" (JSON has no NaN).
function fmtP(p) {
  if (p == null || !(p >= 0) || !isFinite(p)) return 'no sample';
  if (p === 0) return '< 1e-300';
  if (p < 0.001) return p.toExponential(1);
  return p.toFixed(3);
}

const len = (a) => (Array.isArray(a) ? a.length : 0);
// stepName: the engine analyses a capture without step numbers whole (-1).
const stepName = (s) => (s < 0 ? 'the whole capture' : `step ${fmtInt(s)}`);

// ---------- K-S p-value (stats.KSPValue, mirrored) ----------
// kolmogorovSF is P(K > x) for the Kolmogorov distribution.
function kolmogorovSF(x) {
  if (!(x > 0)) return 1;
  if (x < 1) {
    const c = (-Math.PI * Math.PI) / (8 * x * x);
    let s = 0;
    for (let j = 1; j <= 20; j++) {
      const t = Math.exp((2 * j - 1) * (2 * j - 1) * c);
      s += t;
      if (t < 1e-17 * s) break;
    }
    return 1 - (Math.sqrt(2 * Math.PI) / x) * s;
  }
  let s = 0;
  let sign = 1;
  for (let j = 1; j <= 100; j++) {
    const t = Math.exp(-2 * j * j * x * x);
    s += sign * t;
    if (t < 1e-17) break;
    sign = -sign;
  }
  return Math.min(Math.max(2 * s, 0), 1);
}

// pairP is the asymptotic two-sample K-S p-value of D for two ranks'
// completion counts (Stephens' correction), as the engine computes it;
// null when a rank has no completions.
export function pairP(d, nA, nB) {
  if (!(nA > 0) || !(nB > 0)) return null;
  const ne = (nA * nB) / (nA + nB);
  const s = Math.sqrt(ne);
  return kolmogorovSF((s + 0.12 + 0.11 / s) * d);
}

// ---------- loading ----------
// After a POST the next load of that job's KAIR routes bypasses the cache.
const dirty = new Set();
// lastPost is the result of the latest "Capture now", shown after the
// re-render it causes: {job, capture} or {job, error}.
let lastPost = null;

function settle(promise) {
  return promise.then((v) => ({ v }), (e) => {
    if (e.name === 'AbortError') throw e;
    return { e };
  });
}

const intParam = (p, k) => {
  const v = p.get(k);
  return v != null && /^-?\d+$/.test(v) ? Number(v) : null;
};

// defaultCapture is the one the API reports by default: the newest with
// an upload, else the newest.
function defaultCapture(caps) {
  return caps.find((c) => len(c.uploaded) > 0) || caps[0] || null;
}

// defaultStep is the analysed step the blame chain opens on: the step of
// the top cause when it was analysed, else the first analysed step.
function defaultStep(rep) {
  const an = (rep && rep.analysed) || [];
  const c = ((rep && rep.causes) || [])[0];
  if (c && an.includes(c.step)) return c.step;
  return an.length ? an[0] : null;
}

// loadKair never rejects (the page must not fail for it): {missing} when
// the server has no capture list for the job (404), {error}, {aborted},
// or {caps, cap, rep, step, tl} with rep and tl {v} or {e}.
export async function loadKair(id, params, signal, fresh) {
  const base = jobBase(id);
  if (dirty.has(id)) {
    fresh = true;
    dirty.delete(id);
  }
  if (lastPost && lastPost.job !== id) lastPost = null;
  try {
    let list;
    try {
      list = await cachedJSON(base + 'captures', signal, fresh);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      if (e.status === 404) return { missing: true, message: e.message };
      return { error: e };
    }
    const caps = (list && list.captures) || [];
    const want = params.get('kair_capture');
    const cap = (want && caps.find((c) => c.id === want)) || defaultCapture(caps);
    if (!cap) return { caps, cap: null, post: lastPost };
    const rep = await settle(cachedJSON(base + 'kair?capture=' + encodeURIComponent(cap.id), signal, fresh));
    const r = rep.v && rep.v.report;
    let step = null;
    let tl = null;
    if (r) {
      const pick = intParam(params, 'kair_step');
      step = pick != null && (r.analysed || []).includes(pick) ? pick : defaultStep(r);
      if (step != null) {
        // Step -1: the traces carry no step numbers and the capture was
        // analysed whole (the route takes no step then).
        tl = await settle(cachedJSON(base + `kair/timeline?capture=${encodeURIComponent(cap.id)}${step >= 0 ? '&step=' + step : ''}`, signal, fresh));
      }
    }
    return { caps, cap: (rep.v && rep.v.capture) || cap, rep, step, tl, post: lastPost };
  } catch (e) {
    if (e.name === 'AbortError') return { aborted: true };
    return { error: e };
  }
}

// kairSig changes when an auto-refresh should redraw the section: a
// capture changes state or gains an upload, the report or timeline
// appears, changes or fails.
export function kairSig(kr) {
  if (!kr || kr.missing) return 'missing';
  if (kr.error || kr.aborted) return 'error';
  const caps = (kr.caps || []).map((c) => [c.id, c.state, len(c.fetched), len(c.uploaded), Object.keys(c.failed || {}).length].join('/')).join(',');
  const st = (x) => (!x ? '-' : x.e ? 'e' + x.e.status + x.e.message : 'ok');
  const r = kr.rep && kr.rep.v && kr.rep.v.report;
  const body = JSON.stringify([caps, kr.cap && kr.cap.id, st(kr.rep), st(kr.tl), kr.step, r && r.headline, r && r.analysed, r && r.events]);
  let h = 2166136261; // FNV-1a
  for (let i = 0; i < body.length; i++) h = Math.imul(h ^ body.charCodeAt(i), 16777619) >>> 0;
  return `${body.length}:${h}`;
}

// postCapture asks the server for a manual capture (POST …/captures).
async function postCapture(id, body) {
  const url = new URL('api/v1/' + jobBase(id) + 'captures', BASE);
  const where = 'POST ' + url.pathname;
  for (;;) {
    const h = { Accept: 'application/json', 'Content-Type': 'application/json' };
    const t = currentToken();
    if (t) h.Authorization = 'Bearer ' + t;
    let res;
    try {
      res = await fetch(url, { method: 'POST', headers: h, body: JSON.stringify(body) });
    } catch (e) {
      throw new ApiError(0, 'cannot reach the laggard server (' + e.message + ')', null, where);
    }
    const text = await res.text();
    let b = null;
    try {
      b = text ? JSON.parse(text) : null;
    } catch (e) {
      // not JSON: reported below with the body's first line
    }
    if (res.status === 401) {
      await signIn((b && b.error) || res.statusText);
      continue;
    }
    if (!res.ok || (b && typeof b.error === 'string')) {
      throw new ApiError(res.status, b && b.error ? b.error : text.trim().slice(0, 200) || res.statusText, b && b.field, where);
    }
    if (!b || typeof b.id !== 'string') throw new ApiError(res.status, 'the response is not a capture', null, where);
    return b;
  }
}

// ---------- the section ----------
export function kairView(kr, ctx = {}) {
  const head = (sub) => el('h2', { id: 'kr-title', class: 'kr-title' }, 'Operators · KAIR', sub ? el('span', { class: 'sub' }, sub) : null);
  if (!kr || kr.aborted || kr.missing) return { node: null, draw() {} };
  if (kr.error) {
    return { node: el('section', { class: 'card kr', id: 'kair', 'aria-labelledby': 'kr-title' }, head(),
      el('p', { class: 'error-line kr-error', role: 'alert' }, `Cannot load the operator captures: ${kr.error.message}`,
        kr.error.path ? ` (GET ${kr.error.path})` : '')), draw() {} };
  }
  const draws = [];
  const parts = [capturesCard(kr, ctx)];
  if (kr.cap) parts.push(...reportParts(kr, draws));
  const node = el('section', { class: 'kr', id: 'kair', 'aria-labelledby': 'kr-title' },
    head('operator traces from torch.profiler on every rank for a few steps: which rank (Stage 1), which operators (Stage 2) and why (Stage 3) — KAIR §III'),
    parts);
  return { node, draw() { for (const d of draws) d(); } };
}

// ---------- captures ----------
function capturesCard(kr, ctx) {
  const caps = kr.caps || [];
  const reason = el('input', { type: 'text', class: 'kr-reason', name: 'kair_reason', maxlength: 200, placeholder: 'reason (optional)', 'aria-label': 'capture reason' });
  const btn = el('button', { type: 'submit', class: 'btn kr-capture-now' }, 'Capture now');
  const status = el('div', { class: 'kr-post-status small', 'aria-live': 'polite' });
  // The latest "Capture now" result, while that capture is still open.
  const p = kr.post;
  if (p && p.capture && caps.some((c) => c.id === p.capture.id && (c.state === 'pending' || c.state === 'recording'))) {
    const c = p.capture;
    status.append(el('span', { class: 'kr-post-ok', 'data-id': c.id }, `Created capture ${c.id}: ${c.state || 'pending'}, ${fmtInt(len(c.ranks))} ranks asked, `,
      `${fmtInt(c.steps)} steps from step ${fmtInt(c.start_step)}${c.every > 1 ? ` every ${c.every}` : ''}.`));
  }
  const form = el('form', { class: 'kr-capture-form', 'aria-label': 'new capture', onsubmit: async (e) => {
    e.preventDefault();
    if (btn.disabled) return;
    btn.disabled = true;
    status.replaceChildren(el('span', { class: 'muted' }, 'Asking the server for a capture…'));
    const body = {};
    const why = reason.value.trim();
    if (why) body.reason = why;
    try {
      const c = await postCapture(ctx.jobId, body);
      lastPost = { job: ctx.jobId, capture: c };
      dirty.add(ctx.jobId);
      status.replaceChildren(el('span', { class: 'kr-post-ok', 'data-id': c.id }, `Created capture ${c.id}.`));
      go({ kair_capture: c.id, kair_step: null });
    } catch (err) {
      status.replaceChildren(el('span', { class: 'error-line kr-post-error', role: 'alert' }, `Capture refused: ${err.message}`,
        err.status ? ` (HTTP ${err.status})` : ''));
    } finally {
      btn.disabled = false;
    }
  } }, reason, btn);
  const tools = el('div', { class: 'kr-cap-tools' }, form, status);
  if (!caps.length) {
    return card('Captures', 'each capture records a few training steps on the asked ranks', tools, el('p', { class: 'muted kr-empty' }, NO_CAPTURES));
  }
  const sel = kr.cap && kr.cap.id;
  const rows = caps.map((c) => {
    const asked = len(c.ranks);
    const up = len(c.uploaded);
    const failed = Object.keys(c.failed || {}).length;
    return el('tr', { class: 'click kr-cap' + (c.id === sel ? ' selected' : ''), 'data-id': c.id, 'data-state': c.state, tabindex: 0,
      'aria-selected': c.id === sel ? 'true' : 'false',
      onclick: () => go({ kair_capture: c.id, kair_step: null }),
      onkeydown: (e) => { if (e.key === 'Enter') go({ kair_capture: c.id, kair_step: null }); } },
    el('td', { class: 'mono' }, c.id),
    el('td', {}, el('span', { class: 'badge kr-state state-' + c.state, title: STATE_HELP[c.state] || '' }, c.state)),
    el('td', {}, c.trigger),
    el('td', { class: 'kr-cap-reason' }, c.reason || '', c.incarnation > 0 ? el('span', { class: 'muted' }, ` · launch #${c.incarnation}`) : null,
      c.note ? el('div', { class: 'muted kr-cap-note' }, c.note) : null),
    el('td', { class: 'mono' }, fmtDate(c.created_ns)),
    el('td', { class: 'num' }, `${fmtInt(c.start_step)} +${fmtInt(c.steps)}${c.every > 1 ? ` ×${c.every}` : ''}`),
    el('td', { class: 'num kr-uploads', title: `fetched ${len(c.fetched)} · uploaded ${up} · asked ${asked}` }, `${fmtInt(up)} / ${fmtInt(asked)}`,
      failed ? el('span', { class: 'bad' }, ` · ${failed} failed`) : null));
  });
  return card('Captures', 'each capture records a few training steps on the asked ranks · click one to analyse it', tools,
    el('div', { class: 'scroll-x' }, el('table', { class: 't kr-captures' },
      el('thead', {}, el('tr', {}, ['capture', 'state', 'trigger', 'reason', 'created', 'steps', 'uploaded / asked'].map((h, i) =>
        el('th', { class: i >= 5 ? 'num' : null }, h)))),
      el('tbody', {}, rows))));
}

// ---------- the report ----------
function reportParts(kr, draws) {
  const c = kr.cap;
  const rep = kr.rep || {};
  if (!rep.v || !rep.v.report) {
    const e = rep.e || {};
    const up = len(c.uploaded);
    let why;
    if (c.state === 'pending') {
      why = `Capture ${c.id} is pending: ${fmtInt(len(c.fetched))} of ${fmtInt(len(c.ranks))} ranks picked the plan up; recording starts at step ${fmtInt(c.start_step)}.`;
    } else if (c.state === 'recording') {
      why = `Capture ${c.id} is recording: ${fmtInt(up)} of ${fmtInt(len(c.ranks))} ranks uploaded so far.`;
    } else {
      why = `Capture ${c.id} is ${c.state}: ${fmtInt(up)} of ${fmtInt(len(c.ranks))} ranks uploaded.`;
    }
    const failed = Object.entries(c.failed || {});
    return [el('section', { class: 'card kr-noreport', 'data-state': c.state, 'data-status': e.status || '' },
      el('h2', {}, `Capture ${c.id}`),
      el('p', { class: 'kr-wait' }, why),
      e.message ? el('p', { class: 'small kr-api-said' + (e.status === 409 ? ' muted' : ' error-line') }, `The server said: ${e.message}`) : null,
      failed.length ? el('ul', { class: 'small kr-failed' }, failed.map(([rk, msg]) => el('li', {}, `rank ${rk}: ${msg}`))) : null)];
  }
  const r = rep.v.report;
  const rh = r.rhythm || null;
  const parts = [headlineCard(r, c)];
  if (rh && len(rh.ranks)) {
    const heat = el('div', { class: 'kr-heat', id: 'kr-heatmap' });
    parts.push(el('div', { class: 'grid' },
      card('Stage 1 · rhythm divergence', 'K-S distance D between every two ranks’ completion ECDFs (§III-B Stage 1) · darker = more different', heat),
      card('Scores', 'S_A: a rank’s mean D to the others; the straggler stands out and is significant', scoresView(rh))));
    const freq = el('div', { class: 'kr-freq', id: 'kr-freq' });
    // Frame "step": time into each rank's own step, the captured steps
    // pooled; "capture": the aligned clock over the whole capture.
    const axis = rh.frame === 'capture' ? 'over the capture on the aligned clock' : 'by time into the step, the captured steps pooled';
    parts.push(card('Completion rhythm (Fig. 4)', `operator completions per rank per window of ${fmtNS(rh.window_ns)}, ${axis} (${fmtInt(rh.windows)} windows)`, freq));
    draws.push(() => drawHeatmapKS(heat, rh), () => drawFreq(freq, rh));
  } else {
    parts.push(card('Stage 1 · rhythm divergence', null, el('p', { class: 'muted kr-no-rhythm' }, 'No Stage 1 result: too few ranks or completions to compare rhythms.')));
  }
  parts.push(blameCard(r, kr.step, rh));
  const tlHost = el('div', { class: 'kr-tl', id: 'kr-timeline' });
  parts.push(card('Step timeline', kr.step != null ? `${stepName(kr.step)} on the aligned clock: one band per rank, a lane per thread (t) or stream (s) · hover an event` : 'no analysed step', tlHost));
  draws.push(() => drawSteps(tlHost, kr, rh));
  return parts;
}

function headlineCard(r, c) {
  const v = r.verdict || 'inconclusive';
  const rh = r.rhythm;
  const clock = r.clock || [];
  const methods = [...new Set(clock.map((x) => x.method))];
  const worst = clock.reduce((a, x) => Math.max(a, Math.abs(x.residual_ns || 0)), 0);
  const viol = clock.reduce((a, x) => a + (x.violations || 0), 0);
  const events = (r.events || []).reduce((a, b) => a + b, 0);
  return el('section', { class: 'card kr-headline', 'data-verdict': v, 'aria-label': 'KAIR verdict' },
    el('div', { class: 'kr-verdict-top' },
      el('span', { class: 'badge kr-verdict verdict-' + v }, VERDICT[v] || v),
      rh ? el('span', { class: 'badge kr-rhythm-badge rhythm-' + rh.verdict }, `Stage 1: ${RHYTHM[rh.verdict] || rh.verdict}${rh.verdict === 'straggler' ? ' r' + rh.straggler : ''}`) : null,
      el('span', { class: 'muted small' }, `capture ${c.id} · ${fmtInt(len(r.ranks))} ranks · ${fmtInt(events)} events · ${fmtInt(len(r.steps))} common steps, ${fmtInt(len(r.analysed))} analysed`)),
    el('p', { class: 'kr-headline-text' }, r.headline || ''),
    impactLine(r.impact),
    leftOutLine(r.left_out),
    v === 'inconclusive' ? el('p', { class: 'note kr-inconclusive' }, 'Inconclusive: the evidence does not single out an operator or a dependency, so none is named.') : null,
    clock.length ? el('p', { class: 'small muted kr-clock' }, `clocks: ${methods.join(', ') || '—'} · worst residual ${fmtNS(worst)}`,
      viol ? el('span', { class: 'bad' }, ` · ${fmtInt(viol)} barrier violations after alignment`) : '') : null);
}

// What the judged candidate explains (issue 16 item 6a): how long the
// other ranks waited for its rank at collectives, and the part it covers.
function impactLine(im) {
  if (!im) return null;
  const attrs = { class: 'small kr-impact', 'data-material': String(!!im.material), 'data-rank': String(im.rank) };
  if (!im.checked) {
    return el('p', attrs, `No collective joins the ranks in the analysed steps, so whether the others waited for rank ${im.rank} was not measured (${fmtNS(im.excess_ns)} per step over its peers).`);
  }
  const what = (im.causes || []).length > 1 ? 'its candidates account' : 'the cause accounts';
  const share = im.step_ns > 0 ? Math.round((100 * im.explained_ns) / im.step_ns) : 0;
  return el('p', attrs,
    `The other ranks waited ${fmtNS(im.held_ns)} per step for rank ${im.rank}; ${what} for ${fmtNS(im.explained_ns)} of it, ${share}% of the median step (${fmtNS(im.step_ns)}).`,
    im.material ? null : el('span', { class: 'bad' }, ' Not enough to explain the step time: no culprit is named.'));
}

// Ranks whose traces share no step with the compared ones (item 7b).
function leftOutLine(lo) {
  if (!lo || !lo.length) return null;
  const parts = lo.map((x) => (x.steps > 0 ? `rank ${x.rank} (steps ${x.first_step}–${x.last_step})` : `rank ${x.rank} (no step numbers)`));
  return el('p', { class: 'note kr-left-out' }, `Left out, no step shared with the others: ${parts.join(', ')}.`);
}

// ---------- Stage 1: K-S heatmap ----------
const MAX_CELLS = 256; // per side; more ranks are aggregated (max over the bucket)
const HM_LABEL_W = 64;

function drawHeatmapKS(host, rh) {
  const ranks = rh.ranks;
  const R = ranks.length;
  const D = rh.d || [];
  const b = Math.ceil(R / MAX_CELLS);
  const n = Math.ceil(R / b);
  const agg = new Float64Array(n * n).fill(-1);
  const who = new Int32Array(n * n * 2);
  let hi = 0;
  for (let i = 0; i < R; i++) {
    for (let j = 0; j < R; j++) {
      const v = D[i * R + j];
      if (!(v >= 0)) continue;
      const k = ((i / b) | 0) * n + ((j / b) | 0);
      if (v > agg[k]) {
        agg[k] = v;
        who[2 * k] = i;
        who[2 * k + 1] = j;
      }
      if (v > hi) hi = v;
    }
  }
  for (let k = 0; k < n * n; k++) if (agg[k] < 0) agg[k] = 0;
  hi = Math.max(hi, 1e-9);
  const avail = Math.max(200, Math.floor(host.clientWidth || 480) - HM_LABEL_W);
  const cell = Math.max(1, Math.min(40, Math.floor(Math.min(avail, 520) / n)));
  const size = cell * n;
  const W = HM_LABEL_W + size;
  const H = size + 16;
  const lut = [];
  for (let k = 0; k < 256; k++) lut.push(rampRGB(RAMPS.seq, k / 255));
  const img = new ImageData(n, n);
  for (let k = 0; k < n * n; k++) {
    img.data.set(lut[Math.round((agg[k] / hi) * 255)], 4 * k);
    img.data[4 * k + 3] = 255;
  }
  const off = document.createElement('canvas');
  off.width = n;
  off.height = n;
  off.getContext('2d').putImageData(img, 0, 0);
  const st = rh.verdict === 'straggler' ? ranks.indexOf(rh.straggler) : -1;
  const stRow = st >= 0 ? (st / b) | 0 : -1;
  const label = (ri) => {
    const a = ri * b;
    const z = Math.min(R, a + b) - 1;
    if (b === 1 || a === z) return `r${ranks[a]}`;
    // A run of consecutive ranks reads as a range; a sampled set does not.
    return ranks[z] - ranks[a] === z - a ? `r${ranks[a]}–${ranks[z]}` : `r${ranks[a]}…${ranks[z]}`;
  };
  const dpr = window.devicePixelRatio || 1;
  const cv = el('canvas', { class: 'kr-hm', width: Math.round(W * dpr), height: Math.round(H * dpr), style: `width:${W}px;height:${H}px`,
    role: 'img', 'data-ranks': R, 'data-rows': n, 'data-cells': n * n, 'data-bucket': b, 'data-cell-px': cell, 'data-label-width': HM_LABEL_W,
    'data-straggler-row': stRow, 'data-max-d': hi.toFixed(4),
    'aria-label': `K-S distance between ${fmtInt(R)} ranks' completion rhythms${st >= 0 ? `; rank ${rh.straggler} differs most` : ''}` });
  const g = cv.getContext('2d');
  g.scale(dpr, dpr);
  g.imageSmoothingEnabled = false;
  g.drawImage(off, HM_LABEL_W, 0, size, size);
  if (cell >= 8) {
    g.fillStyle = '#fff';
    for (let i = 1; i < n; i++) {
      g.fillRect(HM_LABEL_W + i * cell - 0.5, 0, 1, size);
      g.fillRect(HM_LABEL_W, i * cell - 0.5, size, 1);
    }
  }
  g.font = '10px ui-monospace, "DejaVu Sans Mono", monospace';
  g.textBaseline = 'middle';
  g.fillStyle = '#57606a';
  const every = Math.max(1, Math.ceil(12 / cell));
  for (let ri = 0; ri < n; ri += every) {
    if (stRow >= 0 && Math.abs(stRow - ri) * cell < 12 && ri !== stRow) continue;
    g.fillText(label(ri), 4, ri * cell + Math.max(cell, 10) / 2, HM_LABEL_W - 8);
  }
  if (stRow >= 0) {
    // The straggler's row and column, outlined.
    const y = stRow * cell;
    g.fillStyle = '#fee2e2';
    g.fillRect(0, y + cell / 2 - 7, HM_LABEL_W - 4, 14);
    g.fillStyle = '#991b1b';
    g.font = 'bold 10px ui-monospace, "DejaVu Sans Mono", monospace';
    g.fillText('▶ ' + label(stRow), 3, y + cell / 2, HM_LABEL_W - 8);
    g.strokeStyle = '#b42318';
    g.lineWidth = 2;
    g.strokeRect(HM_LABEL_W + 1, y + 1, size - 2, Math.max(1, cell - 2));
    g.strokeRect(HM_LABEL_W + stRow * cell + 1, 1, Math.max(1, cell - 2), size - 2);
  }
  const P = rh.p || [];
  const tot = rh.totals || [];
  const cellTip = (ri, ci) => {
    const k = ri * n + ci;
    const i = who[2 * k];
    const j = who[2 * k + 1];
    const d = agg[k];
    const rows = [['D', fmtNum(d, 3)]];
    if (i !== j) {
      const pp = pairP(d, tot[i], tot[j]);
      rows.push(['pair p', pp == null ? 'no sample' : fmtP(pp)]);
    }
    rows.push([`p of r${ranks[i]}`, fmtP(P[i])], [`p of r${ranks[j]}`, fmtP(P[j])],
      [`S_A r${ranks[i]}`, fmtNum((rh.score || [])[i], 3)], ['completions', `${fmtInt(tot[i])} / ${fmtInt(tot[j])}`]);
    const title = b === 1 ? `rank ${ranks[i]} × rank ${ranks[j]}` : `${label(ri)} × ${label(ci)}: largest D, rank ${ranks[i]} × rank ${ranks[j]}`;
    return tipTable(title, rows, b > 1 ? `each cell is the maximum over ${b} × ${b} ranks` : null);
  };
  cv.addEventListener('mousemove', (ev) => {
    const rect = cv.getBoundingClientRect();
    const ci = Math.floor((ev.clientX - rect.left - HM_LABEL_W) / cell);
    const ri = Math.floor((ev.clientY - rect.top) / cell);
    if (ri < 0 || ri >= n || ci < 0 || ci >= n) { hideTip(); return; }
    showTip(ev, cellTip(ri, ci));
  });
  cv.addEventListener('mouseleave', hideTip);
  const legend = el('canvas', { width: 140, height: 10, style: 'width:140px;height:10px;border-radius:2px', 'aria-hidden': 'true' });
  const lg = legend.getContext('2d');
  for (let i = 0; i < 140; i++) { const c = lut[Math.round((i / 139) * 255)]; lg.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`; lg.fillRect(i, 0, 1, 10); }
  host.replaceChildren(
    el('p', { class: 'small muted kr-agg-note', 'data-aggregated': b > 1 ? 'true' : 'false' }, b > 1
      ? `${fmtInt(R)} ranks drawn as ${fmtInt(n)} × ${fmtInt(n)} cells: each cell is the largest D over ${b} × ${b} consecutive ranks, so a divergent rank is never averaged away.`
      : `${fmtInt(R)} × ${fmtInt(R)} ranks, one cell per pair.`),
    el('div', { class: 'kr-hm-wrap' }, cv),
    el('div', { class: 'hm-foot' }, el('span', {}, 'D'), el('span', { class: 'mono' }, '0'), legend, el('span', { class: 'mono' }, fmtNum(hi, 3)),
      st >= 0 ? el('span', {}, el('span', { class: 'badge leader' }, '▶ straggler'), ' outlined') : null));
}

// ---------- Stage 1: scores ----------
const SCORE_ROWS = 32;

function scoresView(rh) {
  const ranks = rh.ranks;
  const S = rh.score || [];
  const P = rh.p || [];
  const RD = rh.ref_d || [];
  const st = rh.verdict === 'straggler' ? rh.straggler : null;
  const idx = ranks.map((_, i) => i);
  let shown = idx;
  if (idx.length > SCORE_ROWS + 4) {
    // The highest scores (the straggler among them), in score order.
    shown = idx.slice().sort((a, b) => S[b] - S[a] || ranks[a] - ranks[b]).slice(0, SCORE_ROWS);
    const si = ranks.indexOf(st);
    if (si >= 0 && !shown.includes(si)) shown.push(si);
  }
  const hi = Math.max(1e-9, ...S.filter((x) => isFinite(x)));
  const a = rh.agreement || {};
  const top1 = a.top1 ?? a.top_1;
  const agree = a.defined === false
    ? 'exact vs approximation: not comparable (too few ranks or constant scores)'
    : `exact vs approximation (median reference ECDF): top-1 ${top1 ? 'agrees' : 'differs'} · top-${fmtInt(a.k)} overlap ${fmtInt(a.overlap)}/${fmtInt(a.k)} · Spearman ${fmtNum(a.spearman, 2)} · Kendall ${fmtNum(a.kendall, 2)}`;
  return el('div', { class: 'kr-scores' },
    el('div', { class: 'kr-rhythm-verdict', 'data-verdict': rh.verdict, 'data-straggler': rh.straggler },
      el('span', { class: 'badge kr-rhythm-badge rhythm-' + rh.verdict }, RHYTHM[rh.verdict] || rh.verdict),
      st != null ? el('strong', { class: 'kr-straggler-name' }, ` rank ${st}`) : null,
      el('p', { class: 'small kr-why' }, rh.why || '')),
    shown.length < idx.length ? el('p', { class: 'muted small' }, `The ${fmtInt(shown.length)} highest of ${fmtInt(idx.length)} ranks.`) : null,
    el('div', { class: 'kr-bars', role: 'list', 'aria-label': 'S_A per rank' }, shown.map((i) => {
      const isSt = ranks[i] === st;
      return el('div', { class: 'kr-bar-row' + (isSt ? ' straggler' : ''), role: 'listitem', 'data-rank': ranks[i] },
        el('span', { class: 'mono' }, `r${ranks[i]}`),
        el('span', { class: 'gh-bar', 'aria-hidden': 'true' }, el('span', { class: 'fill', style: `width:${Math.min(100, (100 * (S[i] || 0)) / hi).toFixed(1)}%` })),
        el('span', { class: 'num', title: 'S_A (exact)' }, fmtNum(S[i], 3)),
        el('span', { class: 'num muted', title: 'D against the median reference (approximation)' }, fmtNum(RD[i], 3)),
        el('span', { class: 'num', title: 'p-value' }, fmtP(P[i])),
        isSt ? el('span', { class: 'badge bad' }, 'straggler') : el('span', {}));
    })),
    el('p', { class: 'small muted kr-bars-key' }, 'columns: S_A (exact) · D vs the median reference (approximation) · p'),
    el('p', { class: 'small kr-agreement', 'data-defined': a.defined === false ? 'false' : 'true' }, agree));
}

// ---------- Fig. 4: completions per window ----------
function drawFreq(host, rh) {
  const ranks = rh.ranks;
  const F = rh.freq || [];
  const R = ranks.length;
  const N = Math.max(0, ...F.map((f) => len(f)));
  if (!N) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No completion counts in this report.'));
    return;
  }
  const st = rh.verdict === 'straggler' ? ranks.indexOf(rh.straggler) : -1;
  const W = Math.max(360, Math.floor(host.clientWidth || 720));
  const H = 200;
  const m = { l: 40, r: 10, t: 8, b: 24 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  let hi = 1;
  for (const f of F) for (const v of f || []) if (v > hi) hi = v;
  const x = (w) => m.l + (N === 1 ? pw / 2 : (w / (N - 1)) * pw);
  const y = (v) => m.t + ph - (v / hi) * ph;
  const path = (f) => {
    let d = '';
    for (let w = 0; w < N; w++) d += (w ? 'L' : 'M') + x(w).toFixed(1) + ',' + y((f && f[w]) || 0).toFixed(1);
    return d;
  };
  const svg = sv('svg', { class: 'kr-freq-svg', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'data-lines': R, 'data-windows': N,
    'aria-label': `operator completions per window for ${fmtInt(R)} ranks${st >= 0 ? `, straggler rank ${rh.straggler} highlighted` : ''}` });
  for (const t of [0, 0.5, 1]) {
    const v = Math.round(hi * t);
    svg.append(sv('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
      sv('text', { class: 'tick', x: m.l - 4, y: y(v) + 3, 'text-anchor': 'end' }, String(v)));
  }
  const spanMS = (rh.window_ns * N) / 1e6;
  svg.append(sv('text', { class: 'tick', x: m.l, y: H - 6 }, '0'),
    sv('text', { class: 'tick', x: W - m.r, y: H - 6, 'text-anchor': 'end' }, `${fmtNum(spanMS, spanMS >= 100 ? 0 : 1)} ms`));
  for (let i = 0; i < R; i++) {
    if (i === st) continue;
    svg.append(sv('path', { class: 'kr-freq-line', d: path(F[i]), 'data-rank': ranks[i] }));
  }
  if (st >= 0) svg.append(sv('path', { class: 'kr-freq-line straggler', d: path(F[st]), 'data-rank': ranks[st] }));
  const cursor = sv('line', { class: 'kr-cursor', x1: 0, x2: 0, y1: m.t, y2: m.t + ph, visibility: 'hidden' });
  svg.append(cursor);
  svg.addEventListener('mousemove', (ev) => {
    const rect = svg.getBoundingClientRect();
    const px = ev.clientX - rect.left;
    const w = Math.round(((px - m.l) / pw) * (N - 1));
    if (w < 0 || w >= N) { hideTip(); cursor.setAttribute('visibility', 'hidden'); return; }
    cursor.setAttribute('x1', x(w));
    cursor.setAttribute('x2', x(w));
    cursor.setAttribute('visibility', 'visible');
    const vals = F.map((f) => (f && f[w]) || 0);
    const sorted = vals.slice().sort((a, b) => a - b);
    let lo = 0;
    let top = 0;
    for (let i = 1; i < R; i++) {
      if (vals[i] < vals[lo]) lo = i;
      if (vals[i] > vals[top]) top = i;
    }
    const rows = [['median', fmtInt(sorted[sorted.length >> 1])], ['fewest', `${fmtInt(vals[lo])} (r${ranks[lo]})`], ['most', `${fmtInt(vals[top])} (r${ranks[top]})`]];
    if (st >= 0) rows.unshift([`straggler r${rh.straggler}`, fmtInt(vals[st])]);
    showTip(ev, tipTable(`window ${w + 1} of ${N} · +${fmtNum((w * rh.window_ns) / 1e6, 1)} ms`, rows));
  });
  svg.addEventListener('mouseleave', () => { hideTip(); cursor.setAttribute('visibility', 'hidden'); });
  host.replaceChildren(svg, el('div', { class: 'kr-legend' },
    st >= 0 ? el('span', {}, el('span', { class: 'sw straggler' }), `straggler r${rh.straggler}`) : null,
    el('span', {}, el('span', { class: 'sw other' }), st >= 0 ? 'other ranks' : 'ranks'),
    el('span', { class: 'muted' }, 'a rank that falls behind completes fewer operators per window and catches up later (Fig. 4)')));
}

// ---------- Stage 3: the blame chain ----------
function blameCard(r, step, rh) {
  const an = r.analysed || [];
  const st = rh && rh.verdict === 'straggler' ? rh.straggler : null;
  if (!an.length) {
    return card('Blame chain', null, el('p', { class: 'muted kr-no-steps' }, 'No step was analysed: the ranks share no complete step in this capture.'));
  }
  const pick = an.length <= 16
    ? el('div', { class: 'seg kr-steps', role: 'group', 'aria-label': 'analysed step' }, an.map((s) =>
      el('button', { type: 'button', class: s === step ? 'on' : null, 'data-step': s, 'aria-pressed': s === step ? 'true' : 'false',
        onclick: () => go({ kair_step: s }) }, s < 0 ? 'whole capture' : String(s))))
    : el('select', { class: 'kr-step-select', 'aria-label': 'analysed step', onchange: (e) => go({ kair_step: e.target.value }) },
      an.map((s) => el('option', { value: String(s), selected: s === step || null }, stepName(s))));
  const sr = (r.step_reports || []).find((x) => x && x.step === step) || null;
  const causes = (sr && sr.root_causes) || [];
  const outl = sr ? (sr.outliers || []).filter((o) => st == null || o.rank === st).slice(0, 8) : [];
  const body = [el('div', { class: 'kr-step-pick' }, el('span', { class: 'lbl' }, 'Step'), pick,
    sr ? el('span', { class: 'muted small' }, `${fmtInt(sr.nodes)} operator instances on ${fmtInt(sr.ranks)} ranks · ${fmtInt(len(sr.outliers))} outliers (a_i > ${fmtNum(sr.config && sr.config.z_threshold, 0)})`) : null)];
  if (!sr) {
    body.push(el('p', { class: 'muted kr-no-step-report' }, `No Stage 2–3 report for ${stepName(step)}.`));
  } else if (!causes.length) {
    body.push(el('p', { class: 'muted kr-no-causes', 'data-step': step }, `In ${stepName(step)} no operator instance is an outlier, so there is nothing to blame.`));
  } else {
    body.push(el('table', { class: 't kr-causes', 'data-step': step },
      el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'kind'), el('th', {}, 'root cause'), el('th', { class: 'num', title: 'time over the peers’ median for the same operator instance' }, 'excess'), el('th', { class: 'num' }, 'symptoms'), el('th', { class: 'num' }, 'score'))),
      el('tbody', {}, causes.map((c, i) => el('tr', { class: 'kr-cause', 'data-kind': c.kind, 'data-rank': c.rank },
        el('td', { class: 'num' }, String(i + 1)),
        el('td', {}, el('span', { class: 'badge kr-kind kind-' + c.kind }, KIND[c.kind] || c.kind)),
        el('td', { class: 'mono kr-cause-name' }, causeText(c), c.rank === st ? el('span', { class: 'badge leader' }, 'straggler') : null),
        el('td', { class: 'num kr-excess' }, fmtNS(c.excess_ns || 0)), el('td', { class: 'num' }, fmtInt(c.symptoms)), el('td', { class: 'num' }, fmtNum(c.score, 1)))))));
    body.push(el('div', { class: 'kr-chains' }, causes.map((c, i) => chainView(c, i))));
  }
  if (outl.length) {
    body.push(el('h3', {}, st != null ? `Stage 2 outliers on the straggler r${st} (${stepName(step)})` : `Stage 2 outliers (${stepName(step)})`),
      el('table', { class: 't kr-outliers' },
        el('thead', {}, el('tr', {}, ['operator', 'rank', 'start', 'duration', 'a_i'].map((h, i) => el('th', { class: i >= 2 ? 'num' : null }, h)))),
        el('tbody', {}, outl.map((o) => el('tr', {}, el('td', { class: 'mono' }, `${o.name}#${o.occurrence}`), el('td', { class: 'mono' }, `r${o.rank}`),
          el('td', { class: 'num' }, '+' + fmtNS(o.start_ns)), el('td', { class: 'num' }, fmtNS(o.dur_ns)), el('td', { class: 'num' }, fmtNum(o.a, 1)))))));
  }
  const all = r.causes || [];
  if (all.length) {
    body.push(el('h3', {}, `Across the ${fmtInt(an.length)} analysed steps`),
      el('table', { class: 't kr-all-causes' },
        el('thead', {}, el('tr', {}, el('th', {}, 'kind'), el('th', {}, 'root cause'), el('th', { class: 'num', title: 'time over the peers, summed over the analysed steps' }, 'excess'), el('th', { class: 'num' }, 'steps'), el('th', { class: 'num' }, 'first step'), el('th', { class: 'num' }, 'score'))),
        el('tbody', {}, all.map((c) => el('tr', { class: 'kr-agg-cause', 'data-rank': c.rank },
          el('td', {}, KIND[c.kind] || c.kind), el('td', { class: 'mono' }, causeText(c)), el('td', { class: 'num' }, fmtNS(c.excess_ns || 0)),
          el('td', { class: 'num' }, `${fmtInt(c.steps)} / ${fmtInt(an.length)}`), el('td', { class: 'num' }, fmtInt(c.step)), el('td', { class: 'num' }, fmtNum(c.score, 1)))))));
  }
  return card('Blame chain', 'Stage 3: from each flagged operator back along the step’s dependencies to what made it late (§III-B) · pick an analysed step', body);
}

function causeText(c) {
  if (c.kind === 'edge' && c.from === '(step start)') return `r${c.rank} gap before ${c.name} (since the step start)`;
  if (c.kind === 'edge') return `r${c.from_rank} ${c.from || '?'} → r${c.rank} ${c.name}`;
  return `r${c.rank} ${c.name}`;
}

// chainView is one cause's evidence, symptom first: the operator lines
// ("rank R name#k …") are the walk's nodes, the others the rule applied.
const isNode = (line) => /^rank \d+ /.test(line);
const END_ROLE = { op: 'culprit', edge: 'edge from', inconclusive: 'stopped at' };

function chainView(c, i) {
  const ev = c.evidence || [];
  let lastNode = -1;
  ev.forEach((line, k) => { if (isNode(line)) lastNode = k; });
  return el('div', { class: 'kr-chain-box', 'data-cause': i },
    el('div', { class: 'kr-chain-head small' }, `#${i + 1} ${causeText(c)}`,
      len(c.explains) ? el('span', { class: 'muted' }, ` · explains ${c.explains.slice(0, 4).join(', ')}${c.explains.length > 4 ? ` … (${c.explains.length})` : ''}`) : null),
    el('ol', { class: 'kr-chain' }, ev.map((line, k) => {
      const node = isNode(line);
      const role = k === 0 ? 'symptom' : !node ? 'rule' : k === lastNode ? END_ROLE[c.kind] || 'root cause' : 'via';
      return el('li', { class: 'kr-link ' + (node ? 'node' : 'rule') + (k === lastNode && k > 0 ? ' end' : '') + (k === ev.length - 1 ? ' last' : ''), 'data-role': role },
        el('span', { class: 'kr-role' }, role), el('span', { class: 'kr-ev' }, line));
    })));
}

// ---------- per-rank step timeline ----------
const TL_LABEL_W = 84;
const LANE_H = 12;

function drawSteps(host, kr, rh) {
  const tl = kr.tl;
  if (!tl) {
    host.replaceChildren(el('div', { class: 'empty' }, 'No analysed step to show.'));
    return;
  }
  if (tl.e) {
    host.replaceChildren(el('p', { class: 'error-line kr-tl-error' }, `Cannot load the timeline of ${stepName(kr.step)}: ${tl.e.message}`));
    return;
  }
  const body = tl.v || {};
  const st = rh && rh.verdict === 'straggler' ? rh.straggler : null;
  let ranks = body.ranks || [];
  // Many ranks: the straggler's band first, where it is seen.
  if (ranks.length > 16 && st != null) ranks = [...ranks.filter((x) => x.rank === st), ...ranks.filter((x) => x.rank !== st)];
  const lanes = []; // {rank, lane, events}
  let end = 1;
  let count = 0;
  for (const rr of ranks) {
    const by = new Map();
    for (const e of rr.events || []) {
      if (!by.has(e.lane)) by.set(e.lane, []);
      by.get(e.lane).push(e);
      end = Math.max(end, e.start_ns + Math.max(0, e.dur_ns));
      count++;
    }
    // Threads (t…) above streams (s…), each by number.
    const kind = (l) => (l[0] === 't' ? 0 : l[0] === 's' ? 1 : 2);
    const names = [...by.keys()].sort((a, b) => kind(a) - kind(b) || Number(a.slice(1)) - Number(b.slice(1)) || a.localeCompare(b));
    if (!names.length) lanes.push({ rank: rr.rank, lane: '', events: [], first: true, offset: rr.offset_ns });
    names.forEach((ln, k) => {
      const evs = by.get(ln).slice().sort((a, b) => a.start_ns - b.start_ns);
      lanes.push({ rank: rr.rank, lane: ln, events: evs, first: k === 0, offset: rr.offset_ns });
    });
  }
  if (!lanes.length) {
    host.replaceChildren(el('div', { class: 'empty' }, `No events in ${stepName(kr.step)}.`));
    return;
  }
  const W = Math.max(400, Math.floor(host.clientWidth || 800));
  const pw = W - TL_LABEL_W - 8;
  const gaps = ranks.length;
  const H = lanes.length * LANE_H + gaps * 4 + 18;
  const ys = [];
  let yy = 0;
  lanes.forEach((l) => {
    if (l.first) yy += 4;
    ys.push(yy);
    yy += LANE_H;
  });
  const x = (ns) => TL_LABEL_W + (ns / end) * pw;
  const dpr = window.devicePixelRatio || 1;
  const cv = el('canvas', { class: 'kr-tl-canvas', width: Math.round(W * dpr), height: Math.round(H * dpr), style: `width:${W}px;height:${H}px`,
    role: 'img', 'data-step': kr.step, 'data-ranks': ranks.length, 'data-lanes': lanes.length, 'data-events': count, 'data-span-ns': end,
    'data-label-width': TL_LABEL_W, 'data-plot-width': pw, 'data-lane-height': LANE_H,
    'data-lane-keys': JSON.stringify(lanes.map((l) => `${l.rank}:${l.lane}`)), 'data-lane-y': JSON.stringify(ys),
    'aria-label': `${stepName(kr.step)}: ${fmtInt(count)} events on ${fmtInt(ranks.length)} ranks over ${fmtNS(end)}` });
  const g = cv.getContext('2d');
  g.scale(dpr, dpr);
  g.font = '10px ui-monospace, "DejaVu Sans Mono", monospace';
  g.textBaseline = 'middle';
  lanes.forEach((l, k) => {
    const y = ys[k];
    const isSt = l.rank === st;
    if (isSt) {
      g.fillStyle = '#fff5f5';
      g.fillRect(0, y, W, LANE_H);
    }
    g.fillStyle = isSt ? '#991b1b' : '#57606a';
    g.fillText(`${l.first ? (isSt ? '▶ ' : '') + 'r' + l.rank : ''} ${l.lane}`, 3, y + LANE_H / 2, TL_LABEL_W - 6);
    for (const e of l.events) {
      g.fillStyle = CAT_COLOR[e.cat] || CAT_COLOR.other;
      // User ranges (ProfilerStep#N) enclose the ops: a thin bar on top.
      const thin = e.cat === 'user_range';
      g.fillRect(x(e.start_ns), y + 1, Math.max(1, (Math.max(0, e.dur_ns) / end) * pw), thin ? 2 : LANE_H - 2);
    }
  });
  g.fillStyle = '#57606a';
  g.fillText('0', TL_LABEL_W, H - 7);
  g.textAlign = 'right';
  g.fillText(fmtNS(end), W - 8, H - 7);
  const hit = (px, py) => {
    let k = -1;
    for (let i = 0; i < lanes.length; i++) if (py >= ys[i] && py < ys[i] + LANE_H) k = i;
    if (k < 0 || px < TL_LABEL_W) return null;
    const t = ((px - TL_LABEL_W) / pw) * end;
    const slack = (2 / pw) * end; // 2 px
    let best = null;
    for (const e of lanes[k].events) {
      if (e.start_ns - slack <= t && t <= e.start_ns + Math.max(0, e.dur_ns) + slack && (!best || e.dur_ns < best.dur_ns)) best = e;
    }
    return best ? { lane: lanes[k], e: best } : null;
  };
  cv.addEventListener('mousemove', (ev) => {
    const rect = cv.getBoundingClientRect();
    const h = hit(ev.clientX - rect.left, ev.clientY - rect.top);
    if (!h) { hideTip(); return; }
    showTip(ev, tipTable(h.e.name, [['rank', `r${h.lane.rank}${h.lane.rank === st ? ' (straggler)' : ''}`], ['lane', h.lane.lane], ['category', h.e.cat],
      ['start', '+' + fmtNS(h.e.start_ns)], ['duration', fmtNS(h.e.dur_ns)], ['clock offset', fmtNS(h.lane.offset)]]));
  });
  cv.addEventListener('mouseleave', hideTip);
  const cats = [...new Set(lanes.flatMap((l) => l.events.map((e) => e.cat)))].sort();
  host.replaceChildren(...[
    body.truncated ? el('p', { class: 'note small kr-tl-truncated' }, 'Some ranks have more events than shown: the longest are kept.') : null,
    el('div', { class: 'kr-tl-wrap' }, cv),
    el('div', { class: 'kr-legend' }, cats.map((c) => el('span', {}, el('span', { class: 'sw', style: `background:${CAT_COLOR[c] || CAT_COLOR.other}` }), c)),
      el('span', { class: 'muted' }, 'times from the step’s earliest aligned start'))].filter(Boolean));
}
