package analysis

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/incident"
)

// SysomEvidence adapts a SysOM-AI report (§3.1) over its window: each slow
// rank (late into its group's collectives), each rank above its group's
// CPU waterline (its flags together; ranks the engine found on time at
// their collectives are left out, as the engine leaves them
// undiagnosed), each layered diagnosis, and the temporal baseline's hot
// paths when every rank slowed alike. Windows are the report's (wall
// clock); steps come from env.Clock. A report over every incarnation, or
// one that does not name its job, gives none.
//
// A diagnosis is one evidence at its concluded layer (the first of GPU,
// CPU, OS that differs from the healthy peer), not one per differing
// layer: the engine concludes one layer and reads the others as
// corroboration (an OS run queue under a foreign process) or coincidence
// (its own code paths when the GPU was not observed); one evidence per
// layer would let one comparison of one engine count as several
// supports, and put layers in the chain the engine itself subordinated.
// The other differing layers are named in the text.
func SysomEvidence(rep *SysomReport, hosts map[int]string, env EvidenceEnv) []incident.Evidence {
	if rep == nil || rep.Report == nil || rep.Incarnation == IncAll || rep.Job == "" {
		return nil
	}
	a := sysomAdapter{rep: rep, inc: max(rep.Incarnation, 0), hosts: hosts, env: &env, cfg: env.sysomConfig()}
	a.win = env.Clock.nsSpan(rep.Window.FromNS, rep.Window.ToNS)
	a.anchor = timePart(rep.Window.FromNS)
	var out []incident.Evidence
	for i := range rep.SlowRanks {
		out = append(out, a.slowRank(&rep.SlowRanks[i]))
	}
	out = append(out, a.waterline()...)
	for i := range rep.Diagnoses {
		out = append(out, a.diagnosis(&rep.Diagnoses[i]))
	}
	if rep.Temporal != nil {
		out = append(out, a.temporal(rep.Temporal))
	}
	return sortEvidence(out)
}

type sysomAdapter struct {
	rep    *SysomReport
	inc    int
	hosts  map[int]string
	env    *EvidenceEnv
	cfg    sysom.Config
	win    incident.Span
	anchor string
}

func (a *sysomAdapter) base(kind incident.Kind, parts ...string) incident.Evidence {
	return incident.Evidence{ID: evidenceID(kind, a.inc, append([]string{a.anchor}, parts...)...), Kind: kind,
		Engine: incident.EngineSysom, Job: a.job(), Incarnation: a.inc, AtNS: a.env.AtNS, Window: a.win,
		Signal: incident.SignalFinding, View: a.view()}
}

func (a *sysomAdapter) job() string { return a.rep.Job }

// view is the SysOM-AI view over the report's window and baseline.
func (a *sysomAdapter) view() string {
	w := a.rep.Window
	q := nsQuery(w.FromNS, w.ToNS)
	if w.BaseFromNS > 0 && w.BaseToNS > w.BaseFromNS {
		q.Set(ParamBaseFromNS, strconv.FormatInt(w.BaseFromNS, 10))
		q.Set(ParamBaseToNS, strconv.FormatInt(w.BaseToNS, 10))
	}
	return viewPath(a.job(), "sysom", q)
}

// diagnosisOf is rank's diagnosis (nil: none).
func (a *sysomAdapter) diagnosisOf(rank int) *sysom.Diagnosis {
	for i := range a.rep.Diagnoses {
		if a.rep.Diagnoses[i].Rank == rank {
			return &a.rep.Diagnoses[i]
		}
	}
	return nil
}

// slowRank is a rank late into its group's collectives (§3.1 slow-rank
// detection). The engine flagged it against its peers' spread; it is
// high confidence when its entry delay also explains the iteration
// time's rise (sysom.Explained.Explains): a rank late by a little while
// the job slowed by a lot is not the cause of that slowdown.
func (a *sysomAdapter) slowRank(s *sysom.SlowRank) incident.Evidence {
	e := a.base(incident.KindSysomSlowRank, "comm:"+s.Group, rankPart(s.Rank))
	e.Targets = []incident.Target{rankTarget(s.Rank, a.hosts, "")}
	e.Layer, e.Category = incident.LayerCollective, incident.CategoryUnknown
	e.Text = fmt.Sprintf("Rank %d enters group %s's collectives %.2f ms late (its peers %.2f ± %.2f ms)", s.Rank, s.Group, s.MeanLateMs, s.PeerMeanMs, s.PeerSigmaMs)
	why := fmt.Sprintf("slow-rank detection: z = %.1f over %d instances, last on %s of them", s.Z, s.Instances, percent(s.LastShare))
	if s.Steps > 0 {
		why += fmt.Sprintf(", later than its peers' median in %s of %d steps", percent(s.Persistence), s.Steps)
	}
	e.Confidence = incident.ConfidenceHigh
	switch d := a.diagnosisOf(s.Rank); {
	case d == nil:
		e.Confidence = incident.ConfidenceLow
		why += "; not diagnosed, so how much of the slowdown it explains is unknown"
	case !d.Explained.Explains(a.cfg):
		e.Confidence = incident.ConfidenceLow
		x := d.Explained
		why += fmt.Sprintf("; its entry delay (%.2f ms per step) explains only %s of the iteration time's rise (%.1f → %.1f ms)", x.DelayMs, percent(x.Share), x.IterBaseMs, x.IterMs)
	}
	e.Reason = why
	e.Detail = detail(s)
	return e
}

// waterline names each rank above its group's CPU waterline (§3.1), its
// flags together: a CPU-share outlier is a candidate (low) — it says what
// the rank runs more of, not that it delays anyone. Flags the engine
// found on time at their collectives (OnTime) are left out, as the
// engine does not diagnose them.
func (a *sysomAdapter) waterline() []incident.Evidence {
	type key struct {
		group string
		rank  int
	}
	var order []key
	flags := map[key][]sysom.WaterlineFlag{}
	for _, w := range a.rep.Waterline {
		if w.OnTime {
			continue
		}
		k := key{w.Group, w.Rank}
		if _, ok := flags[k]; !ok {
			order = append(order, k)
		}
		flags[k] = append(flags[k], w)
	}
	var out []incident.Evidence
	for _, k := range order {
		fs := flags[k]
		e := a.base(incident.KindSysomWaterline, "comm:"+k.group, rankPart(k.rank))
		e.Targets = []incident.Target{rankTarget(k.rank, a.hosts, "")}
		e.Layer, e.Category, e.Confidence = incident.LayerCPU, incident.CategoryUnknown, incident.ConfidenceLow
		top := fs[0]
		if top.Foreign {
			e.Category = incident.CategoryOS
			e.Text = fmt.Sprintf("Another process (%s) takes %s of rank %d's CPU samples", strings.TrimPrefix(top.Func, "[other process] "), percent(top.Fraction), k.rank)
		} else {
			e.Text = fmt.Sprintf("Rank %d spends %s of its CPU in %s against %s on the rest of group %s", k.rank, percent(top.Fraction), top.Func, percent(top.Mean), k.group)
		}
		if len(fs) > 1 {
			e.Text += fmt.Sprintf(" (and %d more function(s))", len(fs)-1)
		}
		e.Reason = "above the group's CPU waterline: a candidate, since more CPU in a function does not by itself delay the group"
		e.Detail = detail(fs)
		out = append(out, e)
	}
	return out
}

// sysomLayer maps the concluded layer of a diagnosis to the chain's.
var sysomLayer = map[sysom.LayerName]incident.Layer{
	sysom.LayerGPU: incident.LayerGPU,
	sysom.LayerCPU: incident.LayerCPU,
	sysom.LayerOS:  incident.LayerOS,
}

// sysomCause says each cause in plain words and routes it to a category.
var sysomCause = map[sysom.Cause]struct {
	words string
	cat   incident.Category
}{
	sysom.CauseGPUUniform:  {"every GPU kernel runs slower (clocks, thermal throttling, memory errors)", incident.CategoryCompute},
	sysom.CauseGPUKernel:   {"specific GPU kernels run slower", incident.CategoryCompute},
	sysom.CauseNetRX:       {"network receive interrupts run on its cores", incident.CategoryOS},
	sysom.CauseIRQ:         {"interrupt handling runs on its cores", incident.CategoryOS},
	sysom.CauseVFSLock:     {"file path lookups contend on a kernel lock", incident.CategoryOS},
	sysom.CauseKernelLock:  {"kernel lock contention", incident.CategoryOS},
	sysom.CauseForeign:     {"another process runs on its cores", incident.CategoryOS},
	sysom.CauseStorageIO:   {"data loading and storage client work", incident.CategoryData},
	sysom.CauseLogging:     {"logging or serialization on its training threads", incident.CategoryCompute},
	sysom.CauseApplication: {"its own code does more work", incident.CategoryCompute},
	sysom.CauseRunQueue:    {"its threads wait for a CPU", incident.CategoryOS},
	sysom.CauseMigration:   {"its threads migrate between CPUs or NUMA nodes", incident.CategoryOS},
	sysom.CauseSteal:       {"the hypervisor takes its CPU time", incident.CategoryOS},
}

func causeWords(c sysom.Cause) (string, incident.Category) {
	if w, ok := sysomCause[c]; ok {
		return w.words, w.cat
	}
	return "an unclassified difference", incident.CategoryUnknown
}

// diagnosis is one rank's layered differential diagnosis at its
// concluded layer, with the engine's confidence; one that concludes no
// layer is a withholding.
func (a *sysomAdapter) diagnosis(d *sysom.Diagnosis) incident.Evidence {
	e := a.base(incident.KindSysomDiagnosis, "comm:"+d.Group, rankPart(d.Rank))
	e.Reason = d.Summary
	e.Detail = detail(d)
	layer, ok := sysomLayer[d.Layer]
	if !ok {
		e.Confidence, e.Withheld = incident.ConfidenceWithheld, string(sysom.LayerInconclusive)
		e.Category = incident.CategoryUnknown
		if d.Peer < 0 {
			e.Text = fmt.Sprintf("SysOM-AI cannot diagnose rank %d: group %s has no healthy rank to compare with", d.Rank, d.Group)
		} else {
			e.Text = fmt.Sprintf("Rank %d's GPU, CPU and OS show no difference from healthy rank %d that explains it", d.Rank, d.Peer)
		}
		return e
	}
	words, cat := causeWords(d.Cause)
	e.Targets = []incident.Target{rankTarget(d.Rank, a.hosts, "")}
	e.Layer, e.Category = layer, cat
	e.Confidence = incident.ConfidenceLow
	if d.Confidence == sysom.ConfidenceHigh {
		e.Confidence = incident.ConfidenceHigh
	}
	e.Text = fmt.Sprintf("Rank %d's %s layer differs from healthy rank %d: %s", d.Rank, strings.ToUpper(string(d.Layer)), d.Peer, words)
	var also []string
	for _, l := range d.Layers {
		if l.Layer != d.Layer && l.Finding == sysom.FindingDiffers {
			also = append(also, strings.ToUpper(string(l.Layer)))
		}
	}
	if len(also) > 0 {
		e.Text += "; its " + strings.Join(also, " and ") + " layer differs too"
	}
	return e
}

// temporal is the temporal baseline (§3.1): no rank stands out and the
// iteration time rose, so the job's profile now is compared with its own
// earlier window. It explains a uniform slowdown (the whole job) unless
// the grown path concentrates on a few ranks (those, as candidates). Its
// candidates are hot paths, not a conclusion: low confidence.
func (a *sysomAdapter) temporal(t *sysom.Temporal) incident.Evidence {
	e := a.base(incident.KindSysomTemporal)
	e.Confidence = incident.ConfidenceLow
	if len(t.Suspects) > 0 {
		e.Targets = rankTargets(sortedUnique(t.Suspects), a.hosts)
	} else {
		e.Targets = []incident.Target{incident.JobTarget()}
	}
	e.Text = fmt.Sprintf("Iteration time rose %s against the job's earlier window (%.1f → %.1f ms) with no rank standing out", percent(t.Rise), t.IterBaseMs, t.IterMs)
	if len(t.Candidates) == 0 {
		e.Category = incident.CategoryUniform
		e.Text += "; no CPU path grew with it"
		e.Reason = "temporal baseline: nothing in the CPU profiles explains the rise (off-CPU waits such as slow reads are not sampled)"
		e.Detail = detail(t)
		return e
	}
	c := t.Candidates[0]
	words, cat := causeWords(c.Cause)
	e.Layer, e.Category = incident.LayerCPU, cat
	e.Text += fmt.Sprintf("; the CPU path %s grew from %s to %s (%s)", c.Func, percent(c.PeerFraction), percent(c.Fraction), words)
	if len(t.Suspects) > 0 {
		e.Text += fmt.Sprintf(", mostly on rank(s) %s", joinRanks(sortedUnique(t.Suspects)))
	}
	e.Reason = "temporal baseline: the job's CPU profile now against its own earlier window; the grown paths are candidates"
	if t.Next != "" {
		e.Reason += ". Next: " + t.Next
	}
	e.Detail = detail(t)
	return e
}
