package catalog

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Incarnations (docs/design/roles-and-runs.md): which launch of a job a
// registering process belongs to. The rules, in order:
//
//  1. a process already bound to an incarnation stays in it;
//  2. a launch id (torchelastic run id + restart count, Slurm job + restart
//     count, LAGGARD_INCARNATION) names its incarnation — the newest with
//     that launch id — and a launch id never seen opens a new one;
//  3. otherwise the process belongs to the newest incarnation;
//  4. but a new incarnation opens when, in the chosen one, the process's
//     rank is already bound to another process (a restart), the run id
//     differs (a resubmission), or a new-style client registers another
//     layout (world size, stage list, accumulation);
//  5. a registration without process information (an older client, the
//     server's own implicit registration) never opens one except for a
//     changed run id, and a layout that contradicts its incarnation is
//     still a 409.
//
// Nothing here reads a clock except the opening time, so a replay of the
// same registrations in the same order gives the same incarnations.

// keepProcs is how many of the newest incarnations keep their per-rank
// process fingerprints (only the newest two can still see registrations
// from their processes in practice: a restart's stragglers).
const keepProcs = 2

// keepRanks is how many of the newest incarnations keep their rank list in
// their layout snapshot (hosts, roles); older ones keep the shape only.
const keepRanks = 16

// opening says why a new incarnation must open; nil means none.
type opening struct {
	reason signal.IncarnationReason
	detail string
}

// ensureIncarnations gives a job registered before incarnations existed
// its implicit incarnation 0.
func ensureIncarnations(j *signal.Job) {
	if len(j.Incarnations) == 0 {
		j.Incarnations = []signal.Incarnation{{N: 0, Opened: j.Created, Reason: signal.IncFirst, RunID: j.RunID}}
	}
}

// incIndex returns the index of incarnation n in j.Incarnations, or -1.
func incIndex(j *signal.Job, n int) int {
	i, ok := slices.BinarySearchFunc(j.Incarnations, n, func(in signal.Incarnation, n int) int { return in.N - n })
	if !ok {
		return -1
	}
	return i
}

// procOf returns rank r's bound process fingerprint in in (0: none).
func procOf(in *signal.Incarnation, r int) uint64 {
	if r < 0 || (r+1)*8 > len(in.Procs) {
		return 0
	}
	return binary.BigEndian.Uint64(in.Procs[r*8:])
}

// bindProc records process key for rank r in in (world ranks at most).
func bindProc(in *signal.Incarnation, r, world int, key uint64) {
	if key == 0 || r < 0 || r >= world {
		return
	}
	if need := world * 8; len(in.Procs) < need {
		in.Procs = append(in.Procs, make([]byte, need-len(in.Procs))...)
	}
	binary.BigEndian.PutUint64(in.Procs[r*8:], key)
}

// boundTo returns the index of the incarnation process key is bound to in,
// or -1 (newest first).
func boundTo(j *signal.Job, key uint64) int {
	if key == 0 {
		return -1
	}
	for i := len(j.Incarnations) - 1; i >= 0; i-- {
		p := j.Incarnations[i].Procs
		for o := 0; o+8 <= len(p); o += 8 {
			if binary.BigEndian.Uint64(p[o:]) == key {
				return i
			}
		}
	}
	return -1
}

// byLaunch returns the index of the newest incarnation with launch id l.
func byLaunch(j *signal.Job, l string) int {
	for i := len(j.Incarnations) - 1; i >= 0; i-- {
		if j.Incarnations[i].Launch == l {
			return i
		}
	}
	return -1
}

// adoptable: an incarnation nobody has bound a process or a launch id to
// yet (opened by an older client or an implicit registration); the first
// new-style process takes it over instead of opening another.
func adoptable(in *signal.Incarnation) bool { return in.Launch == "" && len(in.Procs) == 0 }

// place chooses the incarnation (an index into j.Incarnations) for a
// registration by process p — of the job layout nj when non-nil (a job
// registration), of rank when >= 0 (a join) — or says why a new one must
// open. j has its incarnations (ensureIncarnations).
func place(j *signal.Job, nj *signal.Job, rank int, p signal.Process) (int, *opening, error) {
	newest := len(j.Incarnations) - 1
	key := p.Key()
	if i := boundTo(j, key); i >= 0 {
		// Rule 1: a re-registration of a known process. Its layout must
		// still agree with its incarnation's.
		if nj != nil {
			if err := conflict(j.At(j.Incarnations[i].N), nj); err != nil {
				return 0, nil, err
			}
		}
		return i, nil, nil
	}
	i := newest
	if p.Launch != "" { // rule 2
		switch k := byLaunch(j, p.Launch); {
		case k >= 0:
			i = k
		case adoptable(&j.Incarnations[newest]):
		default:
			return 0, &opening{signal.IncLaunch, fmt.Sprintf("the launcher started a new launch (%s)", signal.Clip(p.Launch))}, nil
		}
	}
	in := &j.Incarnations[i]
	newStyle := key != 0 || p.Launch != ""
	if nj != nil && nj.RunID != "" && nj.RunID != in.RunID && (p.Launch == "" || in.Launch != p.Launch) {
		// Another run id is a resubmission. So is a run id from an older
		// client where the incarnation has none but has processes: those
		// would have sent their process ids.
		if in.RunID != "" || (!newStyle && len(in.Procs) > 0) {
			return 0, &opening{signal.IncRunID, fmt.Sprintf("a registration came with run id %q (incarnation %d has %q)", signal.Clip(nj.RunID), in.N, signal.Clip(in.RunID))}, nil
		}
	}
	if nj != nil {
		if err := conflict(j.At(in.N), nj); err != nil {
			if !newStyle || i != newest {
				return 0, nil, err
			}
			return 0, &opening{signal.IncLayout, "a new process registered another layout: " + err.Error()}, nil
		}
	}
	if key != 0 && rank >= 0 {
		if have := procOf(in, rank); have != 0 && have != key {
			return 0, &opening{signal.IncRestart, fmt.Sprintf("rank %d registered from a new process (%s)", rank, signal.Clip(p.ID))}, nil
		}
	}
	return i, nil, nil
}

// open appends a new incarnation to j for a registration by process p
// (of layout nj when non-nil) and returns its index. The incarnation that
// was newest keeps a snapshot of its layout; the job's fields then
// describe the new one, whose ranks join afresh.
func open(j *signal.Job, nj *signal.Job, p signal.Process, why *opening, now time.Time) (int, error) {
	last := j.Incarnations[len(j.Incarnations)-1]
	if last.N >= signal.MaxIncarnation {
		return 0, &signal.ConflictError{Field: "incarnation", Msg: fmt.Sprintf("job %q has had %d incarnations, the limit; use a new job id", j.ID, last.N+1)}
	}
	prev := &j.Incarnations[len(j.Incarnations)-1]
	if prev.Layout == nil {
		prev.Layout = j.LayoutOf()
	}
	in := signal.Incarnation{N: last.N + 1, Opened: now, StartNS: p.StartNS, Reason: why.reason, Detail: why.detail, Launch: p.Launch, RunID: j.RunID}
	if nj != nil {
		j.WorldSize, j.Schema, j.Accumulation = nj.WorldSize, nj.Schema.Clone(), nj.Accumulation
		if nj.Name != "" {
			j.Name = nj.Name
		}
		if nj.Labels != nil {
			j.Labels = nj.Labels
		}
		if nj.RunID != "" {
			in.RunID = nj.RunID
		}
	}
	j.RunID = in.RunID
	j.Ranks, j.Groups = nil, nil
	j.Incarnations = append(j.Incarnations, in)
	trimIncarnations(j)
	return len(j.Incarnations) - 1, nil
}

// trimIncarnations bounds what a job's registration holds: descriptions
// of the newest KeepIncarnations, rank lists of the newest keepRanks,
// process fingerprints of the newest keepProcs.
func trimIncarnations(j *signal.Job) {
	if n := len(j.Incarnations) - signal.KeepIncarnations; n > 0 {
		j.Incarnations = slices.Delete(j.Incarnations, 0, n)
	}
	for i := range j.Incarnations {
		age := len(j.Incarnations) - 1 - i
		in := &j.Incarnations[i]
		if age >= keepProcs {
			in.Procs = nil
		}
		if age >= keepRanks && in.Layout != nil && in.Layout.Ranks != nil {
			l := *in.Layout
			l.Ranks = nil
			in.Layout = &l
		}
	}
}

// noteStart lowers incarnation in's start to the process's when it is
// earlier (the earliest process start of a launch is its start).
func noteStart(in *signal.Incarnation, p signal.Process) {
	if p.StartNS > 0 && (in.StartNS == 0 || p.StartNS < in.StartNS) {
		in.StartNS = p.StartNS
	}
}

// cloneIncarnations deep-copies the parts of incarnations that placement
// mutates (Procs), so a cached job is never modified.
func cloneIncarnations(in []signal.Incarnation) []signal.Incarnation {
	out := slices.Clone(in)
	for i := range out {
		out[i].Procs = slices.Clone(out[i].Procs)
	}
	return out
}
