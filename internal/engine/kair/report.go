package kair

import (
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Kind is what a root cause names (§III-B Stage 3: "specific compute-bound
// kernels or slow inter-worker communication").
type Kind string

const (
	// KindOp: an operator with an abnormal execution time (rule 1).
	KindOp Kind = "op"
	// KindEdge: the predecessor completed on time but the op started late
	// — data transfer or synchronization between them (rule 2, third case).
	KindEdge Kind = "edge"
	// KindInconclusive: the walk reached a node it cannot judge (a late
	// op with no predecessor in the step, or one too few ranks share to
	// score); the evidence chain says which.
	KindInconclusive Kind = "inconclusive"
)

// StepStart is RootCause.From of an edge from the start of the step: the
// op started late with no operator before it on its rank.
const StepStart = "(step start)"

// Instance is one scored operator instance (§III-B Stage 2).
type Instance struct {
	Rank       int              `json:"rank"`
	Name       string           `json:"name"`
	Cat        optrace.Category `json:"cat"`
	Occurrence int              `json:"occurrence"`
	// StartNS is relative to the rank's step start; DurNS is the scored
	// duration (for a joined collective the work after the last arrival)
	// and WaitNS the collective's wait for the last member.
	StartNS int64 `json:"start_ns"`
	DurNS   int64 `json:"dur_ns"`
	WaitNS  int64 `json:"wait_ns,omitempty"`
	// ZStart, ZDur and A are the primary method's (Config.Robust);
	// AClassic and ARobust are both methods' a_i, side by side.
	ZStart   float64 `json:"z_start"`
	ZDur     float64 `json:"z_dur"`
	A        float64 `json:"a"`
	AClassic float64 `json:"a_classic"`
	ARobust  float64 `json:"a_robust"`
}

// RootCause is one ranked root cause (§III-B Stage 3).
type RootCause struct {
	Kind Kind `json:"kind"`
	// Rank and Name are the culprit op (KindOp, KindInconclusive) or the
	// edge's head; FromRank/From the edge's tail (KindEdge; FromRank is
	// -1 otherwise).
	Rank     int    `json:"rank"`
	Name     string `json:"name"`
	FromRank int    `json:"from_rank"`
	From     string `json:"from,omitempty"`
	Step     int64  `json:"step"`
	// ExcessNS is the time the cause cost beyond what its peers took: for
	// an op, its duration over the median of the same instance on the
	// other ranks; for an edge or an inconclusive stop, its start over
	// the median start (summed over distinct culprit instances). It ranks
	// causes by impact: a_i is a z-score, which explodes for an op whose
	// peers agree to the microsecond however little time it lost.
	ExcessNS int64 `json:"excess_ns"`
	// Symptoms is how many flagged instances the walk traced here; Score
	// the largest a_i among them.
	Symptoms int     `json:"symptoms"`
	Score    float64 `json:"score"`
	// Explains names the symptoms (flagged instances, "rank R name#k"),
	// highest a_i first, at most maxExplains.
	Explains []string `json:"explains"`
	// Evidence is the longest walk that reached this cause (ties: the
	// highest-scoring symptom's), symptom first.
	Evidence []string `json:"evidence"`
	node     int32    // the culprit node (per step; not reported)
	from     int32    // an edge's tail node, -1 for StepStart / none
}

// Report is the Stages 2–3 result for one step.
type Report struct {
	Step   int64  `json:"step"`
	Config Config `json:"config"`
	Ranks  int    `json:"ranks"`
	Nodes  int    `json:"nodes"`
	// Outliers are the instances with a_i > Config.ZThreshold, highest
	// first (ties: rank, name, occurrence).
	Outliers   []Instance  `json:"outliers"`
	RootCauses []RootCause `json:"root_causes"`
	// SpanNS is the median over ranks of the step's span (first start to
	// last end, rank clock). CommNS is the longest joined collective's
	// work after its last member arrived (median over members): time every
	// rank spends alike, which cross-rank comparison cannot attribute — a
	// slow link or congestion shows up here, not as an outlier.
	SpanNS int64 `json:"span_ns"`
	CommNS int64 `json:"comm_ns"`
	// Held is, per rank the other ranks waited for at this step's joined
	// collectives, how long they waited for it (Hold; largest first).
	// Joined says whether any collective instance joined ≥ 2 ranks: only
	// then is an empty Held evidence that nobody waited.
	Held   []Hold `json:"held"`
	Joined bool   `json:"joined"`
}

// Hold is the time the other members of a step's collectives waited for
// one rank (a rank appears when NS or LateNS is positive): at each instance where the rank arrived last, the gap between
// its arrival and the second-last one, summed over the instances of one
// collective op (the op where the sum is largest: host and device views of
// one collective are not added). The marginal gap is what the step would
// have saved had this rank been on time — the others' own spread is not
// counted — and it is measured from the members' recorded durations (the
// last to arrive waits least), so no clock alignment is involved.
type Hold struct {
	Rank int    `json:"rank"`
	NS   int64  `json:"ns"`
	Op   string `json:"op"` // the collective op
	// Instances is how many of Op's instances the rank arrived last at.
	Instances int `json:"instances"`
	// LateNS is how much later than the median member the rank arrived,
	// summed over Op's instances: unlike NS it counts a rank that a later
	// one masked (two stragglers).
	LateNS int64 `json:"late_ns"`
}

// HeldNS is rank's hold in this step (0 when the others never waited
// for it); LateNS its lateness against the median member.
func (r *Report) HeldNS(rank int) int64 {
	for _, h := range r.Held {
		if h.Rank == rank {
			return h.NS
		}
	}
	return 0
}

func (r *Report) LateNS(rank int) int64 {
	for _, h := range r.Held {
		if h.Rank == rank {
			return h.LateNS
		}
	}
	return 0
}

// OutliersOf is the ranked outlier list within one rank (the straggler
// Stage 1 localized).
func (r *Report) OutliersOf(rank int) []Instance {
	var out []Instance
	for _, in := range r.Outliers {
		if in.Rank == rank {
			out = append(out, in)
		}
	}
	return out
}
