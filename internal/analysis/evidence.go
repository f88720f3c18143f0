package analysis

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Evidence adapters (ARCHITECTURE.md rule 5): each engine's report becomes
// one incident.Evidence per finding, typed by incident.Kind, read from the
// engine's typed fields only (never its text). The files:
//
//	evidence.go               EvidenceEnv, StepClock, IDs, spans, targets
//	evidence_stagefrontier.go StageFrontierEvidence (change points, leader or withheld per group, progress)
//	evidence_greyhound.go     GreyhoundEvidence (change points, phases, cross-group, validation, verdict, lateness)
//	evidence_sysom.go         SysomEvidence (slow ranks, waterline, layered diagnosis, temporal baseline)
//	evidence_kair.go          KairEvidence (Stage 1 rank, culprit and its victims)
//
// Identity: an evidence's ID is the finding's identity, made of the kind,
// the incarnation, the finding's anchor (a change point's step or end
// time, an episode's start, a validation or capture id, an analysis
// window's start) and what it is about (a group, stage, communicator or
// rank) — never wall-clock time of the evaluation, so re-evaluating the
// same data gives the same IDs and the same bytes except AtNS (property
// test TestEvidenceIDsStable).
//
// Only these files of internal/analysis import internal/incident
// (internal/lint TestOnlyEvidenceAdaptersImportIncident).

// EvidenceEnv is what the adapters need beside an engine's report; none
// of it is in the report itself.
type EvidenceEnv struct {
	// Clock maps the report's incarnation's training steps to wall time
	// and back. The zero clock knows neither: an evidence then carries
	// only the axis its engine measures (steps for StageFrontier, wall
	// time for Greyhound and SysOM-AI, both for KAIR's traces).
	Clock StepClock
	// AtNS is when the report was produced (server clock): Evidence.AtNS.
	// Greyhound's report carries its own (GeneratedNS), used when 0.
	AtNS int64
	// Greyhound and Sysom are the engines' configurations the reports
	// were made with (an invalid or zero one: the defaults). The
	// adapters apply the engines' own rules with them (lateness caveats,
	// what explains a rise), never thresholds of their own.
	Greyhound greyhound.Config
	Sysom     sysom.Config
}

func (e *EvidenceEnv) greyhoundConfig() greyhound.Config {
	if e.Greyhound.Validate() != nil {
		return greyhound.DefaultConfig()
	}
	return e.Greyhound
}

func (e *EvidenceEnv) sysomConfig() sysom.Config {
	if e.Sysom.Validate() != nil {
		return sysom.DefaultConfig()
	}
	return e.Sysom
}

// StepClock maps one incarnation's training steps to wall time (Unix ns)
// and back, from anchors: steps whose start the server knows on the wall
// clock. Stage vectors carry no timestamps; collective calls do (EnterNS,
// with the client's step number), so a job with the Python client's
// collective capture has one anchor per step (CallClock); a job with stage
// vectors only has its step times (TimelineClock) and one anchor the
// caller knows. Between anchors the clock interpolates; beyond them it
// extrapolates at their mean rate for at most their own span of steps,
// and says "unknown" (0, -1) farther out. The zero StepClock knows
// nothing.
type StepClock struct {
	steps []int64 // ascending
	ns    []int64 // strictly ascending, ns[i] is steps[i]'s start
}

// NewStepClock returns the clock of starts (step → its start, Unix ns).
// An anchor earlier than an earlier step's is dropped: a clock never runs
// back (a rank's first call of a step can precede another rank's of the
// step before).
func NewStepClock(starts map[int64]int64) StepClock {
	steps := make([]int64, 0, len(starts))
	for s, t := range starts {
		if s >= 0 && t > 0 {
			steps = append(steps, s)
		}
	}
	slices.Sort(steps)
	var c StepClock
	for _, s := range steps {
		t := starts[s]
		if n := len(c.ns); n > 0 && t <= c.ns[n-1] {
			continue
		}
		c.steps, c.ns = append(c.steps, s), append(c.ns, t)
	}
	return c
}

// CallClock is the clock collective calls define: each step's start is
// the earliest entry of any call that names it (collective.Call.Step, set
// by the Python client; -1 calls are skipped).
func CallClock(calls []collective.Call) StepClock {
	starts := map[int64]int64{}
	for i := range calls {
		c := &calls[i]
		if c.Step < 0 || c.EnterNS <= 0 {
			continue
		}
		if t, ok := starts[c.Step]; !ok || c.EnterNS < t {
			starts[c.Step] = c.EnterNS
		}
	}
	return NewStepClock(starts)
}

// Clock is the step clock of a loaded Greyhound window (its calls'
// steps), for GreyhoundEvidence and SysomEvidence over the same time.
func (gi *GreyhoundInput) Clock() StepClock { return CallClock(gi.In.Calls) }

// RankHosts maps each registered rank of j to the host it reported (nil
// when none did): the hosts evidence targets carry.
func RankHosts(j *signal.Job) map[int]string { return rankHosts(j) }

// CallScanner is what ReadStepClock reads (*store.Store implements it).
type CallScanner interface {
	ScanCalls(job string, q store.CallQuery, fn func(c *collective.Call) error) error
}

// ReadStepClock reads the clock of job's calls in q (one rank's calls
// cost a world size less than all of them and place each step within a
// step time of its start): at most maxCalls calls are read.
func ReadStepClock(src CallScanner, job string, q store.CallQuery, maxCalls int) (StepClock, error) {
	var calls []collective.Call
	errFull := errors.New("full")
	err := src.ScanCalls(job, q, func(c *collective.Call) error {
		if len(calls) >= maxCalls {
			return errFull
		}
		if c.Step >= 0 {
			calls = append(calls, *c)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return StepClock{}, err
	}
	return CallClock(calls), nil
}

// TimelineClock places the time axis's steps on the wall clock from their
// own exposed step times, the newest step ending at endNS (when the
// caller saw it: the job's last write, or the evaluation's time). The
// error grows backwards by what the stage vectors do not time (a
// checkpoint, an evaluation pass between steps) and is at most a shipping
// interval at the newest step; prefer CallClock where calls name steps.
func TimelineClock(tl *Timeline, endNS int64) StepClock {
	if tl == nil || len(tl.Series) == 0 || endNS <= 0 {
		return StepClock{}
	}
	starts := make(map[int64]int64, len(tl.Series))
	t := endNS
	for i := len(tl.Series) - 1; i >= 0; i-- {
		p := tl.Series[i]
		if ms := p.ExposedMS; ms > 0 && ms <= stagevec.MaxDurationMS {
			t -= int64(math.Round(ms * 1e6))
		}
		starts[p.Step] = t
	}
	return NewStepClock(starts)
}

// Or is c when it knows anything, else d.
func (c StepClock) Or(d StepClock) StepClock {
	if len(c.steps) > 0 {
		return c
	}
	return d
}

// Known reports whether the clock can place steps it has no anchor for
// (two anchors or more).
func (c StepClock) Known() bool { return len(c.steps) >= 2 }

// rate is the mean ns per step over the anchors (0 with fewer than two).
func (c StepClock) rate() (float64, int64) {
	n := len(c.steps)
	if n < 2 {
		return 0, 0
	}
	span := c.steps[n-1] - c.steps[0]
	return float64(c.ns[n-1]-c.ns[0]) / float64(span), span
}

// NS is step's start on the wall clock, 0 when unknown.
func (c StepClock) NS(step int64) int64 {
	n := len(c.steps)
	if n == 0 || step < 0 {
		return 0
	}
	i, exact := slices.BinarySearch(c.steps, step)
	if exact {
		return c.ns[i]
	}
	r, span := c.rate()
	switch {
	case r == 0:
		return 0
	case i == 0:
		if c.steps[0]-step > span {
			return 0
		}
		return c.ns[0] - int64(float64(c.steps[0]-step)*r)
	case i == n:
		if step-c.steps[n-1] > span {
			return 0
		}
		return c.ns[n-1] + int64(float64(step-c.steps[n-1])*r)
	}
	f := float64(step-c.steps[i-1]) / float64(c.steps[i]-c.steps[i-1])
	return c.ns[i-1] + int64(f*float64(c.ns[i]-c.ns[i-1]))
}

// Step is the step running at wall time ns (the last that started at or
// before it), -1 when unknown.
func (c StepClock) Step(ns int64) int64 {
	n := len(c.ns)
	if n == 0 || ns <= 0 {
		return -1
	}
	i, exact := slices.BinarySearch(c.ns, ns)
	if exact {
		return c.steps[i]
	}
	r, span := c.rate()
	switch {
	case r <= 0:
		return -1
	case i == 0:
		s := c.steps[0] - int64(math.Ceil(float64(c.ns[0]-ns)/r))
		if c.steps[0]-s > span || s < 0 {
			return -1
		}
		return s
	case i == n:
		s := c.steps[n-1] + int64(float64(ns-c.ns[n-1])/r)
		if s-c.steps[n-1] > span {
			return -1
		}
		return s
	}
	f := float64(ns-c.ns[i-1]) / float64(c.ns[i]-c.ns[i-1])
	return c.steps[i-1] + int64(f*float64(c.steps[i]-c.steps[i-1]))
}

// stepSpan is the window of steps [from, to] on both axes: from's start to
// the end of to (the next step's start). Both wall ends known, or neither.
func (c StepClock) stepSpan(from, to int64) incident.Span {
	sp := incident.Span{FromStep: from, ToStep: to}
	a, b := c.NS(from), c.NS(to+1)
	if b == 0 {
		b = c.NS(to)
	}
	if a > 0 && b >= a {
		sp.FromNS, sp.ToNS = a, b
	}
	return sp
}

// nsSpan is the wall window [from, to] on both axes; a step it cannot
// place is -1.
func (c StepClock) nsSpan(from, to int64) incident.Span {
	sp := incident.Span{FromStep: c.Step(from), ToStep: c.Step(to)}
	if from > 0 && to >= from {
		sp.FromNS, sp.ToNS = from, to
	}
	return sp
}

// evidenceID is the finding's identity: its kind, the incarnation and the
// parts that anchor it (a step "s…", a time "t…", an episode "e…", an id,
// then what it is about).
func evidenceID(kind incident.Kind, inc int, parts ...string) string {
	var b strings.Builder
	b.WriteString(string(kind))
	b.WriteString("/i")
	b.WriteString(strconv.Itoa(inc))
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(p)
	}
	return b.String()
}

func stepPart(s int64) string  { return "s" + strconv.FormatInt(s, 10) }
func timePart(ns int64) string { return "t" + strconv.FormatInt(ns, 10) }
func rankPart(r int) string    { return "r" + strconv.Itoa(r) }

// rankTarget names rank r with its host: the job's registration first,
// else what the engine saw.
func rankTarget(r int, hosts map[int]string, engineHost string) incident.Target {
	h := hosts[r]
	if h == "" {
		h = engineHost
	}
	return incident.RankTarget(r, h)
}

func rankTargets(ranks []int, hosts map[int]string) []incident.Target {
	if len(ranks) == 0 {
		return nil
	}
	out := make([]incident.Target, 0, len(ranks))
	for _, r := range ranks {
		out = append(out, rankTarget(r, hosts, ""))
	}
	return out
}

// sortedUnique is xs sorted without repeats (a new slice).
func sortedUnique(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// detail is v as the evidence's Detail. Engine report structs always
// marshal (no channels, funcs or NaN: the engines keep their JSON finite).
func detail(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// viewPath is the API path of an engine view of job with query q.
func viewPath(job, view string, q url.Values) string {
	p := "/api/v1/jobs/" + url.PathEscape(job) + "/" + view
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// nsQuery is a time-keyed view's window (Greyhound, SysOM-AI).
func nsQuery(from, to int64) url.Values {
	q := url.Values{}
	if from > 0 {
		q.Set(ParamFromNS, strconv.FormatInt(from, 10))
	}
	if to > 0 {
		q.Set(ParamToNS, strconv.FormatInt(to, 10))
	}
	return q
}

// sortEvidence orders an adapter's output by ID (deterministic bytes).
func sortEvidence(evs []incident.Evidence) []incident.Evidence {
	slices.SortFunc(evs, func(a, b incident.Evidence) int { return cmp.Compare(a.ID, b.ID) })
	return evs
}

// percent is x as a whole percentage for plain words.
func percent(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

// plausibleNS: t reads as a Unix-epoch time (signal's shared bound), so a
// trace's timestamps can stand in for the wall clock.
func plausibleNS(t int64) bool { return t >= signal.MinTimeNS && t <= signal.MaxTimeNS }
