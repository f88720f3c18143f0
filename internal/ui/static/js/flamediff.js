// The differential flame graph (SysOM-AI §3.1 "CPU diff"): GET
// /api/v1/jobs/<id>/flamegraph/diff gives one tree with both profiles'
// sample counts per frame (a, b). Counts are normalized by each side's
// total so a straggler that took more samples overall is not all red:
// a frame's color is its share on A minus its share on B (red: more on A,
// blue: more on B, pale: about the same), scaled to the largest such
// difference in the tree; its width is the mean of the two shares (so a
// frame only one side has still shows). Two modes: straggler vs a healthy
// peer (the diagnosis's rank and peer) and now vs a baseline window of the
// same rank (the temporal path).
import { el, tipTable } from './dom.js';
import { fmtInt } from './format.js';
import { mountFlame, flameControls, inclusive, pct, nsSpan, KINDS, ENABLE_HINT } from './flame.js';

// Below this share difference (0.1 percentage point) a frame is "the same".
const FLOOR = 0.001;
const NEUTRAL = [236, 236, 232];
const RED = [215, 25, 28];
const BLUE = [33, 102, 172];

const mix = (a, b, t) => `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(', ')})`;

// diffColor maps a share difference to a color; scale is the tree's
// largest |difference|.
export function diffColor(delta, scale) {
  if (!(Math.abs(delta) >= FLOOR) || !(scale > 0)) return mix(NEUTRAL, NEUTRAL, 0);
  const t = 0.25 + 0.75 * Math.min(1, Math.abs(delta) / scale);
  return mix(NEUTRAL, delta > 0 ? RED : BLUE, t);
}

// diffData converts the API tree into the component's tree: value = width,
// plus fa/fb (shares), delta (fa − fb). Returns {data, scale}.
export function diffData(root, ta, tb, width) {
  let scale = 0;
  const conv = (n, depth) => {
    const fa = ta > 0 ? (n.a || 0) / ta : 0;
    const fb = tb > 0 ? (n.b || 0) / tb : 0;
    const delta = fa - fb;
    if (depth > 0) scale = Math.max(scale, Math.abs(delta));
    const value = width === 'a' ? fa : width === 'b' ? fb : (fa + fb) / 2;
    return { name: n.name, kind: n.kind, module: n.module, a: n.a || 0, b: n.b || 0, fa, fb, delta, value,
      children: (n.children || []).map((c) => conv(c, depth + 1)) };
  };
  return { data: conv(root, 0), scale };
}

const WIDTHS = [['both', 'mean of both'], ['a', 'A only'], ['b', 'B only']];

// diffCard shows the diff for sel.diff; df: {v} | {e} | null (no pair
// chosen). ctl is the picker row sysom.js builds.
export function diffCard(df, sel, ctl) {
  const host = el('div', { class: 'sy-flame sy-diff', id: 'sy-diff' });
  const tools = flameControls('sy-df');
  const node = el('section', { class: 'card sy-diff-card', 'aria-labelledby': 'card-sy-diff' },
    el('h2', { id: 'card-sy-diff' }, 'Differential flame graph',
      el('span', { class: 'sub' }, 'color = share of samples on A minus share on B (each normalized by its total): red more on A, blue more on B · click to zoom')),
    ctl);
  if (!df) {
    node.append(el('p', { class: 'muted sy-none' }, 'Pick two ranks (straggler and a healthy peer) or a rank and a baseline window to compare.'));
    return { node, draw() {} };
  }
  if (df.e) {
    const e = df.e;
    node.append(e.status === 404
      ? el('div', { class: 'sy-none' }, el('p', {}, `Nothing to compare${e.message ? `: ${e.message}` : ''}.`), el('p', { class: 'small muted' }, ENABLE_HINT))
      : el('p', { class: 'error-line sy-error', role: 'alert' }, `Cannot load the differential flame graph: ${e.message}`, e.path ? ` (GET ${e.path})` : ''));
    return { node, draw() {} };
  }
  const d = df.v || {};
  const raw = d.root;
  if (!raw || !((raw.a || 0) + (raw.b || 0) > 0)) {
    node.append(el('p', { class: 'muted sy-none' }, 'Neither side has samples in this window.'));
    return { node, draw() {} };
  }
  const tree = structuredClone(raw);
  inclusive(tree, ['a', 'b']);
  const A = d.a || {};
  const B = d.b || {};
  const ta = A.total > 0 ? A.total : tree.a;
  const tb = B.total > 0 ? B.total : tree.b;
  const la = A.label || 'A';
  const lb = B.label || 'B';
  // Windows are named only when the sides differ (now vs baseline).
  const span = (x) => (A.from_ns && B.from_ns && (A.from_ns !== B.from_ns || A.to_ns !== B.to_ns) ? ` over ${nsSpan(x.from_ns, x.to_ns)}` : '');
  let width = 'both';
  const seg = el('div', { class: 'seg sy-width', role: 'group', 'aria-label': 'frame width' },
    el('span', { class: 'lbl' }, 'width'),
    WIDTHS.map(([k, l]) => el('button', { type: 'button', class: k === width ? 'on' : null, 'data-width': k, onclick: (ev) => {
      width = k;
      seg.querySelectorAll('button').forEach((b) => b.classList.toggle('on', b === ev.currentTarget));
      draw();
    } }, l)));
  const legend = el('div', { class: 'sy-legend sy-diff-legend' },
    el('span', {}, el('span', { class: 'sw', style: `background:${mix(NEUTRAL, BLUE, 1)}` }), `more on B: ${lb}`),
    el('span', {}, el('span', { class: 'sw', style: `background:${mix(NEUTRAL, NEUTRAL, 0)}` }), 'about the same (< 0.1 pp)'),
    el('span', {}, el('span', { class: 'sw', style: `background:${mix(NEUTRAL, RED, 1)}` }), `more on A: ${la}`));
  node.append(el('div', { class: 'sy-fg-head' },
    el('span', { class: 'muted small sy-facts' }, `A = ${la}: ${fmtInt(ta)} samples${span(A)} · B = ${lb}: ${fmtInt(tb)} samples${span(B)}`), legend, seg), tools.node, host);
  let m = null;
  tools.bind(() => m, (sum) => `${pct(sum)} of the width`);
  function draw() {
    const { data, scale } = diffData(tree, ta, tb, width);
    host.dataset.scale = String(scale);
    host.dataset.width = width;
    m = mountFlame(host, data, {
      ariaLabel: `differential flame graph: ${la} against ${lb}`,
      color: (n) => diffColor(n.data.delta, scale),
      tip: (n) => tipTable(n.data.name, [
        ['kind', (KINDS[n.data.kind] || {}).label || n.data.kind || '—'],
        n.data.module ? ['module', n.data.module] : null,
        [`A ${la}`, `${pct(n.data.fa)} (${fmtInt(n.data.a)})`],
        [`B ${lb}`, `${pct(n.data.fb)} (${fmtInt(n.data.b)})`],
        ['A − B', `${n.data.delta >= 0 ? '+' : '−'}${(Math.abs(n.data.delta) * 100).toFixed(2)} pp`],
      ].filter(Boolean), n.data.fb > 0 ? `A/B ${(n.data.fa / n.data.fb).toFixed(2)}×` : n.data.fa > 0 ? 'only on A' : null),
    });
  }
  return { node, draw };
}
