package analysis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/store"
)

// FlameNode is a flame-graph node (contract §6): value is the samples in
// the subtree, self those whose leaf is this node.
type FlameNode struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind,omitempty"`
	Module   string       `json:"module,omitempty"`
	Value    int64        `json:"value"`
	Self     int64        `json:"self"`
	Children []*FlameNode `json:"children,omitempty"`
}

// FlameGraph is one selection's flame graph over a window.
type FlameGraph struct {
	Rank   int        `json:"rank"` // -1 for a group
	Group  string     `json:"group,omitempty"`
	FromNS int64      `json:"from_ns"`
	ToNS   int64      `json:"to_ns"`
	Total  int64      `json:"total"`
	Hz     int        `json:"hz"`
	Ratio  float64    `json:"ratio"`
	Root   *FlameNode `json:"root"`
	// Pruned counts nodes folded into "[pruned]" children to keep the
	// graph under SysomLimits.MaxNodes (the smallest go first).
	Pruned int `json:"pruned,omitempty"`
}

// DiffNode is a differential flame-graph node: sample counts of A and B
// (the UI normalizes by the totals).
type DiffNode struct {
	Name     string      `json:"name"`
	Kind     string      `json:"kind,omitempty"`
	Module   string      `json:"module,omitempty"`
	A        int64       `json:"a"`
	B        int64       `json:"b"`
	Children []*DiffNode `json:"children,omitempty"`
}

// DiffSide describes one side of a differential flame graph.
type DiffSide struct {
	Label  string `json:"label"`
	Total  int64  `json:"total"`
	FromNS int64  `json:"from_ns"`
	ToNS   int64  `json:"to_ns"`
}

// DiffGraph is a differential flame graph of A against B.
type DiffGraph struct {
	A      DiffSide  `json:"a"`
	B      DiffSide  `json:"b"`
	Root   *DiffNode `json:"root"`
	Pruned int       `json:"pruned,omitempty"`
}

// PrunedName names the node standing for pruned children.
const PrunedName = "[pruned]"

// pruneThreshold returns the weight below which nodes go so fewer than
// maxNodes of them remain (0: keep all), given every node's weight; ties
// at the cut go too. Each parent that lost children gains one
// "[pruned]" node.
func pruneThreshold(ws []int64, maxNodes int) int64 {
	if len(ws) <= maxNodes {
		return 0
	}
	slices.SortFunc(ws, func(a, b int64) int { return cmp.Compare(b, a) })
	return ws[maxNodes-1] + 1
}

// pruneFlame folds the children of n lighter than min into one
// "[pruned]" child per parent, so widths stay exact.
func pruneFlame(n *FlameNode, min int64) int {
	pruned := 0
	var keep []*FlameNode
	var rest int64
	for _, c := range n.Children {
		if c.Value < min {
			rest += c.Value
			pruned += countFlame(c)
			continue
		}
		pruned += pruneFlame(c, min)
		keep = append(keep, c)
	}
	if rest > 0 {
		keep = append(keep, &FlameNode{Name: PrunedName, Value: rest, Self: rest})
	}
	n.Children = keep
	return pruned
}

func countFlame(n *FlameNode) int {
	k := 1
	for _, c := range n.Children {
		k += countFlame(c)
	}
	return k
}

func flameWeights(n *FlameNode, ws []int64) []int64 {
	ws = append(ws, n.Value)
	for _, c := range n.Children {
		ws = flameWeights(c, ws)
	}
	return ws
}

func pruneDiff(n *DiffNode, min int64) int {
	pruned := 0
	var keep []*DiffNode
	var ra, rb int64
	for _, c := range n.Children {
		if c.A+c.B < min {
			ra, rb = ra+c.A, rb+c.B
			pruned += countDiff(c)
			continue
		}
		pruned += pruneDiff(c, min)
		keep = append(keep, c)
	}
	if ra+rb > 0 {
		keep = append(keep, &DiffNode{Name: PrunedName, A: ra, B: rb})
	}
	n.Children = keep
	return pruned
}

func countDiff(n *DiffNode) int {
	k := 1
	for _, c := range n.Children {
		k += countDiff(c)
	}
	return k
}

func diffWeights(n *DiffNode, ws []int64) []int64 {
	ws = append(ws, n.A+n.B)
	for _, c := range n.Children {
		ws = diffWeights(c, ws)
	}
	return ws
}

func kindText(k stack.Kind) string {
	if k.Valid() {
		return k.String()
	}
	return ""
}

func flameNode(n *sysom.Node) *FlameNode {
	if n == nil {
		return nil
	}
	f := &FlameNode{Name: n.Name, Kind: kindText(n.Kind), Module: n.Module, Value: n.A, Self: n.Self}
	for _, c := range n.Children {
		f.Children = append(f.Children, flameNode(c))
	}
	return f
}

func diffNode(n *sysom.Node) *DiffNode {
	if n == nil {
		return nil
	}
	d := &DiffNode{Name: n.Name, Kind: kindText(n.Kind), Module: n.Module, A: n.A, B: n.B}
	for _, c := range n.Children {
		d.Children = append(d.Children, diffNode(c))
	}
	return d
}

// ranksOf resolves a group selection to its ranks (nil: every rank).
func (s *Sysom) ranksOf(job string, sel Selection) (map[int]bool, error) {
	if sel.Group == "" {
		return map[int]bool{sel.Rank: true}, nil
	}
	if sel.Group == GroupAll {
		return nil, nil
	}
	comms, err := s.src.Comms(job)
	if err != nil {
		return nil, err
	}
	for _, c := range comms {
		if c.ID == sel.Group {
			if len(c.Ranks) == 0 {
				return nil, fmt.Errorf("job %q: communicator %q has no known member list yet: %w", job, signal.Clip(sel.Group), store.ErrNotFound)
			}
			want := make(map[int]bool, len(c.Ranks))
			for _, r := range c.Ranks {
				want[r] = true
			}
			return want, nil
		}
	}
	return nil, fmt.Errorf("job %q has no communicator %q (use a communicator id from /comms, or %q): %w", job, signal.Clip(sel.Group), GroupAll, store.ErrNotFound)
}

// profileOf returns the symbolized profile of a selection over [from, to)
// (a group's ranks merged, rank −1).
func (s *Sysom) profileOf(ctx context.Context, job string, sel Selection, from, to int64, budget *sampleBudget) (*stack.Profile, error) {
	want, err := s.ranksOf(job, sel)
	if err != nil {
		return nil, err
	}
	if budget == nil {
		budget = &sampleBudget{left: s.lim.MaxSamples}
	}
	ps, _, err := s.profiles(ctx, job, from, to, want, budget)
	if err != nil {
		return nil, err
	}
	if sel.Group == "" {
		if p := ps[sel.Rank]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("job %q: %s [%d, %d): %w", job, sel.Label(), from, to, ErrNoStacks)
	}
	ranks := slices.Sorted(func(yield func(int) bool) {
		for r := range ps {
			if !yield(r) {
				return
			}
		}
	})
	all := make([]*stack.Profile, len(ranks))
	for i, r := range ranks {
		all[i] = ps[r]
	}
	p := mergeProfiles(-1, from, to, all...)
	if p.Total == 0 {
		return nil, fmt.Errorf("job %q: %s [%d, %d): %w", job, sel.Label(), from, to, ErrNoStacks)
	}
	return p, nil
}

// ExportProfile resolves the request's window and returns the
// selection's profile (GET /profile).
func (s *Sysom) ExportProfile(ctx context.Context, req FlameRequest) (*stack.Profile, error) {
	if _, err := s.src.Job(req.Job); err != nil {
		return nil, err
	}
	j, err := s.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	w, err := s.resolve(j, req.Window)
	if err != nil {
		return nil, err
	}
	return s.profileOf(ctx, req.Job, req.Sel, w.FromNS, w.ToNS, nil)
}

// FlameGraph returns a selection's flame graph (sysom.FlameTree).
func (s *Sysom) FlameGraph(ctx context.Context, req FlameRequest) (*FlameGraph, error) {
	p, err := s.ExportProfile(ctx, req)
	if err != nil {
		return nil, err
	}
	fg := &FlameGraph{Rank: p.Rank, Group: req.Sel.Group, FromNS: p.StartNS, ToNS: p.EndNS, Total: p.Total,
		Hz: p.Hz, Ratio: p.Ratio, Root: flameNode(sysom.FlameTree(p))}
	if fg.Root != nil {
		if min := pruneThreshold(flameWeights(fg.Root, nil), s.lim.MaxNodes); min > 0 {
			fg.Pruned = pruneFlame(fg.Root, min)
		}
	}
	return fg, nil
}

// DiffGraph returns a differential flame graph (sysom.DiffTree): two
// selections over one window, or one selection now against its baseline.
func (s *Sysom) DiffGraph(ctx context.Context, req DiffRequest) (*DiffGraph, error) {
	if _, err := s.src.Job(req.Job); err != nil {
		return nil, err
	}
	j, err := s.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	w, err := s.resolve(j, req.Window)
	if err != nil {
		return nil, err
	}
	budget := &sampleBudget{left: s.lim.MaxSamples}
	a, err := s.profileOf(ctx, req.Job, req.A, w.FromNS, w.ToNS, budget)
	if err != nil {
		return nil, err
	}
	bFrom, bTo := w.FromNS, w.ToNS
	bLabel := req.B.Label()
	if req.Baseline {
		if w.BaseBasis == BasisNone {
			return nil, fmt.Errorf("job %q: nothing stored before [%d, %d) to compare with (give base_from_ns/base_to_ns): %w", req.Job, w.FromNS, w.ToNS, ErrNoStacks)
		}
		bFrom, bTo = w.BaseFromNS, w.BaseToNS
		bLabel += " baseline (" + w.BaseBasis + ")"
	}
	b, err := s.profileOf(ctx, req.Job, req.B, bFrom, bTo, &sampleBudget{left: s.lim.MaxSamples}) // each side its own cap
	if err != nil {
		return nil, err
	}
	aLabel := req.A.Label()
	if req.Baseline {
		aLabel += " now"
	}
	d := &DiffGraph{
		A:    DiffSide{Label: aLabel, Total: a.Total, FromNS: w.FromNS, ToNS: w.ToNS},
		B:    DiffSide{Label: bLabel, Total: b.Total, FromNS: bFrom, ToNS: bTo},
		Root: diffNode(sysom.DiffTree(a, b)),
	}
	if d.Root != nil {
		if min := pruneThreshold(diffWeights(d.Root, nil), s.lim.MaxNodes); min > 0 {
			d.Pruned = pruneDiff(d.Root, min)
		}
	}
	return d, nil
}

// OSPoint is one [t_ns, value] pair; t is the end of the interval the
// rate was measured over.
type OSPoint struct {
	TNS   int64
	Value float64
}

// MarshalJSON writes [t_ns, value] with t exact (a float64 would round
// epoch nanoseconds).
func (p OSPoint) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	b = strconv.AppendInt(b, p.TNS, 10)
	b = append(b, ',')
	b = strconv.AppendFloat(b, p.Value, 'g', -1, 64)
	return append(b, ']'), nil
}

// OSSeriesEntry is one metric's series for one (rank, CPU, device).
type OSSeriesEntry struct {
	Name   string    `json:"name"`
	Rank   int       `json:"rank"`
	CPU    int       `json:"cpu"`
	Device string    `json:"device,omitempty"`
	Points []OSPoint `json:"points"`
}

// OSAbsence is a source a node reported missing.
type OSAbsence struct {
	Source string `json:"source"`
	Reason string `json:"reason"`
	Node   string `json:"node,omitempty"`
}

// OSSeries is GET /osstats (contract §6).
type OSSeries struct {
	FromNS int64           `json:"from_ns"`
	ToNS   int64           `json:"to_ns"`
	Series []OSSeriesEntry `json:"series"`
	Absent []OSAbsence     `json:"absent"`
}

// OSStats returns the job's OS series over the request's window (default
// the last WindowNS before NowNS).
func (s *Sysom) OSStats(ctx context.Context, req OSRequest) (*OSSeries, error) {
	if _, err := s.src.Job(req.Job); err != nil {
		return nil, err
	}
	from, to := req.FromNS, req.ToNS
	if to == 0 {
		to = req.NowNS
		if from >= to {
			to = from + s.lim.WindowNS
		}
	}
	if from == 0 {
		from = max(1, to-s.lim.WindowNS)
	}
	names := map[string]bool{}
	for _, n := range req.Names {
		names[n] = true
	}
	type key struct {
		name      string
		rank, cpu int
		device    string
	}
	idx := map[key]int{}
	out := &OSSeries{FromNS: from, ToNS: to, Series: []OSSeriesEntry{}, Absent: []OSAbsence{}}
	absent := map[OSAbsence]bool{}
	points := 0
	err := s.src.ScanOSStats(req.Job, from, to, func(b *osstat.Batch) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if b.EndNS <= from || b.EndNS > to {
			return nil
		}
		for _, a := range b.Absent {
			ab := OSAbsence{Source: a.Source, Reason: a.Reason, Node: b.Node}
			if !absent[ab] {
				absent[ab] = true
				out.Absent = append(out.Absent, ab)
			}
		}
		for _, p := range b.Points {
			if len(names) > 0 && !names[p.Name] || req.Rank != -2 && p.Rank != req.Rank {
				continue
			}
			if points++; points > s.lim.MaxOSPoints {
				return &SysomLimitError{What: "OS points", Limit: int64(s.lim.MaxOSPoints)}
			}
			k := key{p.Name, p.Rank, p.CPU, p.Device}
			i, ok := idx[k]
			if !ok {
				i = len(out.Series)
				idx[k] = i
				out.Series = append(out.Series, OSSeriesEntry{Name: p.Name, Rank: p.Rank, CPU: p.CPU, Device: p.Device})
			}
			out.Series[i].Points = append(out.Series[i].Points, OSPoint{TNS: b.EndNS, Value: p.Value})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out.Series {
		slices.SortStableFunc(out.Series[i].Points, func(a, b OSPoint) int { return cmp.Compare(a.TNS, b.TNS) })
	}
	slices.SortFunc(out.Series, func(a, b OSSeriesEntry) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.CPU, b.CPU), cmp.Compare(a.Device, b.Device))
	})
	return out, nil
}
