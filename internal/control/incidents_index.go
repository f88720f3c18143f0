package control

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/laggard-dev/laggard/internal/incident"
)

// The fleet index: every stored incident's summary, kept in memory for
// List across jobs, Hosts and Related, within MaxIndexBytes.

// summaryOf is the incident as the index keeps it: without evidence,
// audit, requests, recommendations and chains (what List across jobs,
// the fleet view and Related read).
func summaryOf(inc *incident.Incident) *incident.Incident {
	s := *inc
	s.Evidence, s.Audit, s.Waiting, s.Recommendations = nil, nil, nil, nil
	s.Hypotheses = make([]incident.Hypothesis, 0, min(len(inc.Hypotheses), 16))
	for _, h := range inc.Hypotheses[:min(len(inc.Hypotheses), 16)] {
		h.Chain, h.Support, h.Against = nil, nil, nil
		s.Hypotheses = append(s.Hypotheses, h)
	}
	return &s
}

func (x *Incidents) indexPut(inc *incident.Incident, size int64) {
	x.mu.Lock()
	x.indexPutSized(inc, size)
	x.mu.Unlock()
}

func (x *Incidents) indexPutLocked(inc *incident.Incident) {
	s := summaryOf(inc)
	b, _ := json.Marshal(s)
	x.indexPutSized(s, int64(len(b)))
}

func (x *Incidents) indexPutSized(s *incident.Incident, size int64) {
	if old := x.index[s.ID]; old != nil {
		x.indexBytes -= old.size
	}
	x.index[s.ID] = &indexEntry{job: s.Job, sum: *s, size: size}
	x.indexBytes += size
	if x.indexBytes > x.cfg.MaxIndexBytes {
		x.trimIndexLocked()
	}
}

func (x *Incidents) indexDropLocked(id string) {
	if old := x.index[id]; old != nil {
		x.indexBytes -= old.size
		delete(x.index, id)
	}
}

// trimIndexLocked drops the oldest resolved summaries until the index
// fits (their records stay stored: Get and List by job still find them).
func (x *Incidents) trimIndexLocked() {
	var ids []*indexEntry
	for _, e := range x.index {
		if e.sum.State == incident.StateResolved {
			ids = append(ids, e)
		}
	}
	slices.SortFunc(ids, func(a, b *indexEntry) int { return cmp.Compare(a.sum.Opened.WallNS, b.sum.Opened.WallNS) })
	n := 0
	for _, e := range ids {
		if x.indexBytes <= x.cfg.MaxIndexBytes*3/4 {
			break
		}
		x.indexDropLocked(e.sum.ID)
		n++
	}
	x.m.indexTrimmed.Add(float64(n))
	x.log.Warn("incident index over its memory bound: the oldest resolved incidents leave the fleet view (still stored)", "dropped", n, "limit_bytes", x.cfg.MaxIndexBytes)
}
