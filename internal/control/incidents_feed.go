package control

import (
	"context"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// Adapters turn each engine's report into evidence (ARCHITECTURE.md rule
// 5: engines do not know incidents; internal/analysis adapts them). The
// server sets analysis.StageFrontierEvidence, GreyhoundEvidence,
// SysomEvidence and KairEvidence; tests set fakes. A nil adapter feeds
// nothing from its engine.
type Adapters struct {
	StageFrontier func(rep *analysis.Report, hosts map[int]string) []incident.Evidence
	Greyhound     func(rep *analysis.GreyhoundReport, hosts map[int]string) []incident.Evidence
	Sysom         func(rep *analysis.SysomReport, hosts map[int]string) []incident.Evidence
	Kair          func(c *store.Capture, rep *analysis.KairReport, hosts map[int]string) []incident.Evidence
}

// JobSource reads job registrations (*catalog.Catalog).
type JobSource interface {
	Get(id string) (*signal.Job, error)
	List() ([]*signal.Job, error)
}

// IncidentDeps are what the manager feeds from and asks; nil fields
// switch that part off. Set them with SetDeps before Run.
type IncidentDeps struct {
	Jobs     JobSource
	Adapters Adapters
	// Caps says what a job can be asked for (validation polls, capture
	// polls, an agent shipping stacks) and its rank count.
	Caps func(job string) incident.Capabilities
	// Prompt asks for the job's prompt re-evaluation (an onset is
	// suspected or an incident is unresolved): detect.Detector.Hot.
	Prompt func(job string)
	// Stopped says where the job stopped reporting, nil while it
	// reports (incident.Input.Stopped): an incident still open then
	// resolves as "job stopped" instead of paging forever.
	Stopped func(job string) *incident.Point
	// The escalation's engines.
	Validator Validator
	Capturer  Capturer
	Kair      KairReporter
	Sysom     SysomReporter
	Profiles  ProfileSource
}

// SetDeps sets the manager's engines; call before Run and before the
// engines feed it.
func (x *Incidents) SetDeps(d IncidentDeps) { x.deps = d }

func (x *Incidents) caps(job string) incident.Capabilities {
	if x.deps.Caps == nil {
		return incident.Capabilities{}
	}
	return x.deps.Caps(job)
}

func (x *Incidents) stopped(job string) *incident.Point {
	if x.deps.Stopped == nil {
		return nil
	}
	return x.deps.Stopped(job)
}

func (x *Incidents) prompt(job string) {
	if x.deps.Prompt != nil {
		x.deps.Prompt(job)
	}
}

// hosts maps the job's ranks to the hosts they registered from.
func (x *Incidents) hosts(job string) map[int]string {
	if x.deps.Jobs == nil {
		return nil
	}
	j, err := x.deps.Jobs.Get(job)
	if err != nil {
		return nil
	}
	return analysis.RankHosts(j)
}

// adapt runs one adapter with the job's hosts, recovering from a panic
// in it (an adapter bug must not take the engine loop that feeds it
// down).
func (x *Incidents) adapt(job string, fn func(a *Adapters, hosts map[int]string) []incident.Evidence) (evs []incident.Evidence) {
	defer func() {
		if p := recover(); p != nil {
			x.log.Error("an evidence adapter panicked; its report is not fed", "job", job, "panic", p)
			evs = nil
		}
	}()
	return fn(&x.deps.Adapters, x.hosts(job))
}

// unresolvedJobs are the jobs with an unresolved incident.
func (x *Incidents) unresolvedJobs() map[string]bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[string]bool{}
	for _, e := range x.index {
		if e.sum.State != incident.StateResolved {
			out[e.job] = true
		}
	}
	return out
}

// WatchReports wraps the background evaluation's Reporter: every report
// it computes is also fed as evidence. Give the wrapper to the detector
// only (API reports over arbitrary windows are not the job's present).
func (x *Incidents) WatchReports(r Reporter) Reporter { return reportWatcher{r: r, x: x} }

type reportWatcher struct {
	r Reporter
	x *Incidents
}

func (w reportWatcher) Run(ctx context.Context, req analysis.Request) (*analysis.Report, error) {
	rep, err := w.r.Run(ctx, req)
	if err == nil && rep != nil {
		w.x.ObserveReport(req.Job, rep)
	}
	return rep, err
}

// ObserveReport feeds a StageFrontier report of job.
func (x *Incidents) ObserveReport(job string, rep *analysis.Report) {
	x.Observe(job, x.adapt(job, func(a *Adapters, hosts map[int]string) []incident.Evidence {
		if a.StageFrontier == nil {
			return nil
		}
		return a.StageFrontier(rep, hosts)
	}))
}

// ObserveGreyhound feeds a Greyhound controller round's report of job.
func (x *Incidents) ObserveGreyhound(job string, rep *analysis.GreyhoundReport) {
	if rep == nil {
		return
	}
	x.Observe(job, x.adapt(job, func(a *Adapters, hosts map[int]string) []incident.Evidence {
		if a.Greyhound == nil {
			return nil
		}
		return a.Greyhound(rep, hosts)
	}))
}

// ObserveCapture hears of a KAIR capture entering a state
// (analysis.Kair.OnState, which may hold the adapter's lock: it only
// queues). A capture that finished with two traces or more gets its KAIR
// report computed and fed; an incident's capture that expired or was
// cancelled is recorded as failed, so the incident may ask again.
func (x *Incidents) ObserveCapture(c *store.Capture) {
	if c == nil {
		return
	}
	switch c.State {
	case store.CaptureComplete, store.CapturePartial:
		if len(c.Uploaded) < 2 || x.deps.Kair == nil {
			return
		}
		cc := *c
		x.esc.enqueue(engineTask{key: "kair\x00" + c.Job + "\x00" + c.ID, job: c.Job, run: func(ctx context.Context) { x.esc.kairReport(ctx, &cc) }})
	case store.CaptureExpired, store.CaptureCancelled:
		if c.Trigger != TriggerIncident || len(c.Signal) <= len("incident:") {
			return
		}
		a := incident.Action{Incident: c.Signal[len("incident:"):], AtNS: x.now().UnixNano(), Kind: incident.RequestCapture, Ref: c.ID,
			Result: ResultFailed, Text: "KAIR capture " + c.ID + " " + string(c.State) + " without two traces"}
		x.m.escalations.WithLabelValues(string(a.Kind), a.Result).Inc()
		x.record(c.Job, a)
	}
}

// Drain runs the queued engine work (KAIR reports, profile windows) now
// and fuses what it fed (tests; Run does this on its own goroutines).
func (x *Incidents) Drain(ctx context.Context) {
	x.Sync(ctx)
	x.esc.drain(ctx)
	x.Sync(ctx)
}
