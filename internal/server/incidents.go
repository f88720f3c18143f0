package server

import (
	"time"

	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/notify"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/detect"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// startIncidents creates the incident manager (issue 17) when the store
// has the incident keyspaces and the layer is on; wireIncidents connects
// it once the engines exist.
func (s *Server) startIncidents(cfg *Config, st Store) error {
	ist, ok := st.(control.IncidentStore)
	if !ok || cfg.IncidentsOff {
		if cfg.IncidentsOff {
			s.log.Info("incident layer off (-incidents=false): no incidents, no escalation, no automatic captures")
		}
		return nil
	}
	var err error
	s.incidents, err = control.NewIncidents(cfg.Incidents, ist, s.reg, s.log)
	return err
}

// wireIncidents feeds the manager from every engine where its result is
// produced — the background StageFrontier evaluation (detectReporter),
// each Greyhound controller round, each finished KAIR capture, the
// background SysOM round — and gives it the engines its escalation asks.
func (s *Server) wireIncidents(cfg *Config, st Store, cat *catalog.Catalog) {
	x := s.incidents
	if x == nil {
		return
	}
	ad := cfg.IncidentAdapters
	if ad.StageFrontier == nil && ad.Greyhound == nil && ad.Sysom == nil && ad.Kair == nil {
		ad = s.analysisAdapters(st)
	}
	d := control.IncidentDeps{Jobs: cat, Adapters: ad, Caps: s.incidentCaps(cat, st), Prompt: s.detector.Hot,
		Stopped: func(job string) *incident.Point {
			at, step, ok := s.detector.Stopped(job)
			if !ok {
				return nil
			}
			return &incident.Point{WallNS: at.UnixNano(), Step: step}
		}}
	if s.greyhound != nil {
		d.Validator = s.greyhound
		s.greyhound.OnReport(x.ObserveGreyhound)
	}
	if s.kair != nil {
		d.Capturer, d.Kair = s.kair, s.kair
		prev := s.kairLife.OnState // the capture counter (control.NewKair)
		s.kairLife.OnState = func(c *store.Capture) {
			if prev != nil {
				prev(c)
			}
			x.ObserveCapture(c)
		}
	}
	if s.sysom != nil {
		d.Sysom = s.sysom
		if ps, ok := st.(control.ProfileSource); ok {
			d.Profiles = ps
		}
	}
	x.SetDeps(d)
}

// incidentCaps says what a job can be asked for: a validation when the
// Greyhound controller follows its collective calls, a capture while its
// ranks poll for captures (or, for clients that do not say their step,
// while its steps advance), a profile window while an agent ships its
// stacks.
func (s *Server) incidentCaps(cat *catalog.Catalog, st Store) func(job string) incident.Capabilities {
	ps, _ := st.(control.ProfileSource)
	return func(job string) incident.Capabilities {
		var c incident.Capabilities
		if j, err := cat.Get(job); err == nil {
			c.Ranks = j.WorldSize
		}
		c.Validation = s.greyhound != nil && s.greyhound.Follows(job)
		c.Capture = s.kair != nil && (s.kair.Polling(job) || s.detector.Advancing(job))
		if s.sysom != nil && ps != nil {
			if p, err := ps.ProfileStats(job); err == nil && p.StackRecords > 0 {
				c.Profile = time.Since(time.Unix(0, p.LastNS)) < 10*time.Minute
			}
		}
		return c
	}
}

// detectReporter is the StageFrontier evaluation's Reporter: the
// analyzer, watched by the incident manager when the layer is on.
func (s *Server) detectReporter() detect.Reporter {
	if s.incidents == nil {
		return s.analyzer
	}
	return s.incidents.WatchReports(s.analyzer)
}

// Incidents returns the incident manager (nil when the layer is off or
// the store has no incident keyspace).
func (s *Server) Incidents() *control.Incidents { return s.incidents }

// apiIncidents is the API's incident dependency (nil interface when the
// layer is off: the routes answer 503).
func (s *Server) apiIncidents() api.Incidents {
	if s.incidents == nil {
		return nil
	}
	return s.incidents
}

// notifyIncidents subscribes the notifier to the manager's changes and
// re-asserts every unresolved incident, so that Alertmanager keeps its
// alerts firing across a restart (docs/format/notify.md).
func (s *Server) notifyIncidents() {
	if s.incidents == nil || s.notifier == nil {
		return
	}
	s.incidents.Subscribe(func(c control.Change) { s.NotifyIncident(notify.Change(c)) })
	for _, st := range []incident.State{incident.StateOpen, incident.StateRecovering} {
		incs, err := s.incidents.List(control.IncidentQuery{State: st, Limit: 1000})
		if err != nil {
			s.log.Warn("re-asserting unresolved incidents", "err", err)
			continue
		}
		for _, inc := range incs {
			s.NotifyIncident(notify.Change{Incident: inc, From: inc.State, To: inc.State})
		}
	}
}
