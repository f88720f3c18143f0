package sysom

// Report is SysOM-AI's JSON report (contract §5; API GET
// /api/v1/jobs/{id}/sysom, the UI). Every list is non-nil so the JSON
// holds [] rather than null, and every order is deterministic.
type Report struct {
	SlowRanks []SlowRank      `json:"slow_ranks"`
	Waterline []WaterlineFlag `json:"waterline"`
	Diagnoses []Diagnosis     `json:"diagnoses"`
	// Temporal is set when no straggler exists and the iteration time
	// rose by at least Config.IterRise over the baseline (§3.1).
	Temporal *Temporal `json:"temporal,omitempty"`
	Notes    []string  `json:"notes"`
}

// Align says how a communicator's instances were aligned across hosts.
type Align string

const (
	// AlignExit: members span several clocks; each host's offset was
	// estimated once per window from the common exit (device end, or a
	// synchronous backend's return) and removed from its entries
	// (barrier.go); SlowRank.OffsetErrMs bounds the error.
	AlignExit Align = "exit"
	// AlignEntry: completion times were missing on some member; lateness
	// is entry minus the earliest entry, which assumes synchronized host
	// clocks (NTP/PTP).
	AlignEntry Align = "entry"
	// AlignMixed: the window held instances of both kinds (no longer
	// produced: offsets are per host and window; kept for old reports).
	AlignMixed Align = "mixed"
	// AlignHost: every member ran on one host (one clock): entries
	// compare directly.
	AlignHost Align = "host"
)

// SlowRank is a rank flagged by slow-rank detection (§3.1): its robust
// per-step entry lateness over the window exceeds the other members' by
// more than K σ (leave-one-out, with a noise floor; doc.go), in most
// steps (barrier.go).
type SlowRank struct {
	// Group is the communicator the lateness was measured on.
	Group string `json:"group"`
	Rank  int    `json:"rank"`
	// MeanLateMs is the rank's mean entry lateness over the window
	// instances; PeerMeanMs and PeerSigmaMs the other members' mean and
	// σ of theirs (σ after the noise floor).
	MeanLateMs  float64 `json:"mean_late_ms"`
	PeerMeanMs  float64 `json:"peer_mean_ms"`
	PeerSigmaMs float64 `json:"peer_sigma_ms"`
	Z           float64 `json:"z"`
	// Instances is how many window instances the rank was in; LastShare
	// the share of them it entered last.
	Instances int     `json:"instances"`
	LastShare float64 `json:"last_share"`
	Align     Align   `json:"align"`
	// Steps is how many training steps of the window the statistic
	// covers (MeanLateMs is the 10%-trimmed mean of the rank's per-step
	// lateness); Persistence the share of them in which the rank entered
	// later than its peers' median; OffsetErrMs the bound on the clock
	// offset error (AlignExit only).
	Steps       int     `json:"steps,omitempty"`
	Persistence float64 `json:"persistence,omitempty"`
	OffsetErrMs float64 `json:"offset_err_ms,omitempty"`
}

// WaterlineFlag is one (rank, function) above the group's CPU waterline
// (§3.1): Fraction > Mean + K·Sigma (leave-one-out, σ floored by the
// binomial sampling noise), by at least Delta, with ≥ MinSamples samples.
type WaterlineFlag struct {
	Group string `json:"group"`
	Rank  int    `json:"rank"`
	Func  string `json:"func"`
	// Module and Kind name the function's code beside its name.
	Module   string  `json:"module,omitempty"`
	Kind     string  `json:"kind"`
	Fraction float64 `json:"fraction"`
	Mean     float64 `json:"mean"`
	Sigma    float64 `json:"sigma"`
	// Z is (Fraction − Mean)/Sigma; capped at 1e6 when Sigma is 0 (a new
	// hot path absent on every peer, judged by Delta and MinSamples).
	Z       float64 `json:"z"`
	Samples int64   `json:"samples"`
	// New: the function has no sample on any other rank of the group.
	New bool `json:"new,omitempty"`
	// Foreign: the row is another process on the rank's CPUs (Func is
	// its "[other process] name" root), judged as its share of all the
	// rank's samples; other rows are the rank's own functions, judged as
	// shares of its own samples (waterline.go).
	Foreign bool `json:"foreign,omitempty"`
	// OnTime: the rank enters its group's collectives no later than its
	// typical peer (within noise), so this CPU difference does not delay
	// the group: the rank is not diagnosed for it (diagnose.go).
	OnTime bool `json:"on_time,omitempty"`
}

// LayerName is a layer of the differential diagnosis (§3.1).
type LayerName string

const (
	LayerGPU LayerName = "gpu"
	LayerCPU LayerName = "cpu"
	LayerOS  LayerName = "os"
	// LayerInconclusive: no layer differs from the peer (Diagnosis.Layer
	// only).
	LayerInconclusive LayerName = "inconclusive"
)

// Finding is what one layer's comparison found.
type Finding string

const (
	FindingDiffers     Finding = "differs"
	FindingMatches     Finding = "matches"
	FindingNotObserved Finding = "not_observed"
)

// Confidence of a diagnosis.
type Confidence string

const (
	ConfidenceHigh Confidence = "high"
	ConfidenceLow  Confidence = "low"
)

// Cause classifies a hot path or a layer's difference (cause.go).
type Cause string

const (
	CauseGPUUniform  Cause = "gpu_uniform_slowdown" // all kernels slower: clocks, thermal, memory errors
	CauseGPUKernel   Cause = "gpu_kernel_slowdown"  // specific kernels slower: an operator changed
	CauseNetRX       Cause = "net_rx_softirq"       // NIC receive softirq on the rank's cores
	CauseIRQ         Cause = "interrupts"           // other hard/soft interrupt work
	CauseVFSLock     Cause = "vfs_dentry_lock"      // dentry spinlock contention in path walk
	CauseKernelLock  Cause = "kernel_lock"          // other kernel spinlock contention
	CauseForeign     Cause = "foreign_process"      // another process on the rank's cores
	CauseStorageIO   Cause = "storage_io"           // data ingestion / storage client paths
	CauseLogging     Cause = "logging"              // logging / serialization on training threads
	CauseApplication Cause = "application"          // anything else in the rank's own code
	CauseRunQueue    Cause = "run_queue"            // waiting runnable: CPU contention
	CauseMigration   Cause = "migration"            // CPU / NUMA migrations
	CauseSteal       Cause = "cpu_steal"            // hypervisor steal
)

// HotPath is a function whose CPU fraction is higher on the flagged rank
// (or now) than on the peer (or the baseline), with its stack.
type HotPath struct {
	Func string `json:"func"`
	// Stack: the frames from the root to Func (flame-graph order).
	Stack []string `json:"stack"`
	// Fraction / PeerFraction: Func's inclusive CPU fraction (under this
	// stack) on the flagged rank and on the peer (baseline).
	Fraction     float64 `json:"fraction"`
	PeerFraction float64 `json:"peer_fraction"`
	Samples      int64   `json:"samples"`
	Cause        Cause   `json:"cause"`
	// BaseFraction: the flagged rank's own share of the path in the
	// baseline window (-1 unknown); PreExisting: it held about the same
	// share then, so it is not what changed (diagnose.go).
	BaseFraction float64 `json:"base_fraction,omitempty"`
	PreExisting  bool    `json:"pre_existing,omitempty"`
	// fracs: each Stack frame's inclusive fraction on the flagged side
	// (for the interrupt-chain evidence; not part of the JSON).
	fracs []float64
}

// Layer is one layer's comparison of the flagged rank with its peer.
type Layer struct {
	Layer   LayerName `json:"layer"`
	Finding Finding   `json:"finding"`
	Cause   Cause     `json:"cause,omitempty"`
	// Evidence: short sentences with numbers.
	Evidence []string  `json:"evidence"`
	Paths    []HotPath `json:"paths,omitempty"`
	// Next is the check the operator should make next.
	Next string `json:"next,omitempty"`
}

// Diagnosis is the layered differential diagnosis of one flagged rank.
type Diagnosis struct {
	Rank  int    `json:"rank"`
	Group string `json:"group"`
	// Peer is the healthy rank compared with (-1: none available).
	Peer int `json:"peer"`
	// Flagged says what flagged the rank: "slow_rank", "waterline".
	Flagged []string `json:"flagged"`
	Layers  []Layer  `json:"layers"`
	// Layer is the concluded layer: the first of GPU → CPU → OS that
	// differs, or "inconclusive".
	Layer      LayerName  `json:"layer"`
	Cause      Cause      `json:"cause,omitempty"`
	Confidence Confidence `json:"confidence"`
	Summary    string     `json:"summary"`
	// Explained: how much of the observed slowdown the rank's entry
	// delay accounts for (a verdict that does not explain a material part
	// of it is not high confidence; diagnose.go explain).
	Explained Explained `json:"explained"`
}

// Explained relates a rank's entry delay to the slowdown it is blamed
// for.
type Explained struct {
	// DelayMs: how much later than its typical peer the rank enters its
	// group's collectives, per step (0 when not measured).
	DelayMs float64 `json:"delay_ms"`
	// IterMs, IterBaseMs: the iteration time now (from the server, else
	// from the calls' own steps) and at baseline (0 unknown).
	IterMs     float64 `json:"iter_ms,omitempty"`
	IterBaseMs float64 `json:"iter_base_ms,omitempty"`
	// Share: DelayMs as a share of the rise IterMs − IterBaseMs (Basis
	// "rise"), or of one iteration when no rise was measured ("step").
	Share float64 `json:"share,omitempty"`
	Basis string  `json:"basis,omitempty"`
}

// Explains reports whether the delay accounts for enough of the slowdown
// it is blamed for (diagnose.go explain): against a measured rise of the
// iteration time, at least Config.MinExplain of it; with no rise measured
// the delay is itself the observed slowdown, and it explains.
func (e Explained) Explains(cfg Config) bool {
	return e.Basis != ExplainRise || e.Share >= cfg.MinExplain
}

// Explained bases.
const (
	ExplainRise = "rise"
	ExplainStep = "step"
)

// Temporal is the temporal baseline comparison (§3.1): the job's merged
// profile now vs at baseline.
type Temporal struct {
	IterMs     float64 `json:"iter_ms"`
	IterBaseMs float64 `json:"iter_base_ms"`
	// Rise = IterMs/IterBaseMs − 1.
	Rise       float64   `json:"rise"`
	Ranks      int       `json:"ranks"`
	BaseRanks  int       `json:"base_ranks"`
	Candidates []HotPath `json:"candidates"`
	Evidence   []string  `json:"evidence"`
	Next       string    `json:"next,omitempty"`
	// Split: each candidate's samples by rank (per-rank fractions), and
	// whether they concentrate on a few ranks (temporal.go).
	Split []PathSplit `json:"split,omitempty"`
	// Suspects: ranks a concentrated candidate names (low confidence:
	// slow-rank detection did not flag them).
	Suspects []int `json:"suspects,omitempty"`
}

// PathSplit is one temporal candidate's share per rank, now and at
// baseline.
type PathSplit struct {
	Func string `json:"func"`
	// Ranks, Fractions, BaseFractions: per rank, the path's share of the
	// rank's own samples now and at baseline (-1: no baseline profile).
	Ranks         []int     `json:"ranks"`
	Fractions     []float64 `json:"fractions"`
	BaseFractions []float64 `json:"base_fractions"`
	// MaxShare: the largest rank's share of the path's growth summed over
	// ranks; Concentrated: the growth is not homogeneous across ranks.
	MaxShare     float64 `json:"max_share"`
	Concentrated bool    `json:"concentrated"`
	Suspects     []int   `json:"suspects,omitempty"`
}
