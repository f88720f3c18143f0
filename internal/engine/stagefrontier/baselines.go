package stagefrontier

// Comparison summaries of §6.2.
const (
	MethodPerStageMax  = "per_stage_max"
	MethodPerStageAvg  = "per_stage_avg"
	MethodRankSpread   = "rank_spread"
	MethodSlowestRank  = "slowest_rank_breakdown"
	MethodRank0Local   = "rank0_local"
	numBaselineMethods = 5
)

var baselineMethods = [numBaselineMethods]string{MethodPerStageMax, MethodPerStageAvg, MethodRankSpread, MethodSlowestRank, MethodRank0Local}

// baselineAcc accumulates the five per-stage scores over effective stages.
type baselineAcc struct {
	score                  [numBaselineMethods][]float64 // S each
	colMax, colMin, colSum []float64                     // S scratch
}

func (b *baselineAcc) init(a *analyzer) {
	for i := range b.score {
		b.score[i] = make([]float64, a.S)
	}
	b.colMax, b.colMin, b.colSum = make([]float64, a.S), make([]float64, a.S), make([]float64, a.S)
}

// baselineFold adds step t's column statistics (gathered by stepKernel)
// to the five summaries.
func (a *analyzer) baselineFold(t, slow int) {
	b := &a.base
	S, n := a.S, float64(a.nPresent)
	D := a.step(t)
	r0 := a.present(t, 0)
	for s := 0; s < S; s++ {
		b.score[0][s] += b.colMax[s]               // Σ_t max_r d
		b.score[1][s] += b.colSum[s] / n           // Σ_t mean_r d
		b.score[2][s] += b.colMax[s] - b.colMin[s] // Σ_t (max_r d − min_r d)
		b.score[3][s] += D[slow*S+s]               // the slowest rank's own stages
		if r0 {
			b.score[4][s] += D[s] // rank 0's own stages
		}
	}
}

// baselines ranks the stages of each summary with the frontier's own
// routing rule; TotalMS is what the summary claims the window costs
// (Propositions 1–2 compare it with ExposedMS).
func (a *analyzer) baselines() []BaselineSummary {
	out := make([]BaselineSummary, numBaselineMethods)
	for i, m := range baselineMethods {
		score := a.groupSum(a.base.score[i])
		rt := route(a.w.Schema.Stages, score, a.cfg.CandidateThreshold)
		total := 0.0
		for _, x := range score {
			total += x
		}
		out[i] = BaselineSummary{Method: m, Score: score, Share: rt.Share, Routing: rt.Routing, Top1: rt.Top1, Top2: rt.Top2, TotalMS: total}
	}
	return out
}
