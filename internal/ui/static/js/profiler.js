// Where to aim the heavy profiler: a ready-to-copy torch.profiler snippet
// that traces only the suspect rank(s), for a short span of steps inside
// the window. Stage vectors say where and who; a kernel-level trace of
// exactly those steps on exactly those ranks says why, at a fraction of
// the cost of tracing the whole job.
import { el, card } from './dom.js';
import { fmtInt, short, withheldText } from './format.js';
import { mostBehind, rankMatrix } from './heatmap.js';

const ACTIVE = 3; // steps traced
const WARMUP = 2; // steps the profiler runs untraced first (its own start-up)

// suspects picks the ranks to trace and says why, most specific first:
// the named straggler, the tie set, the most frequent leader, else the
// rank furthest behind at the headline stage.
function suspects(sr, h) {
  const stage = h.stage || sr.top1;
  if (h.rank >= 0) return { ranks: [h.rank], why: `straggler rank ${h.rank}${h.host ? ' on ' + h.host : ''} at ${stage}` };
  if ((h.tie_set || []).length) return { ranks: h.tie_set.slice(), why: `ranks ${h.tie_set.join(', ')} tie for the lead at ${stage}` };
  const ev = (sr.stage_evidence || []).find((e) => e.stage === stage);
  if (ev && ev.leader && ev.leader.candidate >= 0 && ev.leader.leads > 0) {
    return { ranks: [ev.leader.candidate], why: `no rank is named (${withheldText(h.withheld)}); rank ${ev.leader.candidate} leads most often at ${stage} (${ev.leader.leads} of ${ev.leader.material_steps} steps)` };
  }
  const mx = rankMatrix(sr);
  const s = Math.max(0, mx.stages.indexOf(stage));
  const top = mostBehind(mx, s)[0];
  const r = top != null ? mx.ranks[top].rank : 0;
  return { ranks: [r], why: `no rank is named (${withheldText(h.withheld)}); rank ${r} is furthest behind the typical rank at ${stage}` };
}

// span picks ACTIVE steps inside the window: around the picked step, else
// the window's last steps (the most recent behaviour).
function traceSpan(sr, pick) {
  const steps = (sr.step_series || []).map((p) => p.step);
  if (!steps.length) return null;
  let end = steps.length - 1;
  if (pick != null) {
    const k = steps.findIndex((s) => s >= pick);
    if (k >= 0) end = Math.min(steps.length - 1, k + ACTIVE - 1);
  }
  const first = steps[Math.max(0, end - ACTIVE + 1)];
  const last = steps[end];
  return { first, last, active: last - first + 1 };
}

const pyStr = (s) => JSON.stringify(String(s));

function snippet(jobId, sr, h, group, pick) {
  const sus = suspects(sr, h);
  const sp = traceSpan(sr, pick);
  if (!sp) return null;
  const warmup = Math.min(WARMUP, sp.first);
  const wait = sp.first - warmup;
  const dir = `./laggard-traces/${jobId}${group ? '-' + group : ''}`;
  const stage = h.stage || sr.top1 || '';
  const code = `# laggard: trace steps ${sp.first}–${sp.last} of job ${jobId}${group ? ` (role group ${group})` : ''} on the suspect rank(s) only.
# Why: ${sus.why}${stage ? ` (${short(stage)})` : ''}; window ${sr.first_step}–${sr.last_step}.
# prof.step() runs once per optimizer step; the schedule counts those calls
# from START_STEP, so set START_STEP to the step this loop starts at when
# resuming from a checkpoint.
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

START_STEP = 0
PROFILE_RANKS = {${sus.ranks.join(', ')}}

prof = None
if dist.get_rank() in PROFILE_RANKS:
    prof = profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        # wait until step ${wait}, warm up ${warmup} step(s), trace ${sp.active}: steps ${sp.first}–${sp.last}
        schedule=schedule(wait=max(0, ${wait} - START_STEP), warmup=${warmup}, active=${sp.active}, repeat=1),
        on_trace_ready=tensorboard_trace_handler(${pyStr(dir)}, worker_name=f"rank{dist.get_rank()}"),
        record_shapes=True,
        with_stack=True,
    )
    prof.start()

for step, batch in enumerate(train_loader, start=START_STEP):
    ...  # your training step
    if prof is not None:
        prof.step()

if prof is not None:
    prof.stop()
`;
  return { code, sus, sp };
}

async function copy(text, ta, status) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    // No clipboard permission (plain http, headless): select and copy.
    ta.focus();
    ta.select();
    try { document.execCommand('copy'); } catch (e2) { /* the text stays selected */ }
  }
  status.textContent = 'Copied to the clipboard.';
  setTimeout(() => { status.textContent = ''; }, 3000);
}

export function profilerCard(jobId, sr, h, group, pick) {
  const s = snippet(jobId, sr, h, group, pick);
  if (!s) return card('Where to aim the profiler', null, el('p', { class: 'muted' }, 'No steps in this window.'));
  const ta = el('textarea', { class: 'code', id: 'profiler-code', readonly: true, rows: Math.min(20, s.code.split('\n').length), spellcheck: 'false',
    'aria-label': 'torch.profiler snippet' });
  ta.value = s.code;
  const status = el('span', { class: 'muted small', role: 'status', 'aria-live': 'polite' });
  return card('Where to aim the profiler', `torch.profiler on rank${s.sus.ranks.length > 1 ? 's' : ''} ${s.sus.ranks.join(', ')}, steps ${fmtInt(s.sp.first)}–${fmtInt(s.sp.last)}`,
    el('p', { class: 'small' }, 'Trace only where the stage vectors point: ', s.sus.why,
      '. Pick another span by clicking a step on the time axis. Traces land in TensorBoard (',
      el('code', {}, 'tensorboard --logdir ./laggard-traces'), ').'),
    el('div', { class: 'code-wrap' }, ta,
      el('div', { class: 'code-actions' }, el('button', { class: 'btn', id: 'copy-profiler', onclick: () => copy(s.code, ta, status) }, 'Copy'), status)));
}
