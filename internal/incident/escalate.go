package incident

import (
	"fmt"
	"slices"
)

// maxSuspects bounds the ranks one request involves (a capture or a
// profile window of every rank would cost the job what it is meant to
// diagnose).
const maxSuspects = 2

// waiting is the escalation policy (docs/design/incidents.md
// "Escalation"): while the incident is open, ask each engine that can
// still add a layer of explanation, once:
//   - Greyhound validation, when no Greyhound episode covers the
//     incident yet (its controller validates on its own onsets; the
//     incident asks when another engine opened it);
//   - a KAIR capture of the suspect ranks, when no operator-level
//     evidence exists;
//   - a SysOM profile window of the suspects and one healthy peer, when no
//     CPU/OS-level evidence exists.
//
// A request whose action is in the audit log is kept with Asked=true until
// its evidence arrives; control acts only on Asked=false ones, under its
// own cool-downs and budgets.
func waiting(inc *Incident, evs []*Evidence, caps Capabilities) []Request {
	if inc.State == StateResolved {
		return nil
	}
	has := map[Engine]bool{}
	hasLayer := map[Layer]bool{}
	greyEpisode := false
	for _, e := range evs {
		if e.Signal == SignalProgress {
			continue
		}
		has[e.Engine] = true
		if e.Signal == SignalFinding || e.Signal == SignalHealthy {
			hasLayer[e.Layer] = true
		}
		switch e.Kind {
		case KindGreyhoundPhase, KindGreyhoundValidation, KindGreyhoundVerdict:
			greyEpisode = true
		}
	}
	suspects := suspectRanks(inc)
	asked := func(k RequestKind) bool {
		for _, a := range inc.Audit {
			if a.Kind == k && a.Result != "skipped" && a.Result != "failed" {
				return true
			}
		}
		return false
	}
	var out []Request
	addReq := func(k RequestKind, ranks []int, reason string) {
		out = append(out, Request{Kind: k, Ranks: ranks, Reason: reason, Asked: asked(k)})
	}
	if caps.Validation && !greyEpisode {
		addReq(RequestValidation, nil, "a short benchmark on every rank and link confirms which one is slow")
	}
	if caps.Capture && len(suspects) > 0 && !has[EngineKair] && !hasLayer[LayerOperator] {
		addReq(RequestCapture, suspects, fmt.Sprintf("a profiler capture of %s shows which operator is slow and which ranks only wait", ranksWords(suspects)))
	}
	if caps.Profile && !hasLayer[LayerCPU] && !hasLayer[LayerOS] {
		if len(suspects) > 0 {
			ranks := suspects
			if peer := healthyPeer(suspects, caps.Ranks); peer >= 0 {
				ranks = append(slices.Clone(suspects), peer)
			}
			addReq(RequestProfile, ranks, "CPU stacks and OS counters of the suspect beside a healthy peer show whether the host or the OS is the cause")
		} else {
			// Nothing localized (or every rank alike): a host-side cause
			// such as another process on one rank's cores may be invisible
			// to the step and collective signals; SysOM's own slow-rank
			// and waterline tests run over every rank.
			addReq(RequestProfile, nil, "nothing is localized yet: CPU stacks and OS counters of every rank show whether one host differs, or what changed on all of them")
		}
	}
	return out
}

// suspectRanks are the ranks of the strongest hypotheses (stated first).
func suspectRanks(inc *Incident) []int {
	var out []int
	for _, h := range inc.Hypotheses {
		r := -1
		switch h.Target.Kind {
		case TargetRank, TargetOperator:
			r = h.Target.Rank
		}
		if r >= 0 && !slices.Contains(out, r) {
			out = append(out, r)
		}
		if len(out) == maxSuspects {
			break
		}
	}
	return out
}

// healthyPeer is the lowest rank that is not a suspect (-1: none).
func healthyPeer(suspects []int, ranks int) int {
	for r := 0; r < ranks; r++ {
		if !slices.Contains(suspects, r) {
			return r
		}
	}
	return -1
}
