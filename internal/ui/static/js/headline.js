// The plain-language headline at the top of the job page: what the
// engine says in words (report.headline.text), then the same facts as
// labelled fields — the stage, the straggler rank and host when one is
// named, or "no consistent straggler rank" with the reason and the tie
// set — and the caveats. The paper's notation stays in the details.
import { el } from './dom.js';
import { fmtMs, fmtPct, fmtInt, stageChip, withheldText, basisText } from './format.js';
import { go } from './state.js';

const rankButton = (r, host) =>
  el('button', { class: 'linkish rank-link', 'data-rank': r, onclick: () => go({ rank: r }), title: `open rank ${r}'s drill-down` },
    `rank ${r}`, host ? el('span', { class: 'muted' }, ` on ${host}`) : null);

function fact(k, ...v) {
  return el('div', { class: 'fact' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v));
}

// straggler says who, or why nobody, with the tie set as links.
function straggler(h, sr) {
  if (h.rank >= 0) {
    return fact('Straggler', el('span', { class: 'named' }, rankButton(h.rank, h.host)),
      el('span', { class: 'muted' }, ` · leads ${fmtPct(h.confidence)} of the steps where the stage exposes time`));
  }
  const tie = h.tie_set || [];
  let cand = null;
  if (!tie.length && sr && h.stage) {
    const ev = (sr.stage_evidence || []).find((e) => e.stage === h.stage);
    if (ev && ev.leader && ev.leader.candidate >= 0 && ev.leader.leads > 0) cand = ev.leader;
  }
  return fact('Straggler',
    el('span', { class: 'withheld-title' }, 'No consistent straggler rank'),
    el('span', { class: 'withheld-why', 'data-withheld': h.withheld || '' }, ' — ', withheldText(h.withheld)),
    tie.length ? el('span', { class: 'tieset' }, ' · tie set {', tie.map((r, i) => [i ? ', ' : '', rankButton(r)]), '}') : null,
    cand ? el('span', { class: 'muted' }, ' · most frequent leader ', rankButton(cand.candidate, cand.host), ` (${cand.leads} of ${cand.material_steps} steps)`) : null);
}

// headlineCard renders one headline. rep is the job report, sr the shown
// group's StageFrontier report, cmp its comparison (or null).
export function headlineCard(h, sr, cmp, rep, opts = {}) {
  const facts = [];
  if (h.stage) facts.push(fact('Look at', stageChip(h.stage, sr ? sr.stages : null), el('span', { class: 'muted' }, ` · ${basisText(h.basis)}`)));
  if (!opts.job) facts.push(straggler(h, sr));
  if (sr) {
    const per = sr.num_steps ? sr.exposed_ms / sr.num_steps : null;
    facts.push(fact('Exposed step time', el('b', { class: 'mono' }, fmtMs(per)),
      cmp ? el('span', { class: 'muted' }, ` · reference ${fmtMs(cmp.ref_exposed_ms)} (${cmp.delta_ms >= 0 ? '+' : ''}${fmtPct(cmp.rel)})`) : null));
  }
  if (rep && rep.window && !opts.job) {
    facts.push(fact('Window', el('span', { class: 'mono' }, `steps ${fmtInt(rep.window.from)}–${fmtInt(rep.window.to)}`),
      el('span', { class: 'muted' }, ' · ', rep.window.reason)));
  }
  if (cmp) {
    const r = cmp.reference;
    facts.push(fact('Reference', el('span', { class: 'mono' }, `${r.job_id !== (sr && sr.job_id) ? r.job_id + ' ' : ''}steps ${fmtInt(r.first_step)}–${fmtInt(r.last_step)}`),
      el('span', { class: 'muted' }, ' · ', r.basis)));
  }
  const caveats = h.caveats || [];
  return el('section', { class: 'card headline' + (opts.group ? ' group-headline' : ''), id: opts.group ? 'group-headline' : 'headline', 'aria-label': opts.group ? 'role group diagnosis' : 'diagnosis' },
    opts.title ? el('h2', {}, opts.title) : null,
    el('p', { class: 'headline-text' }, h.text || 'No diagnosis.'),
    el('div', { class: 'facts' }, facts),
    caveats.length ? el('div', { class: 'caveats' }, el('div', { class: 'k' }, 'Caveats'),
      el('ul', {}, caveats.map((c) => el('li', {}, c)))) : null,
    opts.notes && opts.notes.length ? el('div', { class: 'notes' }, el('div', { class: 'k' }, 'Limits of this report'),
      el('ul', {}, opts.notes.map((n) => el('li', {}, n)))) : null);
}
