// Role groups: ranks with different roles (pipeline stages, role names)
// do different ordered work, so each group is diagnosed on its own and no
// global rank is ever named (App. A Table 11). The selector shows each
// group's own verdict; picking one shows its headline, stages and heatmap.
import { el } from './dom.js';
import { short } from './format.js';
import { go } from './state.js';

export function groupSelector(groups, current) {
  const tabs = el('div', { class: 'group-tabs', role: 'tablist', 'aria-label': 'role group' }, groups.map((g) => {
    const h = (g.report && g.report.headline) || {};
    const on = g.group === current;
    const verdict = h.rank >= 0 ? `rank ${h.rank}` : 'no rank named';
    return el('button', { class: 'group-tab' + (on ? ' on' : ''), role: 'tab', 'aria-selected': on ? 'true' : 'false', 'data-group': g.group,
      onclick: () => go({ group: g.group, rank: null, stage: null }) },
    el('span', { class: 'g-name mono' }, g.group),
    el('span', { class: 'g-sub' }, `${g.num_ranks} ranks · ${h.stage ? short(h.stage) : '—'} · ${verdict}`));
  }));
  return el('div', { class: 'groups', id: 'groups' },
    el('div', { class: 'groups-title' }, 'Role groups are diagnosed separately — pick one:'), tabs);
}
