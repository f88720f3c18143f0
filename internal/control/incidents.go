package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// IncidentsConfig bounds and schedules the incident manager. Zero fields
// take the defaults (DefaultIncidentsConfig; docs/format/incident.md
// "Bounds").
type IncidentsConfig struct {
	// Fusion holds the fusion thresholds (incident.DefaultConfig).
	Fusion incident.Config
	// Tick re-fuses every job with an unresolved incident even without
	// new evidence (10s): recovering → resolved happens when the
	// hold-down passes, not when the next report arrives.
	Tick time.Duration
	// MaxJobEvidence and MaxJobEvidenceBytes bound one job's working set
	// (4096 pieces, 8 MiB of JSON); beyond them the oldest pieces no
	// unresolved incident holds go first, then the oldest findings
	// (counted as dropped, reason job_cap).
	MaxJobEvidence      int
	MaxJobEvidenceBytes int64
	// MaxJobActions bounds one job's audit working set (1024).
	MaxJobActions int
	// KeepIncidents is how many incidents one job keeps (64): beyond it
	// the oldest resolved ones are deleted.
	KeepIncidents int
	// Horizon: evidence no unresolved incident holds and that ended longer
	// ago than this leaves the working set (1h).
	Horizon time.Duration
	// MaxPendingBytes bounds evidence observed but not yet fused (32 MiB):
	// Observe never blocks; beyond it evidence is shed (counted, logged).
	MaxPendingBytes int64
	// MaxBytes bounds the job states the manager caches (256 MiB): the
	// least recently used jobs are unloaded (their state is in the store).
	MaxBytes int64
	// MaxIndexBytes bounds the in-memory fleet index (summaries of every
	// stored incident, 64 MiB): beyond it the oldest resolved summaries
	// are dropped from memory (still stored, still reachable by job).
	MaxIndexBytes int64
	// RelatedWindow is how far back another job's incident is related
	// to a new one (7 days); RelatedLimit how many notes one incident
	// carries (5).
	RelatedWindow time.Duration
	RelatedLimit  int
	// Escalation is the policy's cool-downs and budget (escalate.go).
	Escalation EscalationConfig
}

// DefaultIncidentsConfig returns the defaults.
func DefaultIncidentsConfig() IncidentsConfig {
	return IncidentsConfig{Fusion: incident.DefaultConfig(), Tick: 10 * time.Second, MaxJobEvidence: 4096, MaxJobEvidenceBytes: 8 << 20,
		MaxJobActions: 1024, KeepIncidents: 64, Horizon: time.Hour, MaxPendingBytes: 32 << 20, MaxBytes: 256 << 20,
		MaxIndexBytes: 64 << 20, RelatedWindow: 7 * 24 * time.Hour, RelatedLimit: 5}
}

func (c *IncidentsConfig) setDefaults() error {
	d := DefaultIncidentsConfig()
	if c.Fusion == (incident.Config{}) {
		c.Fusion = d.Fusion
	}
	if err := c.Fusion.Validate(); err != nil {
		return err
	}
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defI := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defD(&c.Tick, d.Tick)
	defI(&c.MaxJobEvidence, d.MaxJobEvidence)
	def(&c.MaxJobEvidenceBytes, d.MaxJobEvidenceBytes)
	defI(&c.MaxJobActions, d.MaxJobActions)
	defI(&c.KeepIncidents, d.KeepIncidents)
	defD(&c.Horizon, d.Horizon)
	def(&c.MaxPendingBytes, d.MaxPendingBytes)
	def(&c.MaxBytes, d.MaxBytes)
	def(&c.MaxIndexBytes, d.MaxIndexBytes)
	defD(&c.RelatedWindow, d.RelatedWindow)
	defI(&c.RelatedLimit, d.RelatedLimit)
	c.Escalation.setDefaults()
	return nil
}

// IncidentStore is the incident keyspaces (*store.Store implements it).
type IncidentStore interface {
	WriteIncidents(job string, w *store.IncidentWrite) error
	JobIncidents(job string, fn func(id string, value []byte) error) error
	Incident(id string) (job string, value []byte, err error)
	IncidentIndex(fn func(id, job string, summary []byte) error) error
	IncidentWorkingSet(job string, ev func(id string, value []byte) error, act func(k store.ActionKey, value []byte) error) error
}

var _ IncidentStore = (*store.Store)(nil)

// IncidentQuery selects incidents for List (Limit: default 100, at most
// 1000).
type IncidentQuery = incident.Query

// Change is one incident state change, told to subscribers after it is
// stored. From is "" when the incident was just opened; From == To is an
// update: its stated cause, confidence, category or scope changed (what
// an alert shows), the state did not.
type Change struct {
	Incident incident.Incident
	From     incident.State
	To       incident.State
}

// Incidents is the incident manager: it keeps each job's evidence
// working set, fuses it (incident.Fuse) whenever evidence or an action
// arrives and on every Tick while an incident is unresolved, stores the
// incidents and the working set in one write, tells subscribers of every
// state change, and acts on the incidents' requests (escalate.go). Safe
// for concurrent use; Observe and Record never block on fusion or I/O.
type Incidents struct {
	cfg IncidentsConfig
	st  IncidentStore
	log *slog.Logger
	m   *incMetrics
	now func() time.Time

	// Deps set before Run (SetDeps): capabilities, prompt evaluations,
	// the escalation's engines.
	deps IncidentDeps

	wake chan struct{}

	// mu guards pending, pendingBytes, subs, the fleet index and the LRU
	// bookkeeping; work serializes fusion (one job at a time: state is
	// read, fused, written) and Forget.
	mu           sync.Mutex
	pending      map[string]*pendingJob
	pendingBytes int64
	subs         []func(Change)
	index        map[string]*indexEntry // incident id → summary
	indexBytes   int64
	lastShedLog  time.Time

	work   sync.Mutex
	jobs   map[string]*jobState // guarded by work
	bytes  int64                // cached state, guarded by work
	useSeq uint64               // LRU clock, guarded by work

	esc *escalator
}

// pendingJob is what arrived for a job since its last fusion.
type pendingJob struct {
	evs   []pendingEv
	acts  []incident.Action
	fuse  bool // fuse even with nothing new (tick, a capability change)
	bytes int64
}

type pendingEv struct {
	ev  incident.Evidence
	raw []byte
}

// indexEntry is one stored incident's summary, kept for List across
// jobs, Hosts and Related.
type indexEntry struct {
	job  string
	sum  incident.Incident
	size int64
}

// jobState is one job's working set and its incidents as last stored.
type jobState struct {
	job     string
	ev      map[string]*evEntry
	evBytes int64
	acts    map[store.ActionKey]*actEntry
	incs    []incident.Incident // as last stored, oldest first
	meta    map[string]incMeta  // id → what was stored
	bytes   int64               // accounted: evidence + actions + incidents
	used    uint64
	// unsaved: a write failed; the next fusion writes everything again.
	unsaved bool
}

type evEntry struct {
	ev     incident.Evidence
	raw    []byte
	stored bool
}

type actEntry struct {
	a      incident.Action
	raw    []byte
	stored bool
}

// incMeta is what the manager remembers of a stored incident: its bytes
// (to tell a change), its state (transitions) and its lost time (the
// counter's increase).
type incMeta struct {
	raw    []byte
	size   int64
	state  incident.State
	lost   float64
	cat    incident.Category
	stated bool   // a cause is stated
	sig    string // what an update is told for (updateSig)
}

// NewIncidents returns the manager over st; its metrics are registered
// on reg. It reads the fleet index (one scan of the summaries) so List,
// Hosts and laggard_incidents_open are right from the start, and marks
// every job with an unresolved incident for fusion.
func NewIncidents(cfg IncidentsConfig, st IncidentStore, reg prometheus.Registerer, log *slog.Logger) (*Incidents, error) {
	if st == nil {
		return nil, errors.New("incidents: nil store")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := newIncMetrics(reg)
	if err != nil {
		return nil, err
	}
	x := &Incidents{cfg: cfg, st: st, log: log.With("component", "incidents"), m: m, now: time.Now, wake: make(chan struct{}, 1),
		pending: map[string]*pendingJob{}, index: map[string]*indexEntry{}, jobs: map[string]*jobState{}}
	x.esc = newEscalator(x)
	if err := x.loadIndex(); err != nil {
		return nil, err
	}
	return x, nil
}

// SetClock replaces the server clock (tests).
func (x *Incidents) SetClock(now func() time.Time) { x.now = now }

// loadIndex reads every stored summary into the fleet index.
func (x *Incidents) loadIndex() error {
	open := map[string]map[incident.Category]int{}
	err := x.st.IncidentIndex(func(id, job string, sum []byte) error {
		inc, err := incident.Decode(sum)
		if err != nil || inc.ID != id || inc.Job != job {
			x.badRecord("index", job, id, err)
			return nil
		}
		x.indexPut(inc, int64(len(sum)))
		if inc.State != incident.StateResolved {
			x.pendingFuse(job)
		}
		if inc.State == incident.StateOpen {
			if open[job] == nil {
				open[job] = map[incident.Category]int{}
			}
			open[job][inc.Category]++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("incidents: reading the index: %w", err)
	}
	for job, byCat := range open {
		for cat, n := range byCat {
			x.m.open.WithLabelValues(job, causeLabel(cat)).Set(float64(n))
		}
	}
	return nil
}

func (x *Incidents) badRecord(what, job, id string, err error) {
	if err == nil {
		err = errors.New("the record names another incident or job than its key")
	}
	x.m.skipped.Inc()
	x.log.Warn("skipping an undecodable stored incident record", "record", what, "job", job, "id", id, "err", err)
}

// Subscribe calls fn with every incident state change, after it is
// stored, on the fusion goroutine: fn must return quickly (queue its own
// work; internal/notify does).
func (x *Incidents) Subscribe(fn func(Change)) {
	x.mu.Lock()
	x.subs = append(x.subs, fn)
	x.mu.Unlock()
}

// Observe adds evidence to job's working set: pieces are idempotent by
// ID (a re-report with a later AtNS replaces the earlier one). It queues
// them for fusion and returns at once; beyond MaxPendingBytes they are
// shed (laggard_incident_evidence_dropped_total{reason="shed"}).
func (x *Incidents) Observe(job string, evs []incident.Evidence) {
	if len(evs) == 0 || job == "" {
		return
	}
	var add []pendingEv
	var size int64
	onset := false
	for i := range evs {
		e := evs[i]
		if e.Job == "" {
			e.Job = job
		}
		raw, err := checkEvidence(job, &e)
		if err != nil {
			x.m.dropped.WithLabelValues("invalid").Inc()
			x.log.Debug("evidence refused", "job", job, "id", e.ID, "err", err)
			continue
		}
		add = append(add, pendingEv{e, raw})
		size += int64(len(raw))
		onset = onset || e.Signal == incident.SignalOnset
	}
	if len(add) == 0 {
		return
	}
	x.mu.Lock()
	if x.pendingBytes+size > x.cfg.MaxPendingBytes {
		log := x.now().Sub(x.lastShedLog) > time.Minute
		if log {
			x.lastShedLog = x.now()
		}
		x.mu.Unlock()
		x.m.dropped.WithLabelValues("shed").Add(float64(len(add)))
		if log {
			x.log.Warn("incident evidence shed: the fusion queue is full", "job", job, "pieces", len(add), "limit_bytes", x.cfg.MaxPendingBytes)
		}
		return
	}
	p := x.pendingLocked(job)
	p.evs = append(p.evs, add...)
	p.bytes += size
	x.pendingBytes += size
	x.m.pending.Set(float64(x.pendingBytes))
	x.mu.Unlock()
	if onset {
		x.prompt(job) // an onset is suspected: evaluate the job promptly
	}
	x.poke()
}

// checkEvidence validates what the working set and the store rely on
// and returns the evidence's JSON.
func checkEvidence(job string, e *incident.Evidence) ([]byte, error) {
	if e.Job != job {
		return nil, fmt.Errorf("evidence %q is about job %q, observed for %q", e.ID, e.Job, job)
	}
	if err := store.CheckEvidenceID(e.ID); err != nil {
		return nil, err
	}
	switch e.Signal {
	case incident.SignalOnset, incident.SignalRelief, incident.SignalFinding, incident.SignalHealthy, incident.SignalProgress, incident.SignalState:
	default:
		return nil, fmt.Errorf("evidence %q: signal %q unknown", e.ID, e.Signal)
	}
	if e.Kind == "" {
		return nil, fmt.Errorf("evidence %q: empty kind", e.ID)
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("evidence %q: %w", e.ID, err)
	}
	if len(raw) > store.MaxEvidenceBytes {
		return nil, fmt.Errorf("evidence %q: %d bytes, over the %d-byte limit", e.ID, len(raw), store.MaxEvidenceBytes)
	}
	return raw, nil
}

// Record adds an audit action taken for incident a.Incident — by
// whatever acted (mitigation, an operator's tool) — and queues its job
// for fusion: the next fusion shows it in the audit log and marks the
// request it answers as asked. The error wraps store.ErrNotFound when no
// job has that incident.
func (x *Incidents) Record(a incident.Action) error {
	x.mu.Lock()
	e := x.index[a.Incident]
	x.mu.Unlock()
	job := ""
	if e != nil {
		job = e.job
	} else {
		j, _, err := x.st.Incident(a.Incident)
		if err != nil {
			return err
		}
		job = j
	}
	x.record(job, a)
	return nil
}

// record adds an action of job's incident a.Incident.
func (x *Incidents) record(job string, a incident.Action) {
	if job == "" || a.Incident == "" {
		return
	}
	x.mu.Lock()
	p := x.pendingLocked(job)
	p.acts = append(p.acts, a)
	x.mu.Unlock()
	x.poke()
}

func (x *Incidents) pendingLocked(job string) *pendingJob {
	p := x.pending[job]
	if p == nil {
		p = &pendingJob{}
		x.pending[job] = p
	}
	return p
}

// pendingFuse queues job for fusion with nothing new.
func (x *Incidents) pendingFuse(job string) {
	x.mu.Lock()
	x.pendingLocked(job).fuse = true
	x.mu.Unlock()
}

func (x *Incidents) poke() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// Run fuses queued jobs as evidence arrives and re-fuses unresolved
// incidents every Tick, until ctx is done; it also runs the escalation's
// engine work (KAIR reports, SysOM evaluations).
func (x *Incidents) Run(ctx context.Context) {
	go x.esc.run(ctx)
	t := time.NewTicker(x.cfg.Tick)
	defer t.Stop()
	for {
		x.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-x.wake:
		case <-t.C:
			x.tick()
		}
	}
}

// tick queues every job with an unresolved incident for fusion and asks
// for its prompt evaluation.
func (x *Incidents) tick() {
	x.mu.Lock()
	jobs := map[string]bool{}
	for _, e := range x.index {
		if e.sum.State != incident.StateResolved {
			jobs[e.job] = true
		}
	}
	for j := range jobs {
		x.pendingLocked(j).fuse = true
	}
	x.mu.Unlock()
	for j := range jobs {
		x.prompt(j)
	}
}

// Sync fuses every job with something queued, now (Run calls it; tests
// call it instead of Run).
func (x *Incidents) Sync(ctx context.Context) {
	for ctx.Err() == nil {
		x.mu.Lock()
		var job string
		var p *pendingJob
		for j, q := range x.pending {
			if job == "" || j < job {
				job, p = j, q
			}
		}
		if p != nil {
			delete(x.pending, job)
			x.pendingBytes -= p.bytes
			x.m.pending.Set(float64(x.pendingBytes))
		}
		x.mu.Unlock()
		if p == nil {
			return
		}
		x.process(ctx, job, p)
	}
}

// process fuses one job with what arrived, stores the result, tells
// subscribers and acts on new requests. Actions the escalation records
// are fused in the same call.
func (x *Incidents) process(ctx context.Context, job string, p *pendingJob) {
	x.work.Lock()
	defer x.work.Unlock()
	st, err := x.stateLocked(job)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			x.log.Warn("loading a job's incidents", "job", job, "err", err)
		}
		return
	}
	for i := range p.evs {
		st.addEvidence(p.evs[i].ev, p.evs[i].raw)
	}
	for _, a := range p.acts {
		st.addAction(a)
	}
	for round := 0; round < 3; round++ { // escalation's actions are fused at once, bounded
		changes, incs := x.fuseLocked(st)
		x.notify(changes)
		if ctx.Err() != nil || !x.esc.act(job, incs, st) {
			break
		}
	}
	x.account(st)
	x.evictLocked(job)
}

// fuseLocked runs Fuse over st, stores what changed and returns the
// state changes and the incidents.
func (x *Incidents) fuseLocked(st *jobState) ([]Change, []incident.Incident) {
	now := x.now().UnixNano()
	in := incident.Input{Job: st.job, NowNS: now, Prior: st.incs, Caps: x.caps(st.job), Stopped: x.stopped(st.job)}
	in.Evidence = make([]incident.Evidence, 0, len(st.ev))
	for _, e := range st.ev {
		in.Evidence = append(in.Evidence, e.ev)
	}
	in.Actions = make([]incident.Action, 0, len(st.acts))
	for _, a := range st.acts {
		in.Actions = append(in.Actions, a.a)
	}
	incs := incident.Fuse(in, x.cfg.Fusion)
	x.relate(incs)

	w := &store.IncidentWrite{}
	var changes []Change
	var localized []incident.Incident
	var lost float64
	newMeta := make(map[string]incMeta, len(incs))
	var puts []incident.Incident
	for i := range incs {
		inc := &incs[i]
		raw, err := json.Marshal(inc)
		if err != nil {
			x.log.Error("encoding an incident", "job", st.job, "id", inc.ID, "err", err)
			continue
		}
		sum := summaryOf(inc)
		sraw, err := json.Marshal(sum)
		if err != nil {
			continue
		}
		if len(raw) > store.MaxIncidentBytes || len(sraw) > store.MaxIncidentSummaryBytes || store.CheckIncidentID(inc.ID) != nil {
			x.log.Error("an incident exceeds the stored record's bounds; not stored", "job", st.job, "id", inc.ID, "bytes", len(raw))
			continue
		}
		old, had := st.meta[inc.ID]
		if had && !st.unsaved && old.state == incident.StateResolved && closed(inc, now, x.cfg.Fusion) {
			newMeta[inc.ID] = old // Fuse returns a closed incident as it was
			continue
		}
		nm := incMeta{raw: raw, size: int64(len(raw)), state: inc.State, lost: inc.Lost.Seconds, cat: inc.Category, stated: len(inc.Cause) > 0, sig: updateSig(inc)}
		newMeta[inc.ID] = nm
		if had && !st.unsaved && string(old.raw) == string(raw) {
			continue
		}
		w.Put = append(w.Put, store.IncidentRecord{ID: inc.ID, Value: raw, Summary: sraw})
		puts = append(puts, *inc)
		if nm.stated && !old.stated {
			localized = append(localized, *inc)
		}
		switch {
		case !had:
			changes = append(changes, Change{Incident: *inc, To: inc.State})
			lost += inc.Lost.Seconds
		case old.state != inc.State:
			changes = append(changes, Change{Incident: *inc, From: old.state, To: inc.State})
		case old.sig != nm.sig:
			changes = append(changes, Change{Incident: *inc, From: inc.State, To: inc.State})
		}
		if had && inc.Lost.Seconds > old.lost {
			lost += inc.Lost.Seconds - old.lost
		}
	}
	// Incidents Fuse no longer returns (it keeps every live prior) are
	// kept as stored.
	for id, m := range st.meta {
		if _, ok := newMeta[id]; !ok {
			if i := slices.IndexFunc(st.incs, func(p incident.Incident) bool { return p.ID == id }); i >= 0 {
				incs = append(incs, st.incs[i])
				newMeta[id] = m
			}
		}
	}
	slices.SortFunc(incs, func(a, b incident.Incident) int {
		return cmp.Or(cmp.Compare(a.Opened.WallNS, b.Opened.WallNS), cmp.Compare(a.Opened.Step, b.Opened.Step), cmp.Compare(a.ID, b.ID))
	})
	incs, evicted := x.keepIncidents(incs, now)
	for _, id := range evicted {
		w.Delete = append(w.Delete, id)
		delete(newMeta, id)
	}
	dropped := st.prune(incs, now, x.cfg)
	for id := range dropped.ev {
		w.DeleteEvidence = append(w.DeleteEvidence, id)
	}
	for k := range dropped.acts {
		w.DeleteActions = append(w.DeleteActions, k)
	}
	for reason, n := range dropped.counts {
		x.m.dropped.WithLabelValues(reason).Add(float64(n))
	}
	for id, e := range st.ev {
		if !e.stored || st.unsaved {
			w.PutEvidence = append(w.PutEvidence, store.EvidenceRecord{ID: id, Value: e.raw})
		}
	}
	for k, a := range st.acts {
		if !a.stored || st.unsaved {
			w.PutActions = append(w.PutActions, store.ActionRecord{Key: k, Value: a.raw})
		}
	}
	slices.SortFunc(w.PutEvidence, func(a, b store.EvidenceRecord) int { return cmp.Compare(a.ID, b.ID) })
	if err := x.st.WriteIncidents(st.job, w); err != nil {
		// Nothing is told or counted: the next fusion writes it all again.
		st.unsaved = true
		if !errors.Is(err, store.ErrNotFound) {
			x.log.Warn("storing incidents", "job", st.job, "err", err)
		}
		return nil, nil
	}
	st.unsaved = false
	for _, e := range st.ev {
		e.stored = true
	}
	for _, a := range st.acts {
		a.stored = true
	}
	st.incs, st.meta = incs, newMeta
	x.mu.Lock()
	for _, id := range evicted {
		x.indexDropLocked(id)
	}
	for i := range puts {
		x.indexPutLocked(&puts[i])
	}
	x.mu.Unlock()
	if lost > 0 {
		x.m.lost.WithLabelValues(st.job).Add(lost)
	}
	for _, c := range changes {
		if c.From == c.To {
			continue // an update, not a transition
		}
		x.m.transitions.WithLabelValues(string(c.To)).Inc()
		if c.From == "" && c.Incident.Opened.WallNS > 0 && c.Incident.DetectedNS >= c.Incident.Opened.WallNS {
			x.m.detection.Observe(float64(c.Incident.DetectedNS-c.Incident.Opened.WallNS) / 1e9)
		}
	}
	// Localized: the first time a cause is stated (the issue's "within
	// 10 s of the onset" is this histogram).
	for i := range localized {
		inc := &localized[i]
		after := float64(now-inc.Opened.WallNS) / 1e9
		if inc.Opened.WallNS > 0 && after >= 0 {
			x.m.localization.Observe(after)
		}
		x.log.Info("incident localized", "id", inc.ID, "job", inc.Job, "cause", inc.Cause, "confidence", inc.Confidence,
			"after_onset_s", after, "headline", inc.Headline)
	}
	x.publishOpen(st)
	return changes, incs
}

// updateSig is what an update (Change with From == To) is told for: the
// stated cause, its confidence and category, the scope.
func updateSig(inc *incident.Incident) string {
	b, _ := json.Marshal(struct {
		Cause      []string
		Confidence incident.Confidence
		Category   incident.Category
		Scope      incident.Scope
	}{inc.Cause, inc.Confidence, inc.Category, inc.Scope})
	return string(b)
}

// keepIncidents bounds the job's incidents to KeepIncidents, deleting the
// oldest closed ones (resolved past the hold-down: nothing re-opens
// them).
func (x *Incidents) keepIncidents(incs []incident.Incident, now int64) ([]incident.Incident, []string) {
	over := len(incs) - x.cfg.KeepIncidents
	if over <= 0 {
		return incs, nil
	}
	var gone []string
	out := incs[:0:0]
	for i := range incs {
		if over > 0 && closed(&incs[i], now, x.cfg.Fusion) {
			gone = append(gone, incs[i].ID)
			over--
			continue
		}
		out = append(out, incs[i])
	}
	return out, gone
}

// closed mirrors incident.Fuse's rule: resolved and past the hold-down.
func closed(inc *incident.Incident, now int64, cfg incident.Config) bool {
	return inc.State == incident.StateResolved && inc.Resolved != nil && now-inc.Resolved.WallNS >= int64(cfg.HoldDown)
}

// relate notes, on each incident with a stated cause, other jobs'
// incidents within RelatedWindow that blamed the same machine.
func (x *Incidents) relate(incs []incident.Incident) {
	var others []incident.Incident
	loaded := false
	for i := range incs {
		inc := &incs[i]
		if len(inc.Cause) == 0 || inc.State == incident.StateResolved {
			continue // a resolved incident keeps the notes it had
		}
		if !loaded {
			loaded = true
			lo := inc.Opened.WallNS - int64(x.cfg.RelatedWindow)
			x.mu.Lock()
			for _, e := range x.index {
				if e.job != inc.Job && e.sum.Opened.WallNS >= lo && len(e.sum.Cause) > 0 {
					others = append(others, e.sum)
				}
			}
			x.mu.Unlock()
		}
		if len(others) > 0 {
			inc.Related = incident.RelatedTo(inc, others, x.cfg.RelatedLimit)
		}
	}
}

// notify tells subscribers, in order.
func (x *Incidents) notify(changes []Change) {
	if len(changes) == 0 {
		return
	}
	x.mu.Lock()
	subs := slices.Clone(x.subs)
	x.mu.Unlock()
	for _, c := range changes {
		x.log.Info("incident", "id", c.Incident.ID, "job", c.Incident.Job, "from", c.From, "to", c.To, "headline", c.Incident.Headline)
		for _, fn := range subs {
			fn(c)
		}
	}
}

// publishOpen sets laggard_incidents_open for the job.
func (x *Incidents) publishOpen(st *jobState) {
	x.m.open.DeletePartialMatch(prometheus.Labels{"job": st.job})
	n := map[string]int{}
	for _, m := range st.meta {
		if m.state == incident.StateOpen {
			n[causeLabel(m.cat)]++
		}
	}
	for c, k := range n {
		x.m.open.WithLabelValues(st.job, c).Set(float64(k))
	}
}

func causeLabel(c incident.Category) string {
	if c == "" {
		return string(incident.CategoryUnknown)
	}
	return string(c)
}

// Forget drops a deleted job: its queued evidence, cached state, index
// entries and series (its keyspaces went with the job,
// store.DeleteJob).
func (x *Incidents) Forget(job string) {
	x.work.Lock()
	if st := x.jobs[job]; st != nil {
		x.bytes -= st.bytes
		delete(x.jobs, job)
	}
	x.work.Unlock()
	x.mu.Lock()
	if p := x.pending[job]; p != nil {
		x.pendingBytes -= p.bytes
		delete(x.pending, job)
	}
	for id, e := range x.index {
		if e.job == job {
			x.indexDropLocked(id)
		}
	}
	x.mu.Unlock()
	x.m.open.DeletePartialMatch(prometheus.Labels{"job": job})
	x.m.lost.DeletePartialMatch(prometheus.Labels{"job": job})
	x.esc.forget(job)
}

// Queries (the API's read side).

// Get returns incident id; the error wraps store.ErrNotFound when no
// job has it (or its record does not decode: it is skipped and counted).
func (x *Incidents) Get(id string) (*incident.Incident, error) {
	job, v, err := x.st.Incident(id)
	if err != nil {
		return nil, err
	}
	inc, err := incident.Decode(v)
	if err != nil || inc.ID != id || inc.Job != job {
		x.badRecord("incident", job, id, err)
		return nil, fmt.Errorf("incident %q: its stored record does not decode: %w", id, store.ErrNotFound)
	}
	return inc, nil
}

// List returns incidents matching q, newest (by onset) first, each in
// full.
func (x *Incidents) List(q IncidentQuery) ([]incident.Incident, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	match := func(inc *incident.Incident) bool {
		if q.State != "" && inc.State != q.State {
			return false
		}
		return q.SinceNS <= 0 || inc.State != incident.StateResolved || inc.Updated.WallNS >= q.SinceNS ||
			(inc.Resolved != nil && inc.Resolved.WallNS >= q.SinceNS)
	}
	var out []incident.Incident
	if q.Job != "" {
		err := x.st.JobIncidents(q.Job, func(id string, v []byte) error {
			inc, err := incident.Decode(v)
			if err != nil || inc.ID != id || inc.Job != q.Job {
				x.badRecord("incident", q.Job, id, err)
				return nil
			}
			if match(inc) {
				out = append(out, *inc)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sortNewest(out)
		if len(out) > limit {
			out = out[:limit]
		}
		return out, nil
	}
	x.mu.Lock()
	var cands []incident.Incident
	for _, e := range x.index {
		if match(&e.sum) {
			cands = append(cands, e.sum)
		}
	}
	x.mu.Unlock()
	sortNewest(cands)
	for _, c := range cands {
		if len(out) == limit {
			break
		}
		inc, err := x.Get(c.ID)
		if err != nil {
			continue // deleted since, or undecodable (counted)
		}
		out = append(out, *inc)
	}
	return out, nil
}

func sortNewest(incs []incident.Incident) {
	slices.SortFunc(incs, func(a, b incident.Incident) int {
		return cmp.Or(-cmp.Compare(a.Opened.WallNS, b.Opened.WallNS), -cmp.Compare(a.Opened.Step, b.Opened.Step), cmp.Compare(a.ID, b.ID))
	})
}

// Hosts is the fleet view: machines ranked by the incidents (opened in
// [fromNS, toNS]; toNS 0: until now) that stated them as the cause.
func (x *Incidents) Hosts(fromNS, toNS int64) ([]incident.HostRow, error) {
	x.mu.Lock()
	incs := make([]incident.Incident, 0, len(x.index))
	for _, e := range x.index {
		if len(e.sum.Cause) > 0 {
			incs = append(incs, e.sum)
		}
	}
	x.mu.Unlock()
	return incident.Fleet(incs, fromNS, toNS), nil
}

type incMetrics struct {
	open                              *prometheus.GaugeVec
	lost                              *prometheus.CounterVec
	transitions, dropped, escalations *prometheus.CounterVec
	skipped, indexTrimmed             prometheus.Counter
	pending, cacheBytes               prometheus.Gauge
	detection, localization           prometheus.Histogram
}

func newIncMetrics(reg prometheus.Registerer) (*incMetrics, error) {
	const ns = "laggard"
	lat := []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600}
	m := &incMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "incidents_open",
			Help: "Open incidents (the job is slow now; recovering and resolved ones are not counted), by job and cause category."}, []string{"job", "cause"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "lost_seconds_total",
			Help: "Training time lost to slowdowns (Σ over slow steps of step time − healthy step time), by job."}, []string{"job"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "transitions_total",
			Help: "Incident state changes, by the state entered (open: opened or relapsed; recovering; resolved)."}, []string{"to"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "evidence_dropped_total",
			Help: "Evidence that left or never entered a job's working set, by reason: resolved (kept by its stored incident), expired (older than the horizon, in no open incident), job_cap (the per-job bound), shed (the fusion queue was full), invalid."}, []string{"reason"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "escalations_total",
			Help: "Evidence the incidents asked engines for, by kind (greyhound_validation, kair_capture, sysom_profile) and result (requested, done, skipped, failed)."}, []string{"kind", "result"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "records_skipped_total",
			Help: "Stored incident, evidence or audit records skipped because they do not decode (logged with their key)."}),
		indexTrimmed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "incident", Name: "index_trimmed_total",
			Help: "Resolved incidents dropped from the in-memory fleet index to keep it within its bound (still stored)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "incident", Name: "pending_bytes",
			Help: "Evidence observed but not yet fused (bytes of JSON)."}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "incident", Name: "cache_bytes",
			Help: "Job working sets and incidents the manager holds in memory (bytes, estimated)."}),
		detection: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "incident", Name: "detection_seconds",
			Help: "From an incident's onset (the engines' estimate of when the job slowed) to its opening (server clock).", Buckets: lat}),
		localization: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "incident", Name: "localization_seconds",
			Help: "From an incident's onset to the first stated cause (a rank, link, operator, or the whole job).", Buckets: lat}),
	}
	for _, c := range []prometheus.Collector{m.open, m.lost, m.transitions, m.dropped, m.escalations, m.skipped, m.indexTrimmed, m.pending, m.cacheBytes, m.detection, m.localization} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range []incident.State{incident.StateOpen, incident.StateRecovering, incident.StateResolved} {
		m.transitions.WithLabelValues(string(s))
	}
	for _, r := range []string{"resolved", "expired", "job_cap", "shed", "invalid"} {
		m.dropped.WithLabelValues(r)
	}
	return m, nil
}
