package greyhound

import (
	"encoding/json"
	"fmt"
)

// Phase is the controller's phase (§4.1).
type Phase string

const (
	PhaseTracking   Phase = "tracking"
	PhaseProfiling  Phase = "profiling"
	PhaseValidation Phase = "validation"
	PhaseVerdict    Phase = "verdict"
)

// Transition is one timestamped phase change with why and what moved it.
type Transition struct {
	From     Phase           `json:"from"`
	To       Phase           `json:"to"`
	AtNS     int64           `json:"at_ns"`
	Reason   string          `json:"reason"`
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// ControllerState is one job's controller state; the server stores it
// and feeds it back with each Observation.
type ControllerState struct {
	Phase   Phase        `json:"phase"`
	Since   int64        `json:"since_ns"`
	History []Transition `json:"history"`
	// Plan is the validation plan in flight (phase validation).
	Plan    *Plan    `json:"plan,omitempty"`
	PlanSeq int      `json:"plan_seq"`
	Verdict *Verdict `json:"verdict,omitempty"`
	// Onset is the verified onset that opened this episode (nil for a
	// manual one): lateness is judged on the instances since it, against
	// its iteration-time increase.
	Onset *ChangePointView `json:"onset,omitempty"`
	// Relief is a verified relief seen while validating: the plan still
	// runs (ranks may already hold it, and the pause itself bends the
	// iteration series), and the verdict says the slowdown had ended.
	Relief *ChangePointView `json:"relief,omitempty"`
}

// MaxHistory bounds the kept transitions (oldest dropped).
const MaxHistory = 256

// Observation is what the server saw since the last Step. Times come from
// here, never from a clock.
type Observation struct {
	NowNS int64 `json:"now_ns"`
	// Step is the latest training step known (for the plan's at_step).
	Step int64 `json:"step"`
	// Onset / Relief: a verified rise / fall of iteration time.
	Onset  *ChangePointView `json:"onset,omitempty"`
	Relief *ChangePointView `json:"relief,omitempty"`
	// Clusters is the latest cross-group comparison (nil: not profiled).
	Clusters []Cluster `json:"clusters,omitempty"`
	// Results are the validation results received for State.Plan.
	Results []RankResult `json:"results,omitempty"`
	// Lateness is the latest entry-lateness matrix (contract §5); with the
	// validation results it lets the verdict name a rank that enters
	// collectives late while its GEMM and links are healthy (late_rank).
	Lateness *Lateness `json:"lateness,omitempty"`
	// IterMS is the latest iteration time (lateness in an episode without
	// an onset is weighed against it).
	IterMS float64 `json:"iter_ms,omitempty"`
	// Manual is a validation requested by a person (API): it opens an
	// episode from tracking or a held verdict without an onset.
	Manual bool `json:"manual,omitempty"`
}

// NewController returns the initial state at nowNS.
func NewController(nowNS int64) ControllerState {
	return ControllerState{Phase: PhaseTracking, Since: nowNS, History: []Transition{}}
}

// Step advances the controller by one observation and returns the new
// state and, when it enters validation, the plan to publish.
//
//	tracking   → profiling   a verified onset, or a manual request
//	verdict    → profiling   a manual request
//	profiling  → validation  cross-group comparison finds degraded groups,
//	                         or has nothing to compare (every cluster a
//	                         single group): then every group is a suspect
//	profiling  → verdict     none degraded among comparable groups
//	                         ("uniform": all slowed alike), no cluster at
//	                         all or profiling timed out (inconclusive)
//	validation → verdict     all results in, or the deadline passed; GEMM
//	                         and P2P results first, then entry lateness
//	                         (late_rank) when they find nothing
//	verdict    → tracking    a verified relief (also one seen during
//	                         validation, at the next step), or HoldNS elapsed
//	profiling  → tracking    on a relief (§4.1 footnote 2: a transient
//	                         fail-slow that resolves meanwhile); during
//	                         validation a relief is noted, the plan
//	                         finishes and the verdict says so
func Step(s ControllerState, obs Observation, cfg Config) (ControllerState, *Plan) {
	if s.Phase == "" {
		s = NewController(obs.NowNS)
	}
	s.History = append([]Transition(nil), s.History...)
	now := obs.NowNS
	if obs.Manual && (s.Phase == PhaseTracking || s.Phase == PhaseVerdict) {
		s = s.move(PhaseProfiling, now, "manual request: validation requested through the API", map[string]bool{"manual": true})
		s.Verdict, s.Onset = nil, nil
		return s, nil
	}
	switch s.Phase {
	case PhaseTracking:
		if obs.Onset != nil {
			s = s.move(PhaseProfiling, now, fmt.Sprintf("verified onset at iteration %d: %.1f → %.1f ms (%+.0f%%)",
				obs.Onset.Index, obs.Onset.BeforeMS, obs.Onset.AfterMS, 100*obs.Onset.Rel), obs.Onset)
			s.Verdict = nil
			on := *obs.Onset
			s.Onset = &on
		}
	case PhaseProfiling:
		switch {
		case obs.Relief != nil:
			s = s.move(PhaseTracking, now, "relieved during profiling: the slowdown was transient", obs.Relief)
		case obs.Clusters != nil:
			sus := Suspects(obs.Clusters)
			comparable := 0
			for _, c := range obs.Clusters {
				if c.Comparable {
					comparable++
				}
			}
			why := ""
			if len(sus) == 0 && comparable == 0 && len(obs.Clusters) > 0 {
				// §4.3's comparison needs two groups moving the same
				// volume; a plain DDP job has one communicator. Validation
				// can still localise: GEMM on every rank, P2P ring and
				// tree passes over each group.
				sus = AllGroups(obs.Clusters)
				why = fmt.Sprintf("cross-group comparison impossible (every op/bytes/size has a single group): validating all %d group(s)", len(sus))
			}
			switch {
			case len(sus) > 0:
				plan := PlanValidation(sus, cfg)
				s.PlanSeq++
				plan.ID = fmt.Sprintf("v-%d", s.PlanSeq)
				plan.AtStep = obs.Step + cfg.PlanLeadSteps
				s.Plan = &plan
				if why == "" {
					why = fmt.Sprintf("cross-group comparison: %d degraded group(s) (> cluster median ×%.2f)", len(sus), 1+cfg.DegradedRel)
				}
				s = s.move(PhaseValidation, now, fmt.Sprintf("%s; validating ranks %s", why, joinInts(plan.GEMM.Ranks)),
					map[string]any{"suspects": sus, "plan": plan})
				return s, &plan
			case comparable > 0:
				v := newVerdict(VerdictUniform, nil, nil,
					fmt.Sprintf("no group stands out in %d comparable cluster(s): every group is slowed alike — a job-wide cause (CPU contention, input pipeline, shared network) rather than one rank or link", comparable),
					[]string{"from cross-group comparison alone: nothing was validated"})
				s.Verdict = &v
				s = s.move(PhaseVerdict, now, "cross-group comparison found no degraded group", obs.Clusters)
			default:
				v := newVerdict(VerdictInconclusive, nil, nil, "profiling saw no collective groups: nothing to compare or validate", nil)
				s.Verdict = &v
				s = s.move(PhaseVerdict, now, "nothing to compare", obs.Clusters)
			}
		case now-s.Since >= cfg.ProfileTimeoutNS:
			v := newVerdict(VerdictInconclusive, nil, nil, "profiling produced no group comparison before its timeout", nil)
			s.Verdict = &v
			s = s.move(PhaseVerdict, now, "profiling timed out", nil)
		}
	case PhaseValidation:
		if obs.Relief != nil && s.Relief == nil {
			// Not a reason to drop the plan (§4.1 fn. 2 resumes training
			// when validation finds nothing): ranks may already hold it,
			// and the validation pause itself is one huge iteration whose
			// aftermath reads as a relief. Finish it and say so.
			r := *obs.Relief
			s.Relief = &r
		}
		if s.Plan == nil {
			s = s.move(PhaseTracking, now, "no plan in flight", nil)
			break
		}
		j := JudgeAll(*s.Plan, obs.Results, cfg)
		expired := now-s.Since >= s.Plan.DeadlineMS*1e6
		if j.Complete || expired {
			late, lateOK := LateRank(obs.Lateness, s.Onset, obs.IterMS, cfg)
			v := Conclude(j, late, lateOK, Episode{Onset: s.Onset, Relief: s.Relief, IterMS: obs.IterMS}, cfg)
			reason := "all validation results in"
			if !j.Complete {
				reason = "validation deadline passed"
			}
			s.Verdict = &v
			s = s.move(PhaseVerdict, now, reason+": "+v.Text, j)
		}
	case PhaseVerdict:
		switch {
		case s.Relief != nil:
			// The slowdown already relieved while validating: holding
			// the verdict would leave the job unwatched for HoldNS.
			s = s.move(PhaseTracking, now, "the slowdown had relieved during validation; tracking again", s.Relief)
		case obs.Relief != nil:
			s = s.move(PhaseTracking, now, "verified relief", obs.Relief)
		case now-s.Since >= cfg.HoldNS:
			s = s.move(PhaseTracking, now, "verdict held long enough; tracking again", nil)
		}
	}
	return s, nil
}

func (s ControllerState) move(to Phase, now int64, reason string, evidence any) ControllerState {
	t := Transition{From: s.Phase, To: to, AtNS: now, Reason: reason}
	if evidence != nil {
		if b, err := json.Marshal(evidence); err == nil {
			t.Evidence = b
		}
	}
	s.History = append(s.History, t)
	if len(s.History) > MaxHistory {
		s.History = s.History[len(s.History)-MaxHistory:]
	}
	s.Phase, s.Since = to, now
	if to == PhaseTracking {
		s.Plan, s.Onset = nil, nil
	}
	if to == PhaseTracking || to == PhaseProfiling {
		s.Relief = nil
	}
	return s
}
