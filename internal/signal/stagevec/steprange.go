package stagevec

// The step range rule (issue 6, D1). One vector with a step far beyond a
// job's others (2^62 from a corrupt counter, a nanosecond timestamp sent
// as a step) stretched every "last N steps" window to astronomic size and
// could never be taken back. Ingest therefore refuses a step far outside
// the job's stored range. "Far" is relative and generous: training moves
// its step counter forward steadily; a resume from a checkpoint repeats
// or continues steps already near the range; a sampled client (every
// k-th step) widens the range in proportion. Only a jump that dwarfs
// both an absolute allowance and the job's own history is refused.

// MinStepSlack is the least distance beyond a job's stored steps a new
// step may lie: 2^24 (16.8 M) steps, weeks of training at tens of steps a
// second, so a short smoke run followed by a resume from a much later
// checkpoint is still accepted.
const MinStepSlack = int64(1) << 24

// StepSlackFactor scales the allowance with the job's history: a job
// whose stored steps span S may grow by StepSlackFactor·S at once.
const StepSlackFactor = 8

// StepRange returns the steps [lo, hi] a job whose stored steps span
// [first, last] accepts: the span widened by max(MinStepSlack,
// StepSlackFactor·(last−first+1)) on each side, within [0, MaxStep]. For
// a job with no stored steps pass the batch's smallest step as both
// first and last. Stored steps from before MaxStep existed are clamped,
// so the arithmetic cannot overflow.
func StepRange(first, last int64) (lo, hi int64) {
	first, last = min(max(first, 0), MaxStep), min(max(last, 0), MaxStep)
	if last < first {
		first, last = last, first
	}
	slack := max(MinStepSlack, StepSlackFactor*(last-first+1))
	return max(first-slack, 0), min(last+slack, MaxStep)
}
