package server

import (
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// stepClockLookback bounds the collective calls read to place a report's
// steps on the wall clock: one rank's calls of the last two minutes, at
// most stepClockCalls of them (each evaluation reads them).
const (
	stepClockLookback = int64(120e9)
	stepClockCalls    = 50_000
)

// analysisAdapters are internal/analysis's evidence adapters with what
// each needs beside the report (analysis.EvidenceEnv): the server clock,
// the engines' configurations, and a step clock — from the job's
// collective calls where they name steps, else the StageFrontier time
// axis's own step times ending now.
func (s *Server) analysisAdapters(st Store) control.Adapters {
	calls, _ := st.(analysis.CallScanner)
	stepClock := func(job string, now int64) analysis.StepClock {
		if calls == nil || job == "" {
			return analysis.StepClock{}
		}
		c, err := analysis.ReadStepClock(calls, job, store.CallQuery{FromNS: now - stepClockLookback, Rank: 0}, stepClockCalls)
		if err != nil {
			return analysis.StepClock{}
		}
		return c
	}
	gh := analysis.DefaultGreyhoundConfig()
	env := func(job string) analysis.EvidenceEnv {
		now := time.Now().UnixNano()
		e := analysis.EvidenceEnv{AtNS: now, Clock: stepClock(job, now), Greyhound: gh}
		if s.sysom != nil {
			e.Sysom = s.sysom.Config()
		}
		return e
	}
	return control.Adapters{
		StageFrontier: func(rep *analysis.Report, hosts map[int]string) []incident.Evidence {
			e := env(rep.JobID)
			e.Clock = e.Clock.Or(analysis.TimelineClock(rep.Timeline, e.AtNS))
			return analysis.StageFrontierEvidence(rep, hosts, e)
		},
		Greyhound: func(rep *analysis.GreyhoundReport, hosts map[int]string) []incident.Evidence {
			return analysis.GreyhoundEvidence(rep, hosts, env(rep.Job))
		},
		Sysom: func(rep *analysis.SysomReport, hosts map[int]string) []incident.Evidence {
			job := ""
			if rep.Report != nil {
				job = rep.Job
			}
			return analysis.SysomEvidence(rep, hosts, env(job))
		},
		Kair: func(c *store.Capture, rep *analysis.KairReport, hosts map[int]string) []incident.Evidence {
			return analysis.KairEvidence(c, rep, hosts, env(c.Job))
		},
	}
}
