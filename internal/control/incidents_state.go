package control

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// The manager's per-job state: loaded from the store on first use,
// merged with what arrives, pruned after each fusion, accounted and
// unloaded when the cache is over its bound.

// stateLocked returns job's state, loading it from the store when not
// cached. x.work is held.
func (x *Incidents) stateLocked(job string) (*jobState, error) {
	x.useSeq++
	if st := x.jobs[job]; st != nil {
		st.used = x.useSeq
		return st, nil
	}
	st := &jobState{job: job, ev: map[string]*evEntry{}, acts: map[store.ActionKey]*actEntry{}, meta: map[string]incMeta{}, used: x.useSeq}
	err := x.st.JobIncidents(job, func(id string, v []byte) error {
		inc, err := incident.Decode(v)
		if err != nil || inc.ID != id || inc.Job != job {
			x.badRecord("incident", job, id, err)
			return nil
		}
		st.incs = append(st.incs, *inc)
		st.meta[id] = incMeta{raw: v[:len(v):len(v)], size: int64(len(v)), state: inc.State, lost: inc.Lost.Seconds, cat: inc.Category, stated: len(inc.Cause) > 0, sig: updateSig(inc)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id, m := range st.meta { // the store's buffer is valid during the call only
		m.raw = append([]byte(nil), m.raw...)
		st.meta[id] = m
	}
	slices.SortFunc(st.incs, func(a, b incident.Incident) int {
		return cmp.Or(cmp.Compare(a.Opened.WallNS, b.Opened.WallNS), cmp.Compare(a.Opened.Step, b.Opened.Step), cmp.Compare(a.ID, b.ID))
	})
	err = x.st.IncidentWorkingSet(job, func(id string, v []byte) error {
		var e incident.Evidence
		if err := json.Unmarshal(v, &e); err != nil || e.ID != id || e.Job != job {
			x.badRecord("evidence", job, id, err)
			return nil
		}
		st.ev[id] = &evEntry{ev: e, raw: append([]byte(nil), v...), stored: true}
		st.evBytes += int64(len(v))
		return nil
	}, func(k store.ActionKey, v []byte) error {
		var a incident.Action
		if err := json.Unmarshal(v, &a); err != nil || a.Incident == "" {
			x.badRecord("action", job, fmt.Sprint(k.AtNS), err)
			return nil
		}
		st.acts[k] = &actEntry{a: a, raw: append([]byte(nil), v...), stored: true}
		return nil
	})
	if err != nil {
		return nil, err
	}
	x.jobs[job] = st
	x.account(st)
	return st, nil
}

// addEvidence merges one piece: the same ID with a later AtNS replaces
// it; an equal or older re-report changes nothing.
func (st *jobState) addEvidence(e incident.Evidence, raw []byte) {
	if old := st.ev[e.ID]; old != nil {
		if e.AtNS <= old.ev.AtNS {
			return
		}
		st.evBytes -= int64(len(old.raw))
	}
	st.ev[e.ID] = &evEntry{ev: e, raw: raw}
	st.evBytes += int64(len(raw))
}

// addAction merges one action; the same action twice is one.
func (st *jobState) addAction(a incident.Action) {
	raw, err := json.Marshal(a)
	if err != nil || len(raw) > store.MaxActionBytes {
		return
	}
	r := store.NewActionRecord(a.AtNS, raw)
	if st.acts[r.Key] == nil {
		st.acts[r.Key] = &actEntry{a: a, raw: raw}
	}
}

// drops is what prune removed.
type drops struct {
	ev     map[string]bool
	acts   map[store.ActionKey]bool
	counts map[string]int
}

// prune bounds the working set after a fusion (docs/format/incident.md
// "Bounds"): evidence a closed incident holds (it is stored with it) and
// evidence no live incident holds that ended before the horizon leave;
// then, over the per-job bounds, the oldest pieces no live incident
// needs as its onset go first.
func (st *jobState) prune(incs []incident.Incident, now int64, cfg IncidentsConfig) drops {
	d := drops{ev: map[string]bool{}, acts: map[store.ActionKey]bool{}, counts: map[string]int{}}
	live, closedHeld, onsets := map[string]bool{}, map[string]bool{}, map[string]bool{}
	liveInc, closedInc := map[string]bool{}, map[string]bool{}
	// The step series from the earliest unresolved incident's "before"
	// window on is kept: its lost time and resolution read it, however
	// long the incident lasts.
	progressFrom := int64(1<<63 - 1)
	for i := range incs {
		inc := &incs[i]
		if closed(inc, now, cfg.Fusion) {
			closedInc[inc.ID] = true
			for _, e := range inc.Evidence {
				closedHeld[e.ID] = true
			}
			continue
		}
		liveInc[inc.ID] = true
		from := inc.Windows.Before.FromNS
		if from <= 0 {
			from = inc.Opened.WallNS - int64(cfg.Horizon)
		}
		progressFrom = min(progressFrom, from)
		for _, e := range inc.Evidence {
			live[e.ID] = true
		}
		for _, id := range inc.Onset {
			onsets[id] = true
		}
	}
	horizon := now - int64(cfg.Horizon)
	drop := func(id, reason string) {
		e := st.ev[id]
		st.evBytes -= int64(len(e.raw))
		delete(st.ev, id)
		if e.stored {
			d.ev[id] = true
		}
		d.counts[reason]++
	}
	for id, e := range st.ev {
		switch {
		case live[id]:
		case e.ev.Signal == incident.SignalProgress && evidenceEnd(&e.ev) >= progressFrom:
		case closedHeld[id]:
			drop(id, "resolved")
		case evidenceEnd(&e.ev) < horizon:
			drop(id, "expired")
		}
	}
	if len(st.ev) > cfg.MaxJobEvidence || st.evBytes > cfg.MaxJobEvidenceBytes {
		order := make([]*evEntry, 0, len(st.ev))
		for _, e := range st.ev {
			if !onsets[e.ev.ID] {
				order = append(order, e)
			}
		}
		// Oldest first; among equals, what no live incident holds first.
		held := func(e *evEntry) int {
			if live[e.ev.ID] {
				return 1
			}
			return 0
		}
		slices.SortFunc(order, func(a, b *evEntry) int {
			return cmp.Or(cmp.Compare(evidenceEnd(&a.ev), evidenceEnd(&b.ev)), cmp.Compare(held(a), held(b)), cmp.Compare(a.ev.ID, b.ev.ID))
		})
		for _, e := range order {
			if len(st.ev) <= cfg.MaxJobEvidence && st.evBytes <= cfg.MaxJobEvidenceBytes {
				break
			}
			drop(e.ev.ID, "job_cap")
		}
	}
	// Actions: a closed incident's audit is stored with it; others leave
	// past the horizon or beyond the bound (oldest first).
	for k, a := range st.acts {
		if closedInc[a.a.Incident] || (!liveInc[a.a.Incident] && a.a.AtNS < horizon) {
			delete(st.acts, k)
			if a.stored {
				d.acts[k] = true
			}
		}
	}
	if over := len(st.acts) - cfg.MaxJobActions; over > 0 {
		keys := make([]store.ActionKey, 0, len(st.acts))
		for k := range st.acts {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b store.ActionKey) int {
			return cmp.Or(cmp.Compare(a.AtNS, b.AtNS), cmp.Compare(a.Hash, b.Hash))
		})
		for _, k := range keys[:over] {
			if st.acts[k].stored {
				d.acts[k] = true
			}
			delete(st.acts, k)
		}
	}
	return d
}

// evidenceEnd is when a piece of evidence ends on the wall axis (its
// window end, else its start, else when it was produced).
func evidenceEnd(e *incident.Evidence) int64 {
	return max(e.Window.ToNS, e.Window.FromNS, e.AtNS)
}

// account updates st's accounted bytes and the manager's total.
func (x *Incidents) account(st *jobState) {
	n := st.evBytes
	for _, a := range st.acts {
		n += int64(len(a.raw))
	}
	for _, m := range st.meta {
		n += 2 * m.size // decoded and encoded
	}
	x.bytes += n - st.bytes
	st.bytes = n
	x.m.cacheBytes.Set(float64(x.bytes))
}

// evictLocked unloads the least recently used job states (never keep)
// while the cache is over MaxBytes: they are stored, so this loses
// nothing but the next fusion's load.
func (x *Incidents) evictLocked(keep string) {
	if x.bytes <= x.cfg.MaxBytes {
		return
	}
	order := make([]*jobState, 0, len(x.jobs))
	for _, st := range x.jobs {
		if st.job != keep && !st.unsaved {
			order = append(order, st)
		}
	}
	slices.SortFunc(order, func(a, b *jobState) int { return cmp.Compare(a.used, b.used) })
	for _, st := range order {
		if x.bytes <= x.cfg.MaxBytes {
			break
		}
		x.bytes -= st.bytes
		delete(x.jobs, st.job)
	}
	x.m.cacheBytes.Set(float64(x.bytes))
}
