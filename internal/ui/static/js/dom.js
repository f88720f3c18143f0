// Small DOM helpers shared by every view: element builders, the tooltip,
// and card scaffolding. No framework: views rebuild their subtree.
const SVGNS = 'http://www.w3.org/2000/svg';

function append(n, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k != null && k !== false) n.append(k instanceof Node ? k : String(k));
  }
  return n;
}

// el builds an HTML element: attributes (on* become listeners, class,
// boolean true → empty attribute, null/false → omitted) and children.
export function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') n.className = v;
    else if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? '' : v);
  }
  return append(n, kids);
}

// sv builds an SVG element.
export function sv(tag, attrs, ...kids) {
  const n = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v);
  }
  return append(n, kids);
}

export const $ = (id) => document.getElementById(id);

// card is a titled section; sub is the muted explanation beside the title.
export function card(title, sub, ...body) {
  const id = 'card-' + String(title).toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return el('section', { class: 'card', 'aria-labelledby': id },
    el('h2', { id }, title, sub ? el('span', { class: 'sub' }, sub) : null), body);
}

// ---------- tooltip ----------
export function showTip(ev, content) {
  const t = $('tooltip');
  t.replaceChildren(content);
  t.hidden = false;
  const pad = 14;
  const r = t.getBoundingClientRect();
  let x = ev.clientX + pad;
  let y = ev.clientY + pad;
  if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
  if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - pad);
  t.style.left = x + 'px';
  t.style.top = y + 'px';
}

export function hideTip() {
  $('tooltip').hidden = true;
}

// tipTable is the key/value body most tooltips use.
export function tipTable(title, rows, foot) {
  return el('div', {},
    el('div', { class: 'tt-title' }, title),
    el('table', {}, rows.map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, v)))),
    foot ? el('div', { class: 'tt-foot' }, foot) : null);
}
