package analysis

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// SysOM-AI request parameters (contract §6).
const (
	ParamBaseFromNS = "base_from_ns"
	ParamBaseToNS   = "base_to_ns"
	ParamRank       = "rank"
	ParamARank      = "a_rank"
	ParamBRank      = "b_rank"
	ParamFormat     = "format"
	ParamName       = "name"
	// GroupAll names the group of every rank with stacks.
	GroupAll = "all"
)

// WindowRequest is a window in ns since the Unix epoch, [FromNS, ToNS),
// and optionally its baseline; zero fields take defaults (SysomWindow).
type WindowRequest struct {
	FromNS, ToNS         int64
	BaseFromNS, BaseToNS int64
	// NoBaseline skips the baseline (flame graphs of one window).
	NoBaseline bool
	// NowNS is the caller's clock; the adapter never reads one.
	NowNS int64
	// Incarnation chooses the launch a default window reads (nil: the
	// newest; IncAll: every one); explicit windows are read as given.
	Incarnation *int
}

// SysomRequest asks for a job's SysOM-AI report.
type SysomRequest struct {
	Job    string
	Window WindowRequest
}

// Selection is one rank (Rank ≥ −1; −1 is unregistered processes) or a
// group of ranks: a communicator id or GroupAll.
type Selection struct {
	Rank  int
	Group string
}

// Label names the selection ("rank 3", "group dp0").
func (s Selection) Label() string {
	if s.Group != "" {
		return "group " + s.Group
	}
	if s.Rank < 0 {
		return "unregistered processes"
	}
	return "rank " + strconv.Itoa(s.Rank)
}

// FlameRequest asks for one selection's flame graph or profile export.
type FlameRequest struct {
	Job    string
	Sel    Selection
	Window WindowRequest
	// Format is the export format ("pprof" or "collapsed") for profile
	// export; empty for flame graphs.
	Format string
}

// DiffRequest asks for a differential flame graph: A against B, either
// two selections over one window, or one selection now (A) against its
// baseline (B).
type DiffRequest struct {
	Job      string
	A, B     Selection
	Baseline bool // B is A over the baseline window
	Window   WindowRequest
}

// OSRequest asks for OS series over [FromNS, ToNS).
type OSRequest struct {
	Job          string
	FromNS, ToNS int64
	// Names filters metric names (empty: all); Rank filters by rank
	// (−2: all; −1: node/CPU-level points only).
	Names []string
	Rank  int
	NowNS int64
}

func nsParam(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > collective.MaxNS {
		return 0, signal.FieldErrorf(name, "must be a Unix-epoch nanosecond time in [1, %d], got %q", collective.MaxNS, signal.Clip(v))
	}
	return n, nil
}

func rankParam(q url.Values, name string) (int, bool, error) {
	v := q.Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 || n > stack.MaxRank {
		return 0, false, signal.FieldErrorf(name, "must be a rank in [-1, %d] (-1: unregistered processes), got %q", stack.MaxRank, signal.Clip(v))
	}
	return n, true, nil
}

// ParseWindow reads from_ns, to_ns, base_from_ns and base_to_ns.
func ParseWindow(q url.Values, nowNS int64) (WindowRequest, error) {
	w := WindowRequest{NowNS: nowNS}
	var err error
	for _, p := range []struct {
		name string
		dst  *int64
	}{{ParamFromNS, &w.FromNS}, {ParamToNS, &w.ToNS}, {ParamBaseFromNS, &w.BaseFromNS}, {ParamBaseToNS, &w.BaseToNS}} {
		if *p.dst, err = nsParam(q, p.name); err != nil {
			return w, err
		}
	}
	if w.ToNS != 0 && w.ToNS <= w.FromNS {
		return w, signal.FieldErrorf(ParamToNS, "%d is not after from_ns=%d", w.ToNS, w.FromNS)
	}
	if w.BaseToNS != 0 && w.BaseToNS <= w.BaseFromNS {
		return w, signal.FieldErrorf(ParamBaseToNS, "%d is not after base_from_ns=%d", w.BaseToNS, w.BaseFromNS)
	}
	if q.Has(ParamIncarnation) {
		inc, err := ParseIncarnation(q)
		if err != nil {
			return w, err
		}
		if inc != IncNewest {
			w.Incarnation = &inc
		}
	}
	return w, nil
}

// ParseSysomRequest reads a report request (from_ns, to_ns, base_from_ns,
// base_to_ns).
func ParseSysomRequest(job string, q url.Values, nowNS int64) (SysomRequest, error) {
	w, err := ParseWindow(q, nowNS)
	return SysomRequest{Job: job, Window: w}, err
}

func parseSelection(q url.Values, rankName string, required bool) (Selection, bool, error) {
	r, hasRank, err := rankParam(q, rankName)
	if err != nil {
		return Selection{}, false, err
	}
	g := q.Get(ParamGroup)
	if rankName != ParamRank {
		g = "" // a_rank/b_rank take no group
	}
	switch {
	case hasRank && g != "":
		return Selection{}, false, signal.FieldErrorf(ParamGroup, "use either rank or group")
	case hasRank:
		return Selection{Rank: r}, true, nil
	case g != "":
		if len(g) > collective.MaxIDLen {
			return Selection{}, false, signal.FieldErrorf(ParamGroup, "longer than %d bytes", collective.MaxIDLen)
		}
		return Selection{Rank: -1, Group: g}, true, nil
	case required:
		if rankName == ParamRank {
			return Selection{}, false, signal.FieldErrorf(ParamRank, "give rank=R or group=G (a communicator id, or %q)", GroupAll)
		}
		return Selection{}, false, signal.FieldErrorf(rankName, "is required")
	}
	return Selection{}, false, nil
}

// ParseFlameRequest reads rank or group, from_ns and to_ns (and format
// when export is true: pprof, the default, or collapsed).
func ParseFlameRequest(job string, q url.Values, nowNS int64, export bool) (FlameRequest, error) {
	r := FlameRequest{Job: job}
	var err error
	if r.Sel, _, err = parseSelection(q, ParamRank, true); err != nil {
		return r, err
	}
	if r.Window, err = ParseWindow(q, nowNS); err != nil {
		return r, err
	}
	r.Window.NoBaseline = true
	if export {
		switch f := q.Get(ParamFormat); f {
		case "", "pprof":
			r.Format = "pprof"
		case "collapsed":
			r.Format = f
		default:
			return r, signal.FieldErrorf(ParamFormat, "must be pprof or collapsed, got %q", signal.Clip(f))
		}
	}
	return r, nil
}

// ParseDiffRequest reads either a_rank and b_rank (over from_ns/to_ns)
// or rank (or group) now against its baseline (base_from_ns/base_to_ns,
// default SysomWindow's baseline).
func ParseDiffRequest(job string, q url.Values, nowNS int64) (DiffRequest, error) {
	r := DiffRequest{Job: job}
	a, hasA, err := parseSelection(q, ParamARank, false)
	if err != nil {
		return r, err
	}
	b, hasB, err := parseSelection(q, ParamBRank, false)
	if err != nil {
		return r, err
	}
	one, hasOne, err := parseSelection(q, ParamRank, false)
	if err != nil {
		return r, err
	}
	switch {
	case hasOne && (hasA || hasB):
		return r, signal.FieldErrorf(ParamRank, "use either a_rank and b_rank, or rank (now against its baseline)")
	case hasOne:
		r.A, r.B, r.Baseline = one, one, true
	case hasA && hasB:
		r.A, r.B = a, b
	case hasA:
		return r, signal.FieldErrorf(ParamBRank, "is required with a_rank")
	case hasB:
		return r, signal.FieldErrorf(ParamARank, "is required with b_rank")
	default:
		return r, signal.FieldErrorf(ParamARank, "give a_rank and b_rank, or rank (or group) to compare with its baseline")
	}
	if r.Window, err = ParseWindow(q, nowNS); err != nil {
		return r, err
	}
	if !r.Baseline {
		if r.Window.BaseFromNS != 0 || r.Window.BaseToNS != 0 {
			return r, signal.FieldErrorf(ParamBaseFromNS, "applies only to rank= (now against its baseline)")
		}
		r.Window.NoBaseline = true
	}
	return r, nil
}

// ParseOSRequest reads from_ns, to_ns, name (repeatable or
// comma-separated) and rank.
func ParseOSRequest(job string, q url.Values, nowNS int64) (OSRequest, error) {
	r := OSRequest{Job: job, Rank: -2, NowNS: nowNS}
	var err error
	if r.FromNS, err = nsParam(q, ParamFromNS); err != nil {
		return r, err
	}
	if r.ToNS, err = nsParam(q, ParamToNS); err != nil {
		return r, err
	}
	if r.ToNS != 0 && r.ToNS <= r.FromNS {
		return r, signal.FieldErrorf(ParamToNS, "%d is not after from_ns=%d", r.ToNS, r.FromNS)
	}
	for _, v := range q[ParamName] {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if len(n) > 256 || len(r.Names) >= 64 {
				return r, signal.FieldErrorf(ParamName, "at most 64 names of at most 256 bytes")
			}
			r.Names = append(r.Names, n)
		}
	}
	if rk, ok, err := rankParam(q, ParamRank); err != nil {
		return r, err
	} else if ok {
		r.Rank = rk
	}
	return r, nil
}
