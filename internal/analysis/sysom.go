package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/stats"
	"github.com/laggard-dev/laggard/internal/store"
)

// SysomSource is what the SysOM-AI adapter reads: the stack and OS
// keyspaces (docs/format/stack.md, osstat.md), the collective calls and
// communicators (slow-rank detection, groups, iteration time) and the
// stage vectors (the step-time fallback). *store.Store implements it.
type SysomSource interface {
	Job(id string) (*signal.Job, error)
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
	ScanCalls(job string, q store.CallQuery, fn func(c *collective.Call) error) error
	Comms(job string) ([]collective.Comm, error)
	ScanStacks(job string, q store.StackQuery, fn func(b *stack.Batch) error) error
	ScanOSStats(job string, fromNS, toNS int64, fn func(b *osstat.Batch) error) error
	ProfileStats(job string) (store.ProfileStats, error)
}

var _ SysomSource = (*store.Store)(nil)

// Symbolizer names one rank's raw stacks (SysOM-AI §3.4 central,
// deferred symbolization); *symbolize.Resolver implements it. The store
// keeps one rank per record, so rank −1 (every sample of the batches)
// is used only for unregistered processes' records (agent --profile-all).
type Symbolizer interface {
	Profile(batches []*stack.Batch, rank int) *stack.Profile
}

// SysomLimits bound what one SysOM-AI request reads. Zero fields take
// defaults.
type SysomLimits struct {
	// WindowNS is the default window (5 min, about W = 100 iterations of a
	// 3 s step, §3.1), ending where the newest stored record ends.
	WindowNS int64
	// WarmupNS is skipped at the start of the job's stacks before the
	// default baseline window (2 min: start-up, compilation, first
	// checkpoint load are not the job's normal profile).
	WarmupNS int64
	// MaxSamples caps the kept sample records (distinct stacks per batch,
	// of the ranks asked for) of each window one request reads
	// (4,000,000: a 5 min window of 1,024 ranks × 60 batches × ~50
	// distinct stacks is ~3M); beyond it
	// the request fails naming the cap: a cut profile would misstate
	// every function's CPU fraction.
	MaxSamples int64
	// ChunkSamples is how many raw sample records (all ranks together)
	// are held before they are symbolized and merged into their ranks'
	// profiles (65,536), so memory is bounded by distinct stacks, not by
	// the window's length or the number of ranks.
	ChunkSamples int
	// MaxCalls caps the collective calls read per window (2,000,000); a
	// cut is reported in the notes.
	MaxCalls int
	// MaxOSPoints caps the OS points read per window (2,000,000).
	MaxOSPoints int
	// MaxNodes bounds a flame graph's nodes (200,000, a few tens of MB of
	// JSON): beyond it the lightest subtrees are folded into "[pruned]"
	// children, so every width stays exact and the answer says how many.
	MaxNodes int
	// IterRanks is how many ranks' calls estimate the iteration time (8):
	// synchronous training shares one period, so more ranks add cost, not
	// accuracy.
	IterRanks int
}

func (l *SysomLimits) setDefaults() {
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&l.WindowNS, 300e9)
	def(&l.WarmupNS, 120e9)
	def(&l.MaxSamples, 4_000_000)
	if l.ChunkSamples <= 0 {
		l.ChunkSamples = 1 << 16
	}
	if l.MaxCalls <= 0 {
		l.MaxCalls = 2_000_000
	}
	if l.MaxOSPoints <= 0 {
		l.MaxOSPoints = 2_000_000
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = 200_000
	}
	if l.IterRanks <= 0 {
		l.IterRanks = 8
	}
}

// SysomLimitError is a request whose windows hold more than a cap; the
// API answers 413 with the message (which names the cap and what to do).
type SysomLimitError struct {
	What  string // "samples", "os points"
	Limit int64
}

func (e *SysomLimitError) Error() string {
	return fmt.Sprintf("the requested windows hold more than %d %s (the server's cap per request); ask for a shorter window (from_ns/to_ns) or one rank", e.Limit, e.What)
}

// ErrNoStacks: the job has no CPU stacks (of its ranks, for a report) in
// the requested window. errors.Is(err, ErrNoData) holds: the API says
// 404.
var ErrNoStacks error = noStacks{}

type noStacks struct{}

func (noStacks) Error() string        { return "no CPU stacks in the requested window" }
func (noStacks) Is(target error) bool { return target == ErrNoData }

// Sysom is the store→SysOM-AI-engine adapter: it resolves the current and
// baseline windows, symbolizes each rank's stacks, loads calls,
// communicators, OS points and the iteration time, and runs
// sysom.Analyze; it also serves flame graphs, differential flame graphs,
// profile export and OS series. Safe for concurrent use.
type Sysom struct {
	src SysomSource
	sym Symbolizer
	cfg sysom.Config
	lim SysomLimits
}

// NewSysom returns the adapter; cfg must be valid.
func NewSysom(src SysomSource, sym Symbolizer, cfg sysom.Config, lim SysomLimits) (*Sysom, error) {
	if src == nil || sym == nil {
		return nil, errors.New("sysom: a source and a symbolizer are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lim.setDefaults()
	return &Sysom{src: src, sym: sym, cfg: cfg, lim: lim}, nil
}

// Config returns the engine configuration.
func (s *Sysom) Config() sysom.Config { return s.cfg }

// DefaultSysomConfig is the engine's default configuration (k = 2,
// W = 100, δ = 0.5%, §3.1), for callers that do not import the engine.
func DefaultSysomConfig() sysom.Config { return sysom.DefaultConfig() }

// Window bases.
const (
	BasisRequested = "requested"
	// BasisLatest: the default window, WindowNS ending at the newest
	// stored stack.
	BasisLatest = "latest"
	// BasisFirstSteady: the default baseline, the first window of equal
	// length after WarmupNS of the job's stacks — the job's own profile
	// before anything changed (§3.1 temporal baseline, §5.4 case 4: "the
	// pre-update baseline"). A baseline just before the window would
	// already hold a slow drift.
	BasisFirstSteady = "first_steady"
	// BasisPreceding: the job is too young for a steady window before the
	// current one; the baseline is the window of equal length just before
	// it (warm-up included).
	BasisPreceding = "preceding"
	// BasisNone: no baseline (nothing stored before the window).
	BasisNone = "none"
)

// SysomWindow is a report's time span and its baseline, ns since the
// Unix epoch, half-open [from, to).
type SysomWindow struct {
	FromNS     int64  `json:"from_ns"`
	ToNS       int64  `json:"to_ns"`
	Basis      string `json:"basis"`
	BaseFromNS int64  `json:"base_from_ns,omitempty"`
	BaseToNS   int64  `json:"base_to_ns,omitempty"`
	BaseBasis  string `json:"base_basis"`
	// What was read: ranks with stacks, sample records, calls, OS batches.
	Ranks     int   `json:"ranks"`
	Samples   int64 `json:"samples"`
	BaseRanks int   `json:"base_ranks"`
	Calls     int   `json:"calls"`
	OSBatches int   `json:"os_batches"`
}

// SysomReport is the engine's report plus the windows it covers (contract
// §6: GET /sysom).
type SysomReport struct {
	*sysom.Report
	// Job is the job the report is about (its incident evidence names it).
	Job    string      `json:"job,omitempty"`
	Window SysomWindow `json:"window"`
	// Incarnation is the launch of a restarted job the default window
	// reads (-2: all; docs/design/roles-and-runs.md).
	Incarnation int `json:"incarnation"`
}

// Report runs SysOM-AI's analysis (§3.1 slow ranks, CPU waterline,
// layered differential diagnosis, temporal baseline) over the request's
// window.
func (s *Sysom) Report(ctx context.Context, req SysomRequest) (*SysomReport, error) {
	j, err := s.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	w, err := s.resolve(j, req.Window)
	if err != nil {
		return nil, err
	}
	inc, incNote := incarnationOf(j, req.Window.Incarnation)
	// The current and baseline windows each get MaxSamples: a default
	// baseline must not push a report that fits over the cap.
	budget := &sampleBudget{left: s.lim.MaxSamples}
	in := &sysom.Input{}
	cur, n, err := s.profiles(ctx, j.ID, w.FromNS, w.ToNS, nil, budget)
	if err != nil {
		return nil, err
	}
	if len(cur) == 0 {
		return nil, fmt.Errorf("job %q [%d, %d): %w of registered ranks (unregistered processes' are at flamegraph?rank=-1)", j.ID, w.FromNS, w.ToNS, ErrNoStacks)
	}
	in.Profiles, w.Ranks, w.Samples = cur, len(cur), n
	var notes []string
	if budget.skipped > 0 {
		notes = append(notes, fmt.Sprintf("current window: %d stored stack records do not decode and were skipped (store log names their keys)", budget.skipped))
	}
	if w.BaseBasis != BasisNone {
		bb := &sampleBudget{left: s.lim.MaxSamples}
		base, _, err := s.profiles(ctx, j.ID, w.BaseFromNS, w.BaseToNS, nil, bb)
		if err != nil {
			return nil, err
		}
		if bb.skipped > 0 {
			notes = append(notes, fmt.Sprintf("baseline window: %d stored stack records do not decode and were skipped", bb.skipped))
		}
		in.Baseline, w.BaseRanks = base, len(base)
		if len(base) == 0 {
			notes = append(notes, fmt.Sprintf("the baseline window [%d, %d) holds no stacks: no temporal comparison", w.BaseFromNS, w.BaseToNS))
		}
	}
	calls, cut, err := s.calls(ctx, j.ID, w.FromNS, w.ToNS)
	if err != nil {
		return nil, err
	}
	if cut {
		notes = append(notes, fmt.Sprintf("only the first %d collective calls of the window were read: slow-rank detection saw part of it", s.lim.MaxCalls))
	}
	in.Calls, w.Calls = calls, len(calls)
	comms, err := s.src.Comms(j.ID)
	if err != nil {
		return nil, err
	}
	in.Groups = sysomGroups(comms)
	// Ranks on one host share a clock: their collective entries compare
	// directly, with no offset to estimate (the engine's alignment).
	in.Hosts = rankHosts(j)
	var iterNote string
	in.IterMs, iterNote = s.iterMs(j, inc, calls)
	if iterNote != "" {
		notes = append(notes, "current window: "+iterNote)
	}
	if w.BaseBasis != BasisNone {
		bcalls, _, err := s.calls(ctx, j.ID, w.BaseFromNS, w.BaseToNS)
		if err != nil {
			return nil, err
		}
		in.IterBaseMs, iterNote = s.iterMs(j, inc, bcalls)
		if iterNote != "" {
			notes = append(notes, "baseline window: "+iterNote)
		}
		if in.OSBase, err = s.osBatches(ctx, j.ID, w.BaseFromNS, w.BaseToNS); err != nil {
			return nil, err
		}
	}
	if in.OS, err = s.osBatches(ctx, j.ID, w.FromNS, w.ToNS); err != nil {
		return nil, err
	}
	w.OSBatches = len(in.OS)
	// GPU kernel timings (§3.2 CUDA-event uprobes) are not collected yet:
	// the engine reports the GPU layer as not observed, never as equal.
	rep, err := sysom.Analyze(in, s.cfg)
	if err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes, notes...)
	if incNote != "" {
		rep.Notes = append([]string{incNote}, rep.Notes...)
	}
	return &SysomReport{Report: rep, Job: j.ID, Window: w, Incarnation: inc}, nil
}

// ClockSkewNS is how far past the caller's clock stored data may end and
// still anchor the default ("latest") window (agents' clocks drift a
// little); beyond it the data is a bad timestamp and the window ends at
// the caller's clock instead.
const ClockSkewNS = int64(5 * 60 * 1e9)

// sysomGroups turns communicators with a known member list into the
// engine's groups; none → the engine uses one group of all ranks.
func sysomGroups(comms []collective.Comm) []sysom.Group {
	var gs []sysom.Group
	for _, c := range comms {
		if len(c.Ranks) < 2 {
			continue
		}
		gs = append(gs, sysom.Group{ID: c.ID, Ranks: slices.Clone(c.Ranks)})
	}
	return gs
}

// resolve turns a request window into the current and baseline windows.
// A default window and its baseline lie inside one incarnation's span of
// time (the newest unless asked): a restarted job's launches are not
// mixed, nor compared with each other by default.
func (s *Sysom) resolve(j *signal.Job, rw WindowRequest) (SysomWindow, error) {
	job := j.ID
	_, lo, hi, err := incarnationSpan(j, rw.Incarnation)
	if err != nil {
		return SysomWindow{}, err
	}
	w := SysomWindow{FromNS: rw.FromNS, ToNS: rw.ToNS, Basis: BasisRequested}
	if rw.FromNS == 0 || rw.ToNS == 0 {
		first, last, ok, err := s.stackSpan(job, lo, hi)
		if err != nil {
			return w, err
		}
		if !ok {
			return w, fmt.Errorf("job %q: %w", job, ErrNoStacks)
		}
		// An imported profile stamped in the future must not drag the
		// default window away from the live data (review finding 6).
		if rw.NowNS > 0 && last > rw.NowNS+ClockSkewNS {
			last = max(rw.NowNS, first+1)
		}
		switch {
		case rw.FromNS == 0 && rw.ToNS == 0:
			w.ToNS, w.Basis = last, BasisLatest
			w.FromNS = max(first, w.ToNS-s.lim.WindowNS)
		case rw.ToNS == 0:
			w.ToNS = max(last, rw.FromNS+1)
		default:
			w.FromNS = max(first, rw.ToNS-s.lim.WindowNS)
		}
	}
	if w.ToNS <= w.FromNS {
		return w, signal.FieldErrorf(ParamToNS, "%d is not after from_ns=%d", w.ToNS, w.FromNS)
	}
	switch {
	case rw.BaseFromNS != 0 || rw.BaseToNS != 0:
		w.BaseFromNS, w.BaseToNS, w.BaseBasis = rw.BaseFromNS, rw.BaseToNS, BasisRequested
		if w.BaseToNS == 0 {
			w.BaseToNS = w.BaseFromNS + (w.ToNS - w.FromNS)
		}
		if w.BaseFromNS == 0 {
			w.BaseFromNS = max(1, w.BaseToNS-(w.ToNS-w.FromNS))
		}
		if w.BaseToNS <= w.BaseFromNS {
			return w, signal.FieldErrorf(ParamBaseToNS, "%d is not after base_from_ns=%d", w.BaseToNS, w.BaseFromNS)
		}
	case rw.NoBaseline:
		w.BaseBasis = BasisNone
	default:
		w.BaseFromNS, w.BaseToNS, w.BaseBasis = s.baseline(job, w.FromNS, w.ToNS, lo, hi)
	}
	return w, nil
}

// baseline picks the default baseline (see BasisFirstSteady) inside the
// span [lo, hi).
func (s *Sysom) baseline(job string, from, to, lo, hi int64) (int64, int64, string) {
	first, _, ok, err := s.stackSpan(job, lo, hi)
	if err != nil || !ok || first >= from {
		return 0, 0, BasisNone
	}
	n := to - from
	if b := first + s.lim.WarmupNS; b+n <= from {
		return b, b + n, BasisFirstSteady
	}
	// Too young for warm-up plus a full window: the stretch just before,
	// at least half a window of it, or none.
	b := max(first, from-n)
	if from-b < n/2 {
		return 0, 0, BasisNone
	}
	return b, from, BasisPreceding
}

// stackSpan is the job's stored profile span within [lo, hi): the first
// window start and the last window end over its stack and OS records.
func (s *Sysom) stackSpan(job string, lo, hi int64) (first, last int64, ok bool, err error) {
	st, err := s.src.ProfileStats(job)
	if err != nil {
		return 0, 0, false, err
	}
	first, last = max(st.FirstNS, lo), min(st.LastNS, hi)
	if st.StackRecords == 0 || st.FirstNS <= 0 || last < first {
		return 0, 0, false, nil
	}
	return first, last, true, nil
}

// sampleBudget counts sample records against SysomLimits.MaxSamples over
// all the windows one request reads.
// It also counts stored records the scans skipped as undecodable.
type sampleBudget struct {
	left    int64
	skipped int
}

func (b *sampleBudget) take(n int, lim int64) error {
	if b.left -= int64(n); b.left < 0 {
		return &SysomLimitError{What: "sample records", Limit: lim}
	}
	return nil
}

// profiles symbolizes the stacks of [from, to) per rank (only ranks in
// want when not nil). It returns the profiles and the sample records read.
func (s *Sysom) profiles(ctx context.Context, job string, from, to int64, want map[int]bool, budget *sampleBudget) (map[int]*stack.Profile, int64, error) {
	type rankAcc struct {
		pending []*stack.Batch
		n       int
		b       *profileBuilder
	}
	acc := map[int]*rankAcc{}
	flush := func(rank int, a *rankAcc) {
		if len(a.pending) == 0 {
			return
		}
		if p := s.sym.Profile(a.pending, rank); p != nil {
			a.b.add(p)
		}
		clear(a.pending)
		a.pending, a.n = a.pending[:0], 0
	}
	var total int64
	held := 0             // sample records pending over all ranks
	tab := newFuncTable() // one table for every rank (see funcTable)
	// The store returns windows overlapping [from, to-1]; a batch belongs
	// to the window its start lies in.
	q := store.StackQuery{FromNS: from, ToNS: to - 1, Rank: -1, OnSkip: func(string, error) { budget.skipped++ }}
	if len(want) == 1 {
		for r := range want {
			q.Rank = r
		}
	}
	seen := 0
	err := s.src.ScanStacks(job, q, func(b *stack.Batch) error {
		if seen++; seen&255 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if b.StartNS < from || b.StartNS >= to {
			return nil
		}
		perRank := map[int]int{}
		kept := 0
		for i := range b.Samples {
			r := b.Samples[i].Rank
			if want == nil && r < 0 || want != nil && !want[r] {
				continue
			}
			perRank[r]++
			kept++
		}
		// Only what is kept costs: a group's 8 ranks in a 1,024-rank job
		// read every record but pay for their own (review finding 3).
		if err := budget.take(kept, s.lim.MaxSamples); err != nil {
			return err
		}
		total += int64(kept)
		for r, n := range perRank {
			a := acc[r]
			if a == nil {
				a = &rankAcc{b: newSharedProfileBuilder(r, from, to, tab)}
				acc[r] = a
			}
			a.pending = append(a.pending, b)
			a.n += n
			held += n
		}
		if held >= s.lim.ChunkSamples {
			for r, a := range acc {
				flush(r, a)
			}
			held = 0
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	out := make(map[int]*stack.Profile, len(acc))
	for r, a := range acc {
		flush(r, a) // every rank first: the shared table is final after
	}
	for r, a := range acc {
		if p := a.b.profile(); p.Total > 0 {
			out[r] = p
		}
	}
	return out, total, nil
}

// calls reads the window's collective calls (at most MaxCalls; cut
// reports a cut).
func (s *Sysom) calls(ctx context.Context, job string, from, to int64) (calls []collective.Call, cut bool, err error) {
	errFull := errors.New("full")
	n := 0
	err = s.src.ScanCalls(job, store.CallQuery{FromNS: from, ToNS: to - 1, Rank: -1}, func(c *collective.Call) error {
		if n++; n&8191 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if len(calls) >= s.lim.MaxCalls {
			return errFull
		}
		calls = append(calls, *c)
		return nil
	})
	if errors.Is(err, errFull) {
		return calls, true, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil // a job without collectives: no slow-rank layer
	}
	return calls, false, err
}

// osBatches reads the window's OS points (batches that start in it).
func (s *Sysom) osBatches(ctx context.Context, job string, from, to int64) ([]osstat.Batch, error) {
	var out []osstat.Batch
	points := 0
	err := s.src.ScanOSStats(job, from, to-1, func(b *osstat.Batch) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if b.StartNS < from || b.StartNS >= to {
			return nil
		}
		if points += len(b.Points); points > s.lim.MaxOSPoints {
			return &SysomLimitError{What: "OS points", Limit: int64(s.lim.MaxOSPoints)}
		}
		c := *b
		c.Points, c.Absent = slices.Clone(b.Points), slices.Clone(b.Absent)
		out = append(out, c)
		return nil
	})
	return out, err
}

// iterMs estimates the median iteration time over calls: Greyhound's §4.2
// ACF period on up to IterRanks ranks (the longest series wins), else the
// stage vectors' median step wall time over the steps the calls name.
// note says why it is unknown (0).
func (s *Sysom) iterMs(j *signal.Job, inc int, calls []collective.Call) (float64, string) {
	job := j.ID
	if len(calls) == 0 {
		return 0, "iteration time unknown: no collective calls"
	}
	byRank := map[int][]collective.Call{}
	for i := range calls {
		r := calls[i].Rank
		if _, ok := byRank[r]; ok || len(byRank) < s.lim.IterRanks {
			byRank[r] = append(byRank[r], calls[i])
		}
	}
	cfg := greyhound.DefaultConfig()
	var best []greyhound.Iter
	for _, rc := range byRank {
		slices.SortStableFunc(rc, func(a, b collective.Call) int { return cmp.Compare(a.EnterNS, b.EnterNS) })
		ser, err := greyhound.IterationTimes(rc, cfg)
		if err != nil || !ser.OK {
			continue
		}
		if len(ser.Iters) > len(best) {
			best = ser.Iters
		}
	}
	if len(best) > 0 {
		ms := make([]float64, len(best))
		for i, it := range best {
			ms[i] = it.MS
		}
		return stats.Median(ms), ""
	}
	// Stage vectors: the steps the calls name, each step's wall time
	// summed over micro-steps per rank, median over (step, rank).
	lo, hi := int64(-1), int64(-1)
	for i := range calls {
		if st := calls[i].Step; st >= 0 {
			if lo < 0 || st < lo {
				lo = st
			}
			hi = max(hi, st)
		}
	}
	if lo < 0 {
		return 0, "iteration time unknown: no recurring call pattern and no step numbers on the calls"
	}
	type key struct {
		step int64
		rank int
	}
	wall := map[key]float64{}
	// The calls name training steps; a store keeps a restarted launch's
	// as ordinals (stagevec.Ordinal): read the launch the window is in
	// (the newest for incarnation=all, whose calls may span launches).
	from, to := lo, hi
	if _, ok := s.src.(OrdinalSource); ok {
		if inc < 0 {
			inc = j.Current()
		}
		from, to = stagevec.OrdinalRange(inc, lo, hi)
	}
	_ = s.src.Scan(job, from, to, func(v *stagevec.Vector) error {
		if v.WallMS > 0 {
			wall[key{v.Step, v.Rank}] += v.WallMS
		}
		return nil
	})
	if len(wall) == 0 {
		return 0, fmt.Sprintf("iteration time unknown: no recurring call pattern and no stage vectors for steps %d–%d", lo, hi)
	}
	ms := make([]float64, 0, len(wall))
	for _, v := range wall {
		ms = append(ms, v)
	}
	return stats.Median(ms), ""
}

// rankHosts maps each registered rank to the host it reported; nil when
// no rank named one.
func rankHosts(j *signal.Job) map[int]string {
	var out map[int]string
	for _, r := range j.Ranks {
		if r.Host == "" {
			continue
		}
		if out == nil {
			out = make(map[int]string, len(j.Ranks))
		}
		out[r.Rank] = r.Host
	}
	return out
}
