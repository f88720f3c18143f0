package server

import (
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/detect"
)

// startKair wires KAIR's triggered capture (issue 9): the life cycle over
// the store's capture and trace keyspaces and the controller that gives
// it the clock, fires the auto trigger and expires captures. Without
// those keyspaces (a test store) the KAIR routes answer 404.
func (s *Server) startKair(cfg *Config, st Store, jobs detect.Jobs) error {
	src, ok := st.(control.KairSource)
	if !ok {
		return nil
	}
	ka := control.NewKairLifecycle(src, control.KairLifecycleConfig{Steps: cfg.Kair.Steps})
	ka.SetLogger(s.log)
	var err error
	s.kair, err = control.NewKair(cfg.Kair, jobs, ka, s.reg, s.log)
	return err
}

// kairAPI is the API's view of the controller (nil interface when off).
func (s *Server) kairAPI() api.Kair {
	if s.kair == nil {
		return nil
	}
	return s.kair
}

// detectReporter is the StageFrontier evaluation's Reporter: the
// analyzer, watched by KAIR's auto trigger when it is on.
func (s *Server) detectReporter() detect.Reporter {
	if s.kair == nil {
		return s.analyzer
	}
	return s.kair.Observe(s.analyzer)
}

// Kair returns the KAIR capture controller (nil when the store has no
// capture keyspace).
func (s *Server) Kair() *control.Kair { return s.kair }
