package incident

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// Capabilities say what evidence the job can be asked for (the escalation
// policy asks only for what can arrive).
type Capabilities struct {
	// Validation: the job's clients poll Greyhound validation plans.
	Validation bool `json:"validation"`
	// Capture: the job's clients take KAIR profiler captures.
	Capture bool `json:"capture"`
	// Profile: a node agent ships CPU stacks for the job's ranks (SysOM).
	Profile bool `json:"profile"`
	// Ranks is the job's rank count (a healthy peer for a profile window).
	Ranks int `json:"ranks"`
}

// Input is everything Fuse reads for one job.
type Input struct {
	Job string
	// Evidence is the job's working set, in any order, re-reports included.
	Evidence []Evidence
	// Actions are the audit lines control recorded.
	Actions []Action
	// Prior are the job's incidents as last published: an incident that
	// overlaps one keeps its ID and DetectedNS; a resolved one past its
	// hold-down is closed: it is returned unchanged and absorbs evidence
	// inside its window (an engine re-reporting an old onset never opens
	// a second incident for it).
	Prior []Incident
	// NowNS is the server time of this fusion (hold-down, DetectedNS).
	NowNS int64
	Caps  Capabilities
	// Stopped, when set, is where the job stopped reporting (control sets
	// it once the job has been idle for its active window): an incident
	// still open then is resolved as "job stopped", since nothing can
	// relieve it any more and an open incident would page forever.
	Stopped *Point
}

// Fuse returns all of the job's incidents, oldest first: the fusion rules
// of docs/design/incidents.md applied to the evidence set. The result
// depends on the set only — evidence order and re-sends change nothing —
// except that incidents overlapping Prior ones keep their IDs and
// DetectedNS.
func Fuse(in Input, cfg Config) []Incident {
	var closed, live []Incident
	for _, p := range in.Prior {
		if p.Job != in.Job {
			continue
		}
		if isClosed(&p, in.NowNS, cfg) {
			closed = append(closed, p)
		} else {
			live = append(live, p)
		}
	}
	evs := canonical(in.Evidence, in.Job)
	evs = absorb(evs, closed, cfg)
	prog := newProgress(evs)
	f := &fuser{cfg: cfg, in: in, prog: prog}
	incs := f.open(evs)
	f.attach(incs, evs)
	out := slices.Clone(closed)
	used := map[string]bool{}
	for i, b := range incs {
		next := int64(-1)
		if i+1 < len(incs) {
			next = incs[i+1].openedAt.WallNS
		}
		inc := f.build(b, next, live, used)
		if inc.DetectedNS == in.NowNS && f.transient(&inc) {
			// Never published and already over: a nuisance, not an
			// incident (Greyhound §7.2's fail-slow lasts at least
			// max(10 iterations, 30 s)).
			continue
		}
		out = append(out, inc)
	}
	// A live prior that no longer matches anything is kept as it was (its
	// evidence left the working set): losing an open incident is worse
	// than showing a stale one.
	for _, p := range live {
		if !used[p.ID] {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Incident) int {
		return cmp.Or(cmp.Compare(a.Opened.WallNS, b.Opened.WallNS), cmp.Compare(a.Opened.Step, b.Opened.Step), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// isClosed: resolved and past its hold-down, so nothing can re-open it.
func isClosed(p *Incident, nowNS int64, cfg Config) bool {
	return p.State == StateResolved && p.Resolved != nil && nowNS-p.Resolved.WallNS >= int64(cfg.HoldDown)
}

// canonical drops other jobs' evidence, keeps one copy per ID (the latest
// At; equal At: the greater encoding, so the choice does not depend on
// order) and sorts.
func canonical(in []Evidence, job string) []*Evidence {
	byID := make(map[string]*Evidence, len(in))
	for i := range in {
		e := &in[i]
		if e.Job != job || e.ID == "" {
			continue
		}
		old, ok := byID[e.ID]
		if !ok || e.AtNS > old.AtNS || (e.AtNS == old.AtNS && greaterEncoding(e, old)) {
			byID[e.ID] = e
		}
	}
	out := make([]*Evidence, 0, len(byID))
	for _, e := range byID {
		out = append(out, e)
	}
	slices.SortFunc(out, compareEvidence)
	return out
}

func greaterEncoding(a, b *Evidence) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Compare(ja, jb) > 0
}

// absorb drops evidence a closed incident already holds, or that falls
// inside a closed incident's window (progress samples are kept: they are
// per step, and lost time reads only the steps inside each incident).
func absorb(evs []*Evidence, closed []Incident, cfg Config) []*Evidence {
	if len(closed) == 0 {
		return evs
	}
	held := map[string]bool{}
	for i := range closed {
		for _, e := range closed[i].Evidence {
			held[e.ID] = true
		}
	}
	out := evs[:0:0]
	for _, e := range evs {
		if held[e.ID] {
			continue
		}
		if e.Signal != SignalProgress && insideClosed(e, closed, cfg) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func insideClosed(e *Evidence, closed []Incident, cfg Config) bool {
	t := e.start()
	if t <= 0 {
		return false
	}
	for i := range closed {
		c := &closed[i]
		if c.Resolved == nil {
			continue
		}
		if t >= c.Opened.WallNS-int64(cfg.Slack) && t <= c.Resolved.WallNS+int64(cfg.HoldDown) {
			return true
		}
	}
	return false
}

// building is an incident while Fuse assembles it.
type building struct {
	onsets  []*Evidence
	reliefs []*Evidence
	// relief is the evidence (or progress step) that recovered it; nil
	// while open.
	relief      *Evidence
	reliefAt    Point
	reliefByRun bool // recovered on the step series, not on a change point
	relapses    int
	openedAt    Point
	healthy     map[Engine]float64
	findings    []*Evidence
	states      []*Evidence
	end         Point // newest evidence
}

type fuser struct {
	cfg  Config
	in   Input
	prog *progress
}

// wall returns the evidence's start on the wall axis, mapping a step-only
// span through the step series.
func (f *fuser) wall(e *Evidence) int64 {
	if t := e.start(); t > 0 {
		return t
	}
	return f.prog.wallOf(e.Incarnation, e.Window.FromStep)
}

func (f *fuser) wallEnd(e *Evidence) int64 {
	if e.Window.ToNS > 0 {
		return e.Window.ToNS
	}
	if t := f.prog.wallOf(e.Incarnation, e.Window.ToStep); t > 0 {
		return t
	}
	return max(e.AtNS, f.wall(e))
}

// opens reports whether e may open an incident: a verified onset, or a
// verified high-confidence finding (a validation that found a slow rank
// with no change point: a straggler present from the start).
func opens(e *Evidence) bool {
	switch e.Signal {
	case SignalOnset:
		return e.Verified
	case SignalFinding:
		return e.Verified && e.Confidence == ConfidenceHigh && len(e.Targets) > 0
	}
	return false
}

// open walks onsets and reliefs in time order and cuts the job's history
// into incidents.
func (f *fuser) open(evs []*Evidence) []*building {
	type ev struct {
		e *Evidence
		t int64
	}
	var seq []ev
	for _, e := range evs {
		if opens(e) || e.Signal == SignalRelief {
			seq = append(seq, ev{e, f.wall(e)})
		}
	}
	slices.SortStableFunc(seq, func(a, b ev) int { return cmp.Or(cmp.Compare(a.t, b.t), compareEvidence(a.e, b.e)) })
	var out []*building
	var cur *building
	hold := int64(f.cfg.HoldDown)
	for _, x := range seq {
		e, t := x.e, x.t
		if e.Signal == SignalRelief {
			if cur == nil || t < cur.openedAt.WallNS {
				continue
			}
			cur.reliefs = append(cur.reliefs, e)
			if cur.relief == nil && f.recovers(cur, e) {
				cur.relief, cur.reliefAt = e, Point{WallNS: t, Step: e.Window.FromStep}
			}
			continue
		}
		if cur != nil && cur.relief == nil {
			// The series may have recovered before this onset without a
			// relief change point.
			if p, ok := f.prog.recovery(cur, f.cfg, t); ok {
				cur.relief, cur.reliefAt, cur.reliefByRun = &Evidence{Signal: SignalRelief}, p, true
			}
		}
		switch {
		case cur == nil, cur.relief != nil && t > cur.reliefAt.WallNS+hold:
			cur = &building{openedAt: Point{WallNS: t, Step: e.Window.FromStep}, healthy: map[Engine]float64{}}
			out = append(out, cur)
		case cur.relief != nil && t > cur.reliefAt.WallNS:
			// A relapse inside the hold-down re-opens the same incident.
			cur.relief, cur.reliefAt, cur.reliefByRun = nil, Point{}, false
			cur.relapses++
		}
		cur.onsets = append(cur.onsets, e)
		if e.Signal == SignalOnset && e.BeforeMS > 0 {
			if _, ok := cur.healthy[e.Engine]; !ok {
				cur.healthy[e.Engine] = e.BeforeMS
			}
		}
	}
	// Without a relief change point, the step series itself can show the
	// recovery (an engine's change-point test may miss a gradual one).
	for i, b := range out {
		if b.relief != nil {
			continue
		}
		next := int64(-1)
		if i+1 < len(out) {
			next = out[i+1].openedAt.WallNS
		}
		if p, ok := f.prog.recovery(b, f.cfg, next); ok {
			b.reliefAt, b.reliefByRun = p, true
			b.relief = &Evidence{ID: "", Signal: SignalRelief}
		}
	}
	return out
}

// recovers: the relief brings the step time back within RecoverRel of
// the healthy time its engine measured before the onset (another engine's
// milliseconds are not comparable: a StageFrontier step is not a
// Greyhound iteration), or, when that engine saw no onset, the relief
// undoes at least the same fraction of the slowdown.
func (f *fuser) recovers(b *building, e *Evidence) bool {
	if e.AfterMS <= 0 {
		return e.Verified
	}
	if h, ok := b.healthy[e.Engine]; ok && h > 0 {
		return e.AfterMS <= (1+f.cfg.RecoverRel)*h
	}
	// No onset of this engine: the change-point halves must be ordered
	// like a recovery and the step series must agree when there is one.
	if p, ok := f.prog.healthyBefore(b.openedAt); ok && e.Engine == EngineStageFrontier {
		return e.AfterMS <= (1+f.cfg.RecoverRel)*p
	}
	return e.Verified && e.AfterMS < e.BeforeMS
}

// window is an incident's span on the wall axis for joining findings.
func (f *fuser) window(b *building, next int64) (lo, hi int64) {
	lo = b.openedAt.WallNS - int64(f.cfg.Slack)
	hi = int64(1<<63 - 1)
	if b.relief != nil {
		hi = b.reliefAt.WallNS + int64(f.cfg.HoldDown)
	}
	if next > 0 && next-1 < hi {
		hi = next - 1
	}
	return lo, hi
}

// attach joins every finding, healthy measurement and state change to the
// incident whose window it overlaps (the latest one when several).
func (f *fuser) attach(incs []*building, evs []*Evidence) {
	if len(incs) == 0 {
		return
	}
	for _, e := range evs {
		switch e.Signal {
		case SignalFinding, SignalHealthy, SignalState:
		default:
			continue
		}
		lo, hi := f.wall(e), f.wallEnd(e)
		for i := len(incs) - 1; i >= 0; i-- {
			next := int64(-1)
			if i+1 < len(incs) {
				next = incs[i+1].openedAt.WallNS
			}
			wlo, whi := f.window(incs[i], next)
			if lo <= whi && hi >= wlo {
				if e.Signal == SignalState {
					incs[i].states = append(incs[i].states, e)
				} else if !slices.Contains(incs[i].onsets, e) {
					incs[i].findings = append(incs[i].findings, e)
				}
				break
			}
		}
	}
}

// newID is the incident's ID: a hash of the job and the opening
// evidence, so a restart that re-fuses the same set gets the same ID.
func newID(job string, opener *Evidence) string {
	h := sha256.Sum256([]byte(job + "\x00" + opener.ID))
	return "inc-" + hex.EncodeToString(h[:8])
}

// matchPrior finds the live prior incident this one continues: the one
// whose opening evidence it holds, else the one whose window overlaps.
func matchPrior(inc *Incident, live []Incident, used map[string]bool) *Incident {
	for i := range live {
		p := &live[i]
		if used[p.ID] {
			continue
		}
		for _, id := range p.Onset {
			if slices.Contains(inc.Onset, id) {
				return p
			}
		}
	}
	for i := range live {
		p := &live[i]
		if used[p.ID] {
			continue
		}
		pEnd := int64(1<<63 - 1)
		if p.Resolved != nil {
			pEnd = p.Resolved.WallNS
		}
		iEnd := int64(1<<63 - 1)
		if inc.Resolved != nil {
			iEnd = inc.Resolved.WallNS
		}
		if inc.Opened.WallNS <= pEnd && p.Opened.WallNS <= iEnd {
			return p
		}
	}
	return nil
}

// transient: the slowdown recovered before lasting Config.MinSteps steps
// and Config.MinDuration (a warm-up hiccup, a checkpoint, a one-off
// stall). Fuse drops such an incident unless it was already published
// (then it resolves like any other).
func (f *fuser) transient(inc *Incident) bool {
	if inc.State == StateOpen || inc.ResolvedBy == ResolvedStopped {
		return false
	}
	d := inc.Windows.During
	// An axis the evidence does not know (no step series: steps 0) does
	// not make a slowdown short.
	short := d.FromNS > 0 && d.ToNS > 0 && d.ToNS-d.FromNS < int64(f.cfg.MinDuration)
	if d.ToStep > 0 && d.ToStep-d.FromStep < f.cfg.MinSteps {
		short = true
	}
	return short
}
