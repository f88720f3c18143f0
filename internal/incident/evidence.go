package incident

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
)

// Engine names the engine (or actor) a piece of evidence comes from. The
// set is open: Vedrfolnir and mitigation add theirs.
type Engine string

const (
	EngineStageFrontier Engine = "stagefrontier"
	EngineGreyhound     Engine = "greyhound"
	EngineSysom         Engine = "sysom"
	EngineKair          Engine = "kair"
)

// Kind is one typed finding of one engine. Fusion reads only the common
// fields of Evidence (Signal, Targets, Layer, Category, Confidence, …);
// the kind says which detail struct is set and how the UI draws it.
type Kind string

const (
	// StageFrontier: a level change of the job's step time (onset or
	// relief), the straggler of a stage or its withholding, and the step
	// time series (progress, for lost time and resolution).
	KindStageChange Kind = "stagefrontier.change_point"
	KindStageLeader Kind = "stagefrontier.leader"
	KindProgress    Kind = "stagefrontier.progress"

	// Greyhound: a verified change point of the iteration time, a
	// controller phase change, the cross-group comparison, one
	// validation run's results, the verdict, and collective-entry
	// lateness (the rank the others wait for).
	KindGreyhoundChange     Kind = "greyhound.change_point"
	KindGreyhoundPhase      Kind = "greyhound.phase"
	KindGreyhoundCrossGroup Kind = "greyhound.cross_group"
	KindGreyhoundValidation Kind = "greyhound.validation"
	KindGreyhoundVerdict    Kind = "greyhound.verdict"
	KindGreyhoundLate       Kind = "greyhound.late_rank"

	// SysOM-AI: slow ranks by collective-entry lateness, CPU waterline
	// outliers, the layered diagnosis of one rank, and a hot path against
	// the job's own earlier window (temporal baseline).
	KindSysomSlowRank  Kind = "sysom.slow_rank"
	KindSysomWaterline Kind = "sysom.waterline"
	KindSysomDiagnosis Kind = "sysom.diagnosis"
	KindSysomTemporal  Kind = "sysom.temporal"

	// KAIR: the Stage 1 rank (rhythm outlier) and the backward-blame
	// culprit with its victims.
	KindKairRank    Kind = "kair.rank"
	KindKairCulprit Kind = "kair.culprit"
)

// Signal is the role a piece of evidence plays in an incident's life.
type Signal string

const (
	// SignalOnset: the job's step or iteration time rose (a verified
	// change point). The first one opens an incident.
	SignalOnset Signal = "onset"
	// SignalRelief: the step time fell back.
	SignalRelief Signal = "relief"
	// SignalFinding: a statement about where or why (a rank, a link, an
	// operator, a layer), or a withholding with its reason.
	SignalFinding Signal = "finding"
	// SignalHealthy: a measurement that clears Targets (a validation
	// that found them normal). It argues against hypotheses naming them.
	SignalHealthy Signal = "healthy"
	// SignalProgress: step-time samples (lost time, hold-down).
	SignalProgress Signal = "progress"
	// SignalState: an engine's state change (a controller phase) shown on
	// the timeline; it states nothing about the cause.
	SignalState Signal = "state"
)

// Layer orders the cause chain from what the job sees to what lies
// beneath: a stage of the step, a collective, an operator, a CPU stack,
// the OS, the network.
type Layer string

const (
	LayerStage      Layer = "stage"
	LayerCollective Layer = "collective"
	LayerOperator   Layer = "operator"
	LayerGPU        Layer = "gpu"
	LayerCPU        Layer = "cpu"
	LayerOS         Layer = "os"
	LayerNetwork    Layer = "network"
)

// layerOrder is the chain order (top to bottom).
var layerOrder = map[Layer]int{LayerStage: 0, LayerCollective: 1, LayerOperator: 2, LayerGPU: 3, LayerCPU: 4, LayerOS: 5, LayerNetwork: 6}

// LayerRank is a layer's place in the chain (unknown layers last).
func LayerRank(l Layer) int {
	if r, ok := layerOrder[l]; ok {
		return r
	}
	return len(layerOrder)
}

// Category is the kind of cause in the words of the issue tracker: what
// an on-call engineer routes the incident by.
type Category string

const (
	CategoryCompute       Category = "compute"
	CategoryCommunication Category = "communication"
	CategoryData          Category = "data"
	CategoryOS            Category = "os"
	CategoryNetwork       Category = "network"
	CategoryUniform       Category = "uniform"
	CategoryUnknown       Category = "unknown"
)

// Confidence of a finding or a hypothesis.
type Confidence string

const (
	ConfidenceHigh Confidence = "high"
	ConfidenceLow  Confidence = "low"
	// ConfidenceWithheld: the engine declined to name a target and says
	// why (Evidence.Withheld).
	ConfidenceWithheld Confidence = "withheld"
)

// TargetKind is what a target names.
type TargetKind string

const (
	TargetRank     TargetKind = "rank"
	TargetLink     TargetKind = "link"
	TargetHost     TargetKind = "host"
	TargetGroup    TargetKind = "group"
	TargetOperator TargetKind = "operator"
	// TargetJob: every rank alike (a uniform slowdown).
	TargetJob TargetKind = "job"
)

// Target is one thing a finding names: a rank, a link (Src→Dst ranks), a
// host, a role group or communicator, an operator (on Rank, -1 for all),
// or the whole job.
type Target struct {
	Kind TargetKind `json:"kind"`
	Rank int        `json:"rank,omitempty"`
	Src  int        `json:"src,omitempty"`
	Dst  int        `json:"dst,omitempty"`
	Name string     `json:"name,omitempty"` // host, group or operator name
	Host string     `json:"host,omitempty"` // the rank's host, when known
}

// Key is the target's identity for grouping (a rank's host is not part of
// it).
func (t Target) Key() string {
	switch t.Kind {
	case TargetRank:
		return "rank:" + strconv.Itoa(t.Rank)
	case TargetLink:
		return "link:" + strconv.Itoa(t.Src) + "-" + strconv.Itoa(t.Dst)
	case TargetOperator:
		return "op:" + t.Name + "@" + strconv.Itoa(t.Rank)
	case TargetJob:
		return "job"
	default:
		return string(t.Kind) + ":" + t.Name
	}
}

// RankTarget returns a rank target.
func RankTarget(r int, host string) Target { return Target{Kind: TargetRank, Rank: r, Host: host} }

// LinkTarget returns a link target between two ranks.
func LinkTarget(src, dst int) Target { return Target{Kind: TargetLink, Src: src, Dst: dst} }

// JobTarget is the whole-job target (uniform slowdowns).
func JobTarget() Target { return Target{Kind: TargetJob} }

// Span is a window of the job on both axes a piece of evidence may know:
// training steps (of Incarnation) and wall time (Unix ns). Zero NS or a
// negative step means "not known on that axis".
type Span struct {
	FromStep int64 `json:"from_step"`
	ToStep   int64 `json:"to_step"`
	FromNS   int64 `json:"from_ns,omitempty"`
	ToNS     int64 `json:"to_ns,omitempty"`
}

func (s Span) hasNS() bool { return s.FromNS > 0 && s.ToNS >= s.FromNS }

// Evidence is one engine finding, adapted by internal/analysis from the
// engine's report. ID identifies the finding: the same ID is the same
// finding re-reported (the one with the later At wins), so adapters make
// IDs from the finding's identity (engine, kind, incarnation, the window
// start, the validation or capture id), never from wall time.
type Evidence struct {
	ID          string `json:"id"`
	Kind        Kind   `json:"kind"`
	Engine      Engine `json:"engine"`
	Job         string `json:"job"`
	Incarnation int    `json:"incarnation"`
	// AtNS is when the engine produced it (server clock, Unix ns).
	AtNS int64 `json:"at_ns"`
	// Window is the stretch of the job it is about.
	Window Span   `json:"window"`
	Signal Signal `json:"signal"`

	// Targets are what the finding names (empty: nothing named). Against
	// are targets it clears (SignalHealthy, or a verdict that measured
	// them normal).
	Targets []Target `json:"targets,omitempty"`
	Against []Target `json:"against,omitempty"`
	// Subject is what an exclusive finding is about ("stage:backward",
	// "comm:world/allreduce"): two exclusive findings on one subject that
	// name different targets contradict each other (there is one rank
	// the others wait for there).
	Subject   string `json:"subject,omitempty"`
	Exclusive bool   `json:"exclusive,omitempty"`

	Layer    Layer    `json:"layer,omitempty"`
	Category Category `json:"category,omitempty"`
	// Source is the signal the finding reads, for independence ("two
	// independent signals agree"): two engines reading the same collective
	// calls are one signal. Empty: SourceOf derives it from the kind.
	Source     string     `json:"source,omitempty"`
	Confidence Confidence `json:"confidence,omitempty"`
	// Withheld is the engine's reason code for naming nothing
	// (Confidence withheld), e.g. "absorbed_in_stage".
	Withheld string `json:"withheld,omitempty"`
	// Text is the finding in plain words; Reason why it has the
	// confidence it has.
	Text   string `json:"text"`
	Reason string `json:"reason,omitempty"`

	// Level change (onset/relief): the step or iteration time before and
	// after (ms), and Verified when the engine verified it (Greyhound's
	// verification, StageFrontier's segment test).
	BeforeMS float64 `json:"before_ms,omitempty"`
	AfterMS  float64 `json:"after_ms,omitempty"`
	Verified bool    `json:"verified,omitempty"`

	// Samples: step times (SignalProgress), sorted by step; Ranks: how
	// many ranks the job runs (rank-seconds of lost time).
	Samples []Sample `json:"samples,omitempty"`
	Ranks   int      `json:"ranks,omitempty"`

	// Detail is the engine's own typed record of this finding (its
	// report struct, as JSON) for the UI and the expert view; fusion never
	// reads it.
	Detail json.RawMessage `json:"detail,omitempty"`
	// View links the engine view this finding comes from (an API path
	// with the window preset).
	View string `json:"view,omitempty"`
}

// Sample is one step's time.
type Sample struct {
	Step   int64   `json:"step"`
	WallNS int64   `json:"wall_ns,omitempty"`
	MS     float64 `json:"ms"`
}

// names reports whether the evidence names target key k.
func (e *Evidence) names(k string) bool {
	for _, t := range e.Targets {
		if t.Key() == k {
			return true
		}
	}
	return false
}

func (e *Evidence) clears(k string) bool {
	for _, t := range e.Against {
		if t.Key() == k {
			return true
		}
	}
	return false
}

// start is the evidence's position on the wall-time axis for ordering
// (its window start, else when it was produced).
func (e *Evidence) start() int64 {
	if e.Window.FromNS > 0 {
		return e.Window.FromNS
	}
	return e.AtNS
}

// compareEvidence is the canonical order: by start, then ID, then At.
func compareEvidence(a, b *Evidence) int {
	return cmp.Or(cmp.Compare(a.start(), b.start()), cmp.Compare(a.ID, b.ID), cmp.Compare(a.AtNS, b.AtNS))
}

// sortTargets orders targets by key (deterministic output).
func sortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int { return cmp.Compare(a.Key(), b.Key()) })
}

// Signal sources: what a finding was computed from.
const (
	SourceStageVectors   = "stage vectors"
	SourceCollectives    = "collective calls"
	SourceValidation     = "validation benchmarks"
	SourceHostProfile    = "CPU stacks and OS counters"
	SourceOperatorTraces = "operator traces"
)

// SourceOf is the signal e was computed from: e.Source when set, else by
// its kind (Greyhound's verdict by its layer: a GPU or link verdict rests
// on the validation benchmarks, a lateness verdict on collective calls).
func SourceOf(e *Evidence) string {
	if e.Source != "" {
		return e.Source
	}
	switch e.Kind {
	case KindStageChange, KindStageLeader, KindProgress:
		return SourceStageVectors
	case KindGreyhoundChange, KindGreyhoundPhase, KindGreyhoundCrossGroup, KindGreyhoundLate, KindSysomSlowRank:
		return SourceCollectives
	case KindGreyhoundValidation:
		return SourceValidation
	case KindGreyhoundVerdict:
		if e.Layer == LayerGPU || e.Layer == LayerNetwork {
			return SourceValidation
		}
		return SourceCollectives
	case KindSysomWaterline, KindSysomDiagnosis, KindSysomTemporal:
		return SourceHostProfile
	case KindKairRank, KindKairCulprit:
		return SourceOperatorTraces
	}
	return string(e.Engine)
}
