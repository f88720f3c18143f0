// Flame graphs (SysOM-AI §3.3, §4 "visualization"): the vendored
// d3-flame-graph component (static/vendor/, Apache-2.0; see
// static/vendor/README.md) mounted on GET /api/v1/jobs/<id>/flamegraph
// trees. This module owns the mount: frame colors by kind (kernel, Python,
// native, imported symbol), the app's tooltip, a search box that never
// throws on user input, click-to-zoom with a reset, and the per rank /
// group flame-graph card. The differential view (flamediff.js) reuses
// mountFlame with its own colors.
//
// The vendored files are UMD bundles: imported for their side effect they
// define globalThis.d3 (d3-selection, to hand the component a selection)
// and globalThis.flamegraph (the component, which bundles the d3 modules it
// uses).
import '../vendor/d3-selection-3.0.0/d3-selection.min.js';
import '../vendor/d3-flame-graph-4.1.3/d3-flamegraph.min.js';
import { el, showTip, hideTip, tipTable } from './dom.js';
import { fmtInt } from './format.js';

// How to turn the profiler on: the empty state of every profile view.
export const ENABLE_HINT = 'Run `laggard agent` on each node (the CPU profiler is on by default: --profile-hz, --profile-ratio; --no-profile turns it off) and start the training processes with LAGGARD_AGENT_SOCKET set to the agent\'s socket (default /run/laggard/agent.sock), so laggard.init() registers each rank and its stacks are attributed to it. Outside profiles (pprof, collapsed stacks) can be posted to POST /api/v1/jobs/{id}/profiles.';

// Frame kinds (signal/stack Kind): hue per kind, lightness varied by a
// hash of the name so neighbours stay apart.
export const KINDS = {
  python: { label: 'Python', h: 135, s: 45, l: 58 },
  native: { label: 'native', h: 14, s: 78, l: 60 },
  kernel: { label: 'kernel', h: 38, s: 90, l: 55 },
  symbol: { label: 'imported / other process', h: 250, s: 35, l: 70 },
};
const HIGHLIGHT = '#e600e6'; // search matches (the component's own choice)
const reduceMotion = () => typeof matchMedia === 'function' && matchMedia('(prefers-reduced-motion: reduce)').matches;

function nameHash(s) {
  let h = 0;
  for (let i = 0; i < s.length && i < 24; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0;
  return (h % 1000) / 1000;
}

export function kindColor(kind, name) {
  const k = KINDS[kind] || { h: 0, s: 0, l: 72 };
  const t = nameHash(String(name || ''));
  return `hsl(${k.h + Math.round((t - 0.5) * 16)}, ${k.s}%, ${k.l + Math.round((t - 0.5) * 14)}%)`;
}

export function kindLegend() {
  return el('div', { class: 'sy-legend' }, Object.entries(KINDS).map(([k, v]) =>
    el('span', { 'data-kind': k }, el('span', { class: 'sw', style: `background:${kindColor(k, '')}` }), v.label)));
}

export const pct = (x) => (x == null || !isFinite(x) ? '—' : (100 * x).toFixed(x !== 0 && Math.abs(x) < 0.01 ? 2 : 1) + '%');

// inclusive makes every node's value cover its children. The contract's
// value is inclusive already; a tree whose values are self counts (a
// server-side slip) would otherwise draw children wider than parents.
export function inclusive(root, keys) {
  let broken = false;
  const check = (n) => {
    for (const c of n.children || []) check(c);
    for (const k of keys) {
      const s = (n.children || []).reduce((a, c) => a + (c[k] || 0), 0);
      if ((n[k] || 0) + 1e-9 < s) broken = true;
    }
  };
  check(root);
  if (!broken) return false;
  const fix = (n) => {
    for (const c of n.children || []) fix(c);
    for (const k of keys) n[k] = (n[k] || 0) + (n.children || []).reduce((a, c) => a + (c[k] || 0), 0);
  };
  fix(root);
  return true;
}

// MAX_FRAMES bounds the frames drawn at once: the component draws an SVG
// group with a label per frame, so a 20,000-frame profile would take
// seconds. Frames narrower than the MAX_FRAMES-th widest are left out
// (zooming in brings them back); minFrame returns that width in pixels.
export const MAX_FRAMES = 4000;

export function minFrame(data, width) {
  const vals = [];
  const walk = (n) => {
    vals.push(n.value || 0);
    for (const c of n.children || []) walk(c);
  };
  walk(data);
  const total = data.value || 0;
  if (vals.length <= MAX_FRAMES || !(total > 0)) return 0.5;
  vals.sort((a, b) => b - a);
  // Strictly wider than the cut: ties at the cut go together.
  return Math.max(0.5, (vals[MAX_FRAMES] / total) * width);
}

// mountFlame draws data (a tree of {name, value, children, …}) into host
// with the vendored component. opts: color(node) → CSS color, tip(node) →
// tooltip content, label(node) → the frame's accessible label. Returns
// {chart, search(term) → matched value, reset()}.
export function mountFlame(host, data, opts) {
  const d3 = globalThis.d3;
  const flamegraph = globalThis.flamegraph;
  if (!d3 || typeof d3.select !== 'function' || typeof flamegraph !== 'function') {
    host.replaceChildren(el('p', { class: 'error-line' }, 'The flame-graph component did not load (static/vendor/).'));
    return null;
  }
  host.replaceChildren();
  let last = { clientX: 0, clientY: 0 };
  host.addEventListener('mousemove', (ev) => { last = ev; });
  host.addEventListener('mouseleave', hideTip);
  // The component calls tooltip(svg) once, then show(d, node) / hide().
  const tip = () => {};
  tip.show = (d) => showTip(last, opts.tip(d));
  tip.hide = hideTip;
  let matched = 0;
  let hits = [];
  const width = Math.max(320, Math.floor(host.clientWidth || 960));
  const minPx = minFrame(data, width);
  host.dataset.minFrame = minPx.toFixed(2);
  const chart = flamegraph()
    .width(width)
    .cellHeight(18)
    .minFrameSize(minPx)
    .sort(true) // frames alphabetical per level, as flame graphs are read
    .transitionDuration(reduceMotion() ? 0 : 250)
    .tooltip(tip)
    .setColorMapper((d) => (d.highlight ? HIGHLIGHT : opts.color(d)))
    // Plain case-insensitive substring: the component's default compiles
    // the user's text as a RegExp (a stray "(" would throw).
    .setSearchMatch((d, term) => !!term && String(d.data.name || '').toLowerCase().includes(String(term).toLowerCase()))
    .setSearchHandler((results, sum) => { matched = sum; hits = results; })
    .setDetailsHandler(() => {})
    .onClick((d) => {
      host.dataset.zoom = d.depth === 0 ? '' : d.data.name;
      if (opts.onZoom) opts.onZoom(d);
    });
  d3.select(host).datum(data).call(chart);
  const svg = host.querySelector('svg');
  if (svg) {
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', opts.ariaLabel || 'flame graph');
  }
  return {
    chart,
    search(term) {
      if (!term) {
        chart.clear();
        return 0;
      }
      chart.search(term);
      return matched;
    },
    reset() {
      chart.resetZoom();
      host.dataset.zoom = '';
    },
    // zoomMatch zooms to the widest search match (the keyboard's way in:
    // frames themselves take only clicks). Returns its name or null.
    zoomMatch() {
      const best = hits.reduce((a, d) => (!a || d.value > a.value ? d : a), null);
      if (!best) return null;
      chart.zoomTo(best);
      host.dataset.zoom = best.depth === 0 ? '' : best.data.name;
      return best.data.name;
    },
  };
}

// flameControls is the search box, the match read-out and the zoom reset
// shared by both flame views; bind(m) attaches them to a mount.
export function flameControls(idp) {
  const input = el('input', { type: 'search', class: 'sy-search', id: idp + '-search', placeholder: 'search frames', 'aria-label': 'search frames (Enter zooms to the widest match)' });
  const out = el('span', { class: 'muted small sy-match', role: 'status', id: idp + '-match' });
  const reset = el('button', { type: 'button', class: 'btn sy-reset', id: idp + '-reset', title: 'show the whole graph again (Escape)' }, 'Reset zoom');
  const node = el('div', { class: 'sy-fg-tools' }, input, out, reset);
  return {
    node,
    // bind attaches the controls once; mount() returns the current mount
    // (a view may redraw), say(sum) words the matched width.
    bind(mount, say) {
      let t = null;
      input.addEventListener('input', () => {
        clearTimeout(t);
        t = setTimeout(() => {
          const m = mount();
          if (!m) return;
          const term = input.value.trim();
          const sum = m.search(term);
          out.textContent = term ? `${say(sum)} match “${term}”` : '';
        }, 120);
      });
      reset.addEventListener('click', () => mount()?.reset());
      input.addEventListener('keydown', (ev) => {
        if (ev.key !== 'Enter') return;
        ev.preventDefault();
        clearTimeout(t);
        const m = mount();
        const term = input.value.trim();
        if (!m || !term) return;
        const sum = m.search(term);
        const name = m.zoomMatch();
        out.textContent = name ? `${say(sum)} match “${term}”; zoomed to ${name}` : `nothing matches “${term}”`;
      });
      node.parentElement?.addEventListener('keydown', (ev) => {
        if (ev.key === 'Escape') mount()?.reset();
      });
    },
  };
}

// ---------- the per rank / group flame graph ----------

// flameCard shows GET …/flamegraph for the selection. fg: {v} or {e}
// (never throws); ctl is the picker row sysom.js builds.
export function flameCard(fg, sel, ctl) {
  const host = el('div', { class: 'sy-flame', id: 'sy-flame' });
  const tools = flameControls('sy-fg');
  const title = el('h2', { id: 'card-sy-flame' }, 'Flame graph',
    el('span', { class: 'sub' }, 'CPU stacks, root at the bottom; width = share of samples · click a frame to zoom, Escape or Reset to zoom out'));
  const node = el('section', { class: 'card sy-flame-card', 'aria-labelledby': 'card-sy-flame' }, title, ctl);
  if (fg && fg.e) {
    const e = fg.e;
    node.append(e.status === 404
      ? el('div', { class: 'sy-none' }, el('p', {}, `No CPU stacks for ${sel.group != null ? 'group ' + sel.group : 'rank ' + sel.rank} in this window${e.message ? ` (${e.message})` : ''}.`),
        el('p', { class: 'small muted' }, ENABLE_HINT))
      : el('p', { class: 'error-line sy-error', role: 'alert' }, `Cannot load the flame graph: ${e.message}`, e.path ? ` (GET ${e.path})` : ''));
    return { node, draw() {} };
  }
  const f = fg.v;
  const root = f && f.root;
  if (!root || !(root.value > 0)) {
    node.append(el('div', { class: 'sy-none' }, el('p', {}, 'No samples in this window.'), el('p', { class: 'small muted' }, ENABLE_HINT)));
    return { node, draw() {} };
  }
  const data = structuredClone(root); // the component marks nodes; keep the cached response clean
  inclusive(data, ['value']);
  const total = f.total > 0 ? f.total : data.value;
  const facts = [
    `${fmtInt(total)} samples`,
    f.hz ? `${fmtInt(f.hz)} Hz` : null,
    f.ratio ? `ratio ${f.ratio}` : null,
    f.from_ns ? `window ${nsSpan(f.from_ns, f.to_ns)}` : null,
  ].filter(Boolean).join(' · ');
  const pruned = el('p', { class: 'muted small sy-pruned', hidden: true });
  node.append(el('div', { class: 'sy-fg-head' }, el('span', { class: 'muted small sy-facts' }, facts), kindLegend()), tools.node, host, pruned);
  return {
    node,
    draw() {
      const t0 = performance.now();
      const m = mountFlame(host, data, {
        ariaLabel: `flame graph of ${sel.group != null ? 'group ' + sel.group : 'rank ' + sel.rank}`,
        color: (d) => kindColor(d.data.kind, d.data.name),
        tip: (d) => tipTable(d.data.name, [
          ['kind', (KINDS[d.data.kind] || {}).label || d.data.kind || '—'],
          d.data.module ? ['module', d.data.module] : null,
          ['samples', fmtInt(d.data.value)],
          ['of all', pct(d.data.value / total)],
          d.parent ? ['of parent', pct(d.data.value / (d.parent.data.value || 1))] : null,
          d.data.self != null ? ['self', `${fmtInt(d.data.self)} (${pct(d.data.self / total)})`] : null,
        ].filter(Boolean), 'click to zoom'),
      });
      host.dataset.renderMs = (performance.now() - t0).toFixed(1);
      const px = Number(host.dataset.minFrame);
      if (px > 0.5) {
        let all = 0;
        const walk = (n) => { all++; (n.children || []).forEach(walk); };
        walk(data);
        pruned.hidden = false;
        pruned.textContent = `${fmtInt(host.querySelectorAll('g.frame').length)} of ${fmtInt(all)} frames drawn: the ones narrower than ${px.toFixed(1)} px are left out to keep the page responsive; click a frame to zoom in and see them.`;
      }
      host.dataset.total = String(total);
      tools.bind(() => m, (sum) => `${fmtInt(Math.round(sum))} samples (${pct(sum / total)})`);
    },
  };
}

// nsSpan formats a window of wall-clock nanoseconds.
export function nsSpan(from, to) {
  const d = (ns) => new Date(ns / 1e6).toISOString().slice(11, 19);
  const s = (to - from) / 1e9;
  return `${d(from)}–${d(to)} UTC (${s >= 120 ? Math.round(s / 60) + ' min' : Math.round(s) + ' s'})`;
}
