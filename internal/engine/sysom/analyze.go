package sysom

import "fmt"

// Analyze runs SysOM-AI's diagnosis over one window (§3.1): slow ranks
// from collective entry lateness, the CPU waterline per group, a layered
// differential diagnosis of every flagged rank against a healthy peer,
// and — when no straggler exists but the iteration time rose — the
// temporal baseline comparison. It is a pure function of its input.
func Analyze(in *Input, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if in == nil {
		return nil, fmt.Errorf("sysom: nil input")
	}
	if err := in.validate(); err != nil {
		return nil, fmt.Errorf("sysom input: %w", err)
	}
	rep := &Report{SlowRanks: []SlowRank{}, Waterline: []WaterlineFlag{}, Diagnoses: []Diagnosis{}, Notes: []string{}}

	// §3.1 slow-rank detection, per communicator.
	ix := indexOS(in.OS)
	hostOf := func(r int) string {
		if h := in.Hosts[r]; h != "" {
			return h
		}
		return ix.rankNode[r]
	}
	byID := map[string][]int{}
	for _, g := range in.Groups {
		byID[g.ID] = g.Ranks
	}
	lat := map[string]*lateStats{}
	for _, st := range lateness(in.Calls, cfg.W, hostOf) {
		lat[st.comm] = st
		slow, notes := st.slowRanks(cfg)
		rep.SlowRanks = append(rep.SlowRanks, slow...)
		rep.Notes = append(rep.Notes, st.notes(byID[st.comm], cfg)...)
		rep.Notes = append(rep.Notes, notes...)
	}
	if len(in.Calls) == 0 {
		rep.Notes = append(rep.Notes, "no collective calls in the window: slow-rank detection did not run")
	}

	// §3.1 CPU waterline, per communication group.
	groups := in.Groups
	if len(groups) == 0 {
		all := sortedKeys(in.Profiles)
		groups = []Group{{ID: AllGroup, Ranks: all}}
	}
	groupRanks := map[string][]int{}
	for _, g := range groups {
		groupRanks[g.ID] = g.Ranks
	}
	it := newInterner()
	profs := prepare(in.Profiles, it, &incScratch{})
	foreign := it.foreignRoots()
	for _, g := range groups {
		ms, notes := groupMembers(g, profs, cfg)
		rep.Notes = append(rep.Notes, notes...)
		if len(ms) < 2 {
			if len(ms) == 1 || len(notes) > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("group %s: %d rank(s) with a usable profile: no CPU waterline", g.ID, len(ms)))
			}
			continue
		}
		if len(ms) <= 5 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("group %s: %d ranks; the waterline uses leave-one-out statistics (with the rank inside them z ≤ sqrt(N−1) and k = %g could not fire)", g.ID, len(ms), cfg.K))
		}
		rep.Waterline = append(rep.Waterline, waterline(g.ID, ms, it.funcs, foreign, cfg)...)
	}

	// §3.1 layered differential diagnosis of each flagged rank. A rank
	// above the waterline that enters its collectives on time is not a
	// suspect: its CPU difference (another process on its core, laggard's
	// own agent) does not delay the group, so it is said once, as such,
	// and the rank stays a possible peer (issue 16 item 8b).
	dl := delays(lat, cfg)
	slowSet := map[int]bool{}
	for _, s := range rep.SlowRanks {
		slowSet[s.Rank] = true
	}
	water := map[int]bool{}
	onTimeNoted := map[int]bool{}
	for i := range rep.Waterline {
		w := &rep.Waterline[i]
		water[w.Rank] = true
		if d := dl[w.Rank]; !slowSet[w.Rank] && d.onTime() {
			w.OnTime = true
			if !onTimeNoted[w.Rank] {
				onTimeNoted[w.Rank] = true
				rep.Notes = append(rep.Notes, fmt.Sprintf("rank %d is above group %s's CPU waterline (%s %s vs %s) but enters its collectives on time (%+.2f ms per step against its typical peer, noise %.2f ms): not diagnosed — the group does not wait for this rank, so its CPU difference is not what delays the group",
					w.Rank, w.Group, w.Func, pct(w.Fraction), pct(w.Mean), d.ms, d.noise))
			}
		}
	}
	sus := suspects(rep.SlowRanks, rep.Waterline, lat, groupRanks, dl, cfg)
	flagged := map[int]bool{}
	for _, sp := range sus {
		flagged[sp.rank] = true
	}
	period := callPeriod(lat)
	for i, sp := range sus {
		if i == cfg.MaxDiagnoses {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d more flagged ranks not diagnosed (max_diagnoses %d)", len(sus)-i, cfg.MaxDiagnoses))
			break
		}
		rep.Diagnoses = append(rep.Diagnoses, diagnose(sp, in, ix, profs, flagged, water, period, cfg))
	}

	// §3.1 temporal baseline: no straggler, but the iteration time rose.
	rose := in.IterMs > 0 && in.IterBaseMs > 0 && in.IterMs >= in.IterBaseMs*(1+cfg.IterRise)
	switch {
	case rose && len(rep.SlowRanks) > 0:
		rep.Notes = append(rep.Notes, fmt.Sprintf("iteration time rose %.1f%% over the baseline, but stragglers exist: the cross-rank diagnosis applies", 100*(in.IterMs/in.IterBaseMs-1)))
	case rose:
		set := map[int]bool{}
		for _, g := range groups {
			for _, r := range g.Ranks {
				set[r] = true
			}
		}
		rep.Temporal = temporal(in, set, cfg, lat, rep)
	case in.IterMs > 0 && in.IterBaseMs == 0 && len(rep.SlowRanks) == 0:
		rep.Notes = append(rep.Notes, "no baseline iteration time: the temporal comparison needs one")
	case in.IterMs == 0 && in.IterBaseMs > 0 && len(rep.SlowRanks) == 0:
		rep.Notes = append(rep.Notes, "no current iteration time: the temporal comparison needs one")
	}
	return rep, nil
}
