package server

import (
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/detect"
)

// startKair wires KAIR's triggered capture (issue 9): the life cycle over
// the store's capture and trace keyspaces and the controller that gives
// it the clock, creates the captures incidents ask for (incidents.go)
// and expires captures. Without those keyspaces (a test store) the KAIR
// routes answer 404.
func (s *Server) startKair(cfg *Config, st Store, jobs detect.Jobs) error {
	src, ok := st.(control.KairSource)
	if !ok {
		return nil
	}
	ka := control.NewKairLifecycle(src, control.KairLifecycleConfig{Steps: cfg.Kair.Steps})
	ka.SetLogger(s.log)
	s.kairLife = ka
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

// Kair returns the KAIR capture controller (nil when the store has no
// capture keyspace).
func (s *Server) Kair() *control.Kair { return s.kair }
