package analysis

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Incarnations (docs/design/roles-and-runs.md): the store keeps each
// launch of a job apart by storing step s of incarnation n at the ordinal
// stagevec.Ordinal(n, s). Every report reads one incarnation — the newest
// by default — through a view that turns ordinals back into training
// steps, so no engine knows of incarnations; "all" reads them one after
// another on a single axis of positions, with each restart marked.

// OrdinalSource is a Source whose stored steps are ordinals: the store.
// A Source that is not (a file the CLI loaded) holds one incarnation's
// training steps and is read as it is.
type OrdinalSource interface {
	Source
	// StepSpan is the first and last stored step within [lo, hi].
	StepSpan(job string, lo, hi int64) (first, last int64, ok bool, err error)
	// LastStepsIn is the range of the last n distinct stored steps within
	// [lo, hi] and how many there are.
	LastStepsIn(job string, lo, hi int64, n int) (from, to int64, got int, err error)
}

var _ OrdinalSource = (*store.Store)(nil)

// Incarnation choices besides a number.
const (
	// IncNewest reads the job's newest incarnation (the default).
	IncNewest = -1
	// IncAll reads every described incarnation on one axis.
	IncAll = -2
)

// ParamIncarnation is the query parameter (and CLI flag) choosing the
// incarnation: a number, "all", or absent for the newest.
const ParamIncarnation = "incarnation"

// ParseIncarnation reads ParamIncarnation.
func ParseIncarnation(q url.Values) (int, error) {
	v := q.Get(ParamIncarnation)
	switch v {
	case "", "newest", "current":
		return IncNewest, nil
	case "all":
		return IncAll, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > signal.MaxIncarnation {
		return 0, signal.FieldErrorf(ParamIncarnation, "must be an incarnation number in [0, %d], \"all\" or absent (the newest), got %q", signal.MaxIncarnation, signal.Clip(v))
	}
	return n, nil
}

// incarnationChoice reads ParamIncarnation for the time-keyed reports:
// nil for the newest (absent, "newest", "current"), else the choice.
func incarnationChoice(q url.Values) (*int, error) {
	if !q.Has(ParamIncarnation) {
		return nil, nil
	}
	inc, err := ParseIncarnation(q)
	if err != nil || inc == IncNewest {
		return nil, err
	}
	return &inc, nil
}

// incarnationSpan resolves a time-keyed report's incarnation choice (nil:
// the newest) to its number and its span of time [lo, hi) (IncAll: every
// time); one the job never had is a FieldError naming ParamIncarnation.
func incarnationSpan(j *signal.Job, choice *int) (inc int, lo, hi int64, err error) {
	inc, lo, hi = j.Current(), 0, math.MaxInt64
	if choice != nil {
		inc = *choice
	}
	if inc == IncAll {
		return inc, lo, hi, nil
	}
	if inc > j.Current() {
		return 0, 0, 0, signal.FieldErrorf(ParamIncarnation, "job %q has no incarnation %d (its newest is %d)", signal.Clip(j.ID), inc, j.Current())
	}
	lo, hi = TimeWindow(j, inc, lo, hi)
	return inc, lo, hi, nil
}

// IncarnationText renders a choice as its parameter value ("" = newest).
func IncarnationText(inc int) string {
	switch inc {
	case IncNewest:
		return ""
	case IncAll:
		return "all"
	}
	return strconv.Itoa(inc)
}

// IncarnationSpan is one incarnation as a report shows it.
type IncarnationSpan struct {
	N      int                      `json:"n"`
	Reason signal.IncarnationReason `json:"reason"`
	Detail string                   `json:"detail,omitempty"`
	Opened time.Time                `json:"opened"`
	// StartNS is its start on the clients' clock (ns since the epoch);
	// time-keyed signals from StartNS on belong to it.
	StartNS int64  `json:"start_ns"`
	RunID   string `json:"run_id,omitempty"`
	// FirstStep and LastStep are its stored training steps (-1: none).
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	// At is where its first step lies on the axis of an "all" report.
	At *int64 `json:"at,omitempty"`
	// Unshipped lists ranks whose last stored step is before the
	// incarnation's last one: steps they recorded and never shipped
	// (a process killed with SIGKILL loses its queue). Ended
	// incarnations only.
	Unshipped []RankTail `json:"unshipped,omitempty"`
}

// RankTail is a rank whose stored steps end early.
type RankTail struct {
	Rank     int   `json:"rank"`
	LastStep int64 `json:"last_step"` // -1: none in the incarnation's last steps
	Missing  int64 `json:"missing"`   // steps short of the incarnation's last
}

// Incarnations is a report's account of the job's launches.
type Incarnations struct {
	// Analysed is the incarnation the report reads, or -2 (IncAll).
	Analysed int `json:"analysed"`
	Newest   int `json:"newest"`
	// List holds every described incarnation, oldest first.
	List []IncarnationSpan `json:"list"`
	// Note says it in words for the headline.
	Note string `json:"note"`
}

// view is a Source over an OrdinalSource that shows one incarnation per
// job (or all) with training steps (or positions).
type view struct {
	src OrdinalSource
	// inc is the incarnation asked for the job the report is about; other
	// jobs (compare=) are read at their newest.
	job string
	inc int
	all map[string][]segment // per job, when inc == IncAll
}

// segment is one incarnation on the "all" axis: its ordinal steps
// [lo, hi] are the positions [at, at+hi-lo].
type segment struct {
	n      int
	lo, hi int64
	at     int64
}

// View returns src as job's incarnation inc (IncNewest, IncAll or a
// number) shows it, and the report's account of the job's incarnations
// (nil when the job has only ever had one and one was not asked for). A
// Source that does not store ordinals is returned as it is.
func View(src Source, job *signal.Job, inc int) (Source, *Incarnations, error) {
	os, ok := src.(OrdinalSource)
	if !ok {
		return src, nil, nil
	}
	if inc >= 0 && inc > job.Current() {
		return nil, nil, signal.FieldErrorf(ParamIncarnation, "job %q has no incarnation %d (its newest is %d)", signal.Clip(job.ID), inc, job.Current())
	}
	if inc >= 0 {
		if _, ok := job.Incarnation(inc); !ok {
			return nil, nil, signal.FieldErrorf(ParamIncarnation, "incarnation %d of job %q is older than the %d the server describes", inc, signal.Clip(job.ID), signal.KeepIncarnations)
		}
	}
	v := &view{src: os, job: job.ID, inc: inc}
	info, segs, err := describe(os, job, inc)
	if err != nil {
		return nil, nil, err
	}
	if inc == IncAll {
		v.all = map[string][]segment{job.ID: segs}
	}
	if len(job.Incarnations) <= 1 && inc != IncAll {
		info = nil
	}
	return v, info, nil
}

// describe reads each described incarnation's step span (two seeks each)
// and lays them out on the "all" axis.
func describe(src OrdinalSource, job *signal.Job, inc int) (*Incarnations, []segment, error) {
	newest := job.Current()
	info := &Incarnations{Analysed: inc, Newest: newest}
	if inc == IncNewest {
		info.Analysed = newest
	}
	ins := job.Incarnations
	if len(ins) == 0 {
		in, _ := job.Incarnation(0)
		ins = []signal.Incarnation{in}
	}
	var segs []segment
	at := int64(0)
	for _, in := range ins {
		sp := IncarnationSpan{N: in.N, Reason: in.Reason, Detail: in.Detail, Opened: in.Opened, StartNS: in.Start(), RunID: in.RunID, FirstStep: -1, LastStep: -1}
		lo, hi := stagevec.OrdinalRange(in.N, 0, stagevec.MaxStep)
		f, l, ok, err := src.StepSpan(job.ID, lo, hi)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			_, sp.FirstStep = stagevec.SplitOrdinal(f)
			_, sp.LastStep = stagevec.SplitOrdinal(l)
			if inc == IncAll {
				a := at
				sp.At = &a
				segs = append(segs, segment{n: in.N, lo: f, hi: l, at: at})
				at += l - f + 1
			}
			if in.N != newest {
				if sp.Unshipped, err = unshipped(src, job.At(in.N), f, l); err != nil {
					return nil, nil, err
				}
			}
		}
		info.List = append(info.List, sp)
	}
	info.Note = incarnationNote(info)
	return info, segs, nil
}

// tailSteps is how far back unshipped looks: a killed process loses what
// its queue held, seconds of steps.
const tailSteps = 64

// unshipped lists the ranks of an ended incarnation whose last stored step
// (among its last tailSteps steps, ordinals [lo, hi]) is before hi: the
// steps a process recorded and never shipped before it ended.
func unshipped(src OrdinalSource, job *signal.Job, lo, hi int64) ([]RankTail, error) {
	from, to, got, err := src.LastStepsIn(job.ID, lo, hi, tailSteps)
	if err != nil || got == 0 {
		return nil, err
	}
	last := map[int]int64{}
	err = src.Scan(job.ID, from, to, func(v *stagevec.Vector) error {
		last[v.Rank] = v.Step
		return nil
	})
	if err != nil {
		return nil, err
	}
	world := job.WorldSize
	if world > 1<<16 {
		world = 1 << 16 // a listing, not an analysis: bounded
	}
	var out []RankTail
	for r := range world {
		s, ok := last[r]
		switch {
		case !ok:
			if len(last) == 0 {
				continue
			}
			out = append(out, RankTail{Rank: r, LastStep: -1, Missing: to - from + 1})
		case s < to:
			_, st := stagevec.SplitOrdinal(s)
			out = append(out, RankTail{Rank: r, LastStep: st, Missing: to - s})
		}
	}
	return out, nil
}

// incarnationNote says in words which launch a report covers.
func incarnationNote(info *Incarnations) string {
	if len(info.List) == 0 {
		return ""
	}
	restarts := len(info.List) - 1
	times := "once"
	if restarts != 1 {
		times = fmt.Sprintf("%d times", restarts)
	}
	var b strings.Builder
	switch {
	case info.Analysed == IncAll:
		fmt.Fprintf(&b, "The job was launched %d times; this report reads them one after another (steps are positions on one axis, each restart marked).", len(info.List))
	case restarts == 0:
		return ""
	default:
		sp := info.List[len(info.List)-1]
		for _, s := range info.List {
			if s.N == info.Analysed {
				sp = s
			}
		}
		when := time.Unix(0, sp.StartNS).UTC().Format("2006-01-02 15:04:05Z")
		steps := "no steps yet"
		if sp.FirstStep >= 0 {
			steps = fmt.Sprintf("steps %d–%d", sp.FirstStep, sp.LastStep)
		}
		which := "the newest launch"
		if sp.N != info.Newest {
			which = "an earlier launch"
		}
		fmt.Fprintf(&b, "The job restarted %s; this report covers incarnation %d, %s (%s, started %s, %s). Ask for another with incarnation=N or all.", times, sp.N, which, reasonWords(sp.Reason), when, steps)
	}
	lost := 0
	for _, s := range info.List {
		lost += len(s.Unshipped)
	}
	if lost > 0 {
		fmt.Fprintf(&b, " %d rank(s) ended a launch without shipping their last steps (killed before they could).", lost)
	}
	return b.String()
}

// reasonWords is an incarnation reason in words.
func reasonWords(r signal.IncarnationReason) string {
	switch r {
	case signal.IncFirst:
		return "first launch"
	case signal.IncRestart:
		return "a rank restarted"
	case signal.IncLaunch:
		return "new launch by the launcher"
	case signal.IncRunID:
		return "resubmitted with a new run id"
	case signal.IncLayout:
		return "relaunched with another layout"
	}
	return string(r)
}

// pick is the incarnation the view shows for job j.
func (v *view) pick(j *signal.Job) int {
	if j.ID == v.job && v.inc >= 0 {
		return v.inc
	}
	return j.Current()
}

// Job implements Source: the job as the chosen incarnation saw it.
func (v *view) Job(id string) (*signal.Job, error) {
	j, err := v.src.Job(id)
	if err != nil || v.isAll(id) {
		return j, err
	}
	return j.At(v.pick(j)), nil
}

func (v *view) isAll(id string) bool { return v.inc == IncAll && id == v.job }

// Stats implements Source: the incarnation's first and last step; Vectors
// is the job's count of stored vectors (a change counter), 0 when the
// incarnation has none.
func (v *view) Stats(id string) (store.JobStats, error) {
	all, err := v.src.Stats(id)
	if err != nil {
		return all, err
	}
	if v.isAll(id) {
		segs := v.all[id]
		if len(segs) == 0 {
			return store.JobStats{FirstStep: -1, LastStep: -1}, nil
		}
		last := segs[len(segs)-1]
		return store.JobStats{FirstStep: 0, LastStep: last.at + last.hi - last.lo, Vectors: all.Vectors}, nil
	}
	j, err := v.src.Job(id)
	if err != nil {
		return store.JobStats{}, err
	}
	fs, ls, ok, err := LaunchSteps(v.src, id, v.pick(j))
	if err != nil || !ok {
		return store.JobStats{FirstStep: -1, LastStep: -1}, err
	}
	return store.JobStats{FirstStep: fs, LastStep: ls, Vectors: all.Vectors}, nil
}

// LaunchSteps is the first and last stored training step of job's
// incarnation inc, read from a source that stores ordinals (two seeks).
func LaunchSteps(src interface {
	StepSpan(job string, lo, hi int64) (first, last int64, ok bool, err error)
}, job string, inc int) (first, last int64, ok bool, err error) {
	lo, hi := stagevec.OrdinalRange(inc, 0, stagevec.MaxStep)
	f, l, ok, err := src.StepSpan(job, lo, hi)
	if err != nil || !ok {
		return -1, -1, false, err
	}
	_, first = stagevec.SplitOrdinal(f)
	_, last = stagevec.SplitOrdinal(l)
	return first, last, true, nil
}

// Scan implements Source over training steps (or positions).
func (v *view) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	if v.isAll(id) {
		for _, s := range v.all[id] {
			lo, hi := max(from, s.at)-s.at+s.lo, min(to, s.at+s.hi-s.lo)-s.at+s.lo
			if lo > hi {
				continue
			}
			err := v.src.Scan(id, lo, hi, func(x *stagevec.Vector) error {
				x.Step = x.Step - s.lo + s.at
				return fn(x)
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	j, err := v.src.Job(id)
	if err != nil {
		return err
	}
	if to < from || to < 0 {
		return nil
	}
	lo, hi := stagevec.OrdinalRange(v.pick(j), from, to)
	return v.src.Scan(id, lo, hi, func(x *stagevec.Vector) error {
		_, x.Step = stagevec.SplitOrdinal(x.Step)
		return fn(x)
	})
}

// LastSteps implements Source over training steps (or positions).
func (v *view) LastSteps(id string, n int) (from, to int64, ok bool, err error) {
	if v.isAll(id) {
		segs := v.all[id]
		need := n
		for i := len(segs) - 1; i >= 0 && need > 0; i-- {
			s := segs[i]
			f, t, got, err := v.src.LastStepsIn(id, s.lo, s.hi, need)
			if err != nil {
				return 0, 0, false, err
			}
			if got == 0 {
				continue
			}
			if !ok {
				to, ok = t-s.lo+s.at, true
			}
			from = f - s.lo + s.at
			need -= got
		}
		return from, to, ok, nil
	}
	j, err := v.src.Job(id)
	if err != nil {
		return 0, 0, false, err
	}
	lo, hi := stagevec.OrdinalRange(v.pick(j), 0, stagevec.MaxStep)
	f, t, got, err := v.src.LastStepsIn(id, lo, hi, n)
	if err != nil || got == 0 {
		return 0, 0, false, err
	}
	_, from = stagevec.SplitOrdinal(f)
	_, to = stagevec.SplitOrdinal(t)
	return from, to, true, nil
}

// incarnationOf resolves a time-keyed report's incarnation choice (nil:
// the newest) and says in words which launch it reads when the job has
// had several ("" otherwise).
func incarnationOf(j *signal.Job, choice *int) (int, string) {
	inc := j.Current()
	if choice != nil {
		inc = *choice
	}
	if len(j.Incarnations) <= 1 && inc != IncAll {
		return inc, ""
	}
	restarts := len(j.Incarnations) - 1
	if inc == IncAll {
		return inc, fmt.Sprintf("The job was launched %d times; this report's default window may span restarts (incarnation=all).", restarts+1)
	}
	in, _ := j.Incarnation(inc)
	which := "the newest launch"
	if inc != j.Current() {
		which = "an earlier launch"
	}
	return inc, fmt.Sprintf("The job restarted %d time(s); this report's default window covers incarnation %d, %s (%s, started %s). Ask for another with incarnation=N or all.",
		restarts, inc, which, reasonWords(in.Reason), time.Unix(0, in.Start()).UTC().Format("2006-01-02 15:04:05Z"))
}

// TimeWindow clamps [from, to) (ns since the epoch) to incarnation inc's
// span for the time-keyed signals; IncAll leaves it as it is.
func TimeWindow(job *signal.Job, inc int, from, to int64) (int64, int64) {
	if inc == IncAll {
		return from, to
	}
	if inc == IncNewest {
		inc = job.Current()
	}
	lo, hi := job.TimeSpan(inc)
	return max(from, lo), min(to, hi)
}

// ScanStepSpan is OrdinalSource.StepSpan for a Source that has only
// Scan (test doubles, in-memory sources): one pass over [lo, hi].
func ScanStepSpan(src Source, job string, lo, hi int64) (first, last int64, ok bool, err error) {
	err = src.Scan(job, lo, hi, func(v *stagevec.Vector) error {
		if !ok {
			first, ok = v.Step, true
		}
		last = v.Step
		return nil
	})
	return first, last, ok, err
}

// ScanLastStepsIn is OrdinalSource.LastStepsIn for a Source that has only
// Scan: it collects the distinct steps of [lo, hi] (fine for the small
// jobs such sources hold; the store answers from its index).
func ScanLastStepsIn(src Source, job string, lo, hi int64, n int) (from, to int64, got int, err error) {
	var steps []int64
	err = src.Scan(job, lo, hi, func(v *stagevec.Vector) error {
		if len(steps) == 0 || steps[len(steps)-1] != v.Step {
			steps = append(steps, v.Step)
		}
		return nil
	})
	if err != nil || len(steps) == 0 || n < 1 {
		return 0, 0, 0, err
	}
	got = min(n, len(steps))
	return steps[len(steps)-got], steps[len(steps)-1], got, nil
}
