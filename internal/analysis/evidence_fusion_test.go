package analysis

import (
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/incident"
)

// The adapters' evidence is what incident.Fuse reads: these tests run it
// on adapted real reports, so a mapping that fusion would misread (a
// clearance that contradicts the right cause, a candidate that cannot
// join) fails here, not in production.

// fuse runs incident fusion over evidence of one job at nowNS.
func fuse(job string, now int64, evs ...[]incident.Evidence) []incident.Incident {
	var all []incident.Evidence
	for _, es := range evs {
		for _, e := range es {
			e.Job = job
			all = append(all, e)
		}
	}
	return incident.Fuse(incident.Input{Job: job, Evidence: all, NowNS: now}, incident.DefaultConfig())
}

// stated finds the incident that states cause key (nil: none).
func stated(incs []incident.Incident, key string) *incident.Incident {
	for i := range incs {
		if slices.Contains(incs[i].Cause, key) {
			return &incs[i]
		}
	}
	return nil
}

// The real sleep run (eval/greyhound, 4 ranks): Greyhound validated every
// rank's GEMM and links healthy and concluded late_rank on rank 1. The
// healthy GEMM must not clear rank 1 — it says the cause is not rank 1's
// compute, not that rank 1 is not the one the others wait for — so the
// incident states rank 1.
func TestFusionValidationDoesNotClearLateRank(t *testing.T) {
	rep := greyhoundFixture(t, "sleep-s1")
	evs := GreyhoundEvidence(rep, nil, EvidenceEnv{})
	gemm := byID(evs, "greyhound.validation/i0/v-1/gemm")
	if gemm == nil || slices.Contains(targetKeys(gemm.Against), "rank:1") || len(gemm.Against) != 3 {
		t.Fatalf("GEMM evidence %+v: want ranks 0, 2, 3 cleared and rank 1 (late) not", gemm)
	}
	incs := fuse(rep.Job, rep.GeneratedNS, evs)
	inc := stated(incs, "rank:1")
	if inc == nil {
		for _, i := range incs {
			t.Logf("incident %s cause %v hypotheses %+v contradictions %v", i.ID, i.Cause, i.Hypotheses, i.Contradictions)
		}
		t.Fatal("no incident states rank 1")
	}
	if inc.Confidence != incident.ConfidenceHigh || len(inc.Contradictions) != 0 {
		t.Errorf("confidence %q contradictions %v", inc.Confidence, inc.Contradictions)
	}
}

// The class fusion exists for (issue 17): a delay hidden inside a stage
// by a collective, where StageFrontier rightly withholds the rank
// (absorbed_in_stage) while collective-entry lateness shows the same rank
// last into that collective. Evidence from two real runs of that shape —
// the 8-rank backward recording (withheld) and the 2-rank sleep
// recording (rank 1 late) — placed on one wall clock: StageFrontier alone
// states nothing, fused with the lateness the incident states rank 1 with
// the chain stage (withheld) → collective (rank 1 last).
func TestFusionAbsorbedStageAndLateRank(t *testing.T) {
	gh, calls := sleepReport(t, 160)
	ghEvs := GreyhoundEvidence(gh, nil, EvidenceEnv{Clock: CallClock(calls)})
	late := byID(ghEvs, "greyhound.late_rank/")
	if late == nil || late.Confidence != incident.ConfidenceHigh {
		t.Fatalf("lateness %+v", late)
	}
	sf := recordedReport(t, recordedBackward)
	sfEvs := StageFrontierEvidence(sf, nil, EvidenceEnv{Clock: TimelineClock(sf.Timeline, late.Window.ToNS)})
	withheld := byID(sfEvs, "stagefrontier.leader/")
	if withheld == nil || withheld.Withheld != "absorbed_in_stage" {
		t.Fatalf("StageFrontier's finding %+v", withheld)
	}
	now := late.Window.ToNS + 1e9

	if incs := fuse("class", now, sfEvs); len(incs) != 1 || len(incs[0].Cause) != 0 {
		t.Fatalf("StageFrontier alone: %d incidents, cause %v: want one incident, no cause", len(incs), incs[0].Cause)
	}
	incs := fuse("class", now, sfEvs, ghEvs)
	inc := stated(incs, "rank:1")
	if inc == nil {
		for _, i := range incs {
			t.Logf("incident %s cause %v hypotheses %+v", i.ID, i.Cause, i.Hypotheses)
		}
		t.Fatal("the fused incident does not state rank 1")
	}
	h := inc.Hypotheses[slices.IndexFunc(inc.Hypotheses, func(h incident.Hypothesis) bool { return h.Target.Key() == "rank:1" })]
	var layers []incident.Layer
	for _, l := range h.Chain {
		layers = append(layers, l.Layer)
	}
	if !slices.Contains(layers, incident.LayerStage) || !slices.Contains(layers, incident.LayerCollective) ||
		slices.Index(layers, incident.LayerStage) > slices.Index(layers, incident.LayerCollective) {
		t.Errorf("chain layers %v: want stage (withheld) then collective (rank 1 last)", layers)
	}
}

// KAIR's culprit and its victims: on the real slow_op capture the
// incident (opened by an onset at the capture) states the culprit's rank
// and keeps the victims cleared.
func TestFusionKairCulprit(t *testing.T) {
	cp, rep := kairFixture(t, "slow_op")
	evs := KairEvidence(cp, rep, nil, EvidenceEnv{})
	onset := incident.Evidence{ID: "test/onset", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Signal: incident.SignalOnset,
		Window: incident.Span{FromStep: 40, ToStep: 40, FromNS: cp.CreatedNS - 10e9, ToNS: cp.CreatedNS - 9e9}, BeforeMS: 100, AfterMS: 190, Verified: true, Text: "onset"}
	incs := fuse(cp.Job, cp.DeadlineNS, evs, []incident.Evidence{onset})
	if inc := stated(incs, "rank:3"); inc == nil || stated(incs, "rank:0") != nil || stated(incs, "rank:1") != nil {
		t.Fatalf("incidents %+v: want rank 3 stated, the victims not", incs)
	}
}
