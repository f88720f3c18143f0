package agent

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/gpu"
	aosstat "github.com/laggard-dev/laggard/internal/agent/osstat"
	"github.com/laggard-dev/laggard/internal/agent/register"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// This file is the SysOM-AI side of the agent (contracts §1d): the
// registration socket, the CPU profiler, the OS collector, per-job
// splitting of their batches, shipping them and uploading the symbol
// files the server lacks (§3.4 central symbolization).

// registry is what the agent reads from the registration socket;
// *register.Server implements it.
type registry interface {
	Lookup(pid int) (register.Registration, bool)
	All() []register.Registration
}

// stackSource is a running CPU profiler; *cpuprof.Profiler implements it.
type stackSource interface {
	Run(ctx context.Context) error
	Close() error
}

// osSource is the OS collector; *osstat.Collector implements it.
type osSource interface {
	Collect(now time.Time) *osstat.Batch
	Close() error
}

// jobRank is a (job, rank) pair behind a slot.
type jobRank struct {
	job  string
	rank int
}

// slots gives every registered (job, rank) a small node-local number.
// The profiler and the OS collector only know "a rank" (RankOf,
// Ranks): two jobs on one node can both have a rank 0, so they are
// handed slots, and the agent maps a sample's or a point's slot back to
// its job and rank when it splits a batch.
type slots struct {
	mu   sync.Mutex
	ids  map[jobRank]int
	list []jobRank
}

// maxSlots bounds the table (registrations over an agent's lifetime);
// beyond it new pairs are not attributed (logged once).
const maxSlots = 1 << 16

func (s *slots) of(job string, rank int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := jobRank{job, rank}
	if id, ok := s.ids[k]; ok {
		return id, true
	}
	if len(s.list) >= maxSlots {
		return 0, false
	}
	if s.ids == nil {
		s.ids = map[jobRank]int{}
	}
	id := len(s.list)
	s.ids[k] = id
	s.list = append(s.list, k)
	return id, true
}

func (s *slots) get(id int) (jobRank, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id < 0 || id >= len(s.list) {
		return jobRank{}, false
	}
	return s.list[id], true
}

// profMetrics count what the SysOM-AI side ships and drops.
type profMetrics struct {
	shipped    *prometheus.CounterVec // kind: stacks, osstats
	dropped    *prometheus.CounterVec // kind, reason: queue, rejected, unattributed
	queued     *prometheus.GaugeVec
	symUploads *prometheus.CounterVec // outcome: present, uploaded, missing, failed
}

func newProfMetrics(r *prometheus.Registry) *profMetrics {
	m := &profMetrics{
		shipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard_agent", Name: "profile_batches_shipped_total",
			Help: "Stack and OS batches the server accepted, by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard_agent", Name: "profile_dropped_total",
			Help: "Stack samples or OS batches dropped by the agent, by kind and reason (queue full, rejected by the server, not attributable to a job)."}, []string{"kind", "reason"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "laggard_agent", Name: "profile_queued_bytes",
			Help: "Approximate bytes of stack and OS batches waiting to be shipped, by kind."}, []string{"kind"}),
		symUploads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard_agent", Name: "symbol_files_total",
			Help: "Build-IDs handled by the symbol uploader, by outcome."}, []string{"outcome"}),
	}
	m.shipped = register1(r, m.shipped)
	m.dropped = register1(r, m.dropped)
	m.queued = register1(r, m.queued)
	m.symUploads = register1(r, m.symUploads)
	return m
}

// register1 registers c, or returns the collector already registered
// under its name (two agents sharing one Metrics).
func register1[C prometheus.Collector](r *prometheus.Registry, c C) C {
	if err := r.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

// pqItem is one job's stack or OS batch waiting to be shipped.
type pqItem struct {
	job    string
	world  int // the job's world size from its registrations (0 unknown)
	stacks *stack.Batch
	os     *osstat.Batch
	weight int
}

// profQueue is a bounded FIFO of batches for one route: over MaxBytes
// the oldest go (a dropped stack batch's samples are added to the next
// shipped batch's Dropped, so the server knows). It shares the
// collectives shipper's request classification and backoff.
type profQueue struct {
	kind     string // "stacks" or "osstats"
	server   string
	token    string
	client   *http.Client
	timeout  time.Duration
	maxBytes int
	log      *slog.Logger
	m        *profMetrics
	now      func() time.Time

	flushMu   sync.Mutex
	mu        sync.Mutex
	items     []pqItem
	bytes     int
	lost      map[string]int64 // job → samples dropped, not yet reported
	failures  int
	notBefore time.Time
	// refusedLogAt: no "refused records" log line before it.
	refusedLogAt time.Time
}

func stackWeight(b *stack.Batch) int {
	w := 128
	for i := range b.Mappings {
		w += 64 + len(b.Mappings[i].Path) + len(b.Mappings[i].BuildID)
	}
	for i := range b.Samples {
		s := &b.Samples[i]
		w += 96 + len(s.Comm) + len(s.Thread) + 48*len(s.Frames)
		for j := range s.Frames {
			w += len(s.Frames[j].Func) + len(s.Frames[j].File)
		}
	}
	return w
}

func osWeight(b *osstat.Batch) int {
	w := 128
	for i := range b.Points {
		w += 64 + len(b.Points[i].Name) + len(b.Points[i].Device)
	}
	return w
}

func samplesIn(b *stack.Batch) int64 {
	var n int64
	for i := range b.Samples {
		n += b.Samples[i].Count
	}
	return n
}

func (q *profQueue) push(it pqItem) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, it)
	q.bytes += it.weight
	for q.bytes > q.maxBytes && len(q.items) > 0 {
		old := q.items[0]
		q.items = q.items[1:]
		q.bytes -= old.weight
		if old.stacks != nil {
			n := samplesIn(old.stacks) + old.stacks.Dropped
			q.lost[old.job] += n
			q.m.dropped.WithLabelValues(q.kind, "queue").Add(float64(n))
		} else {
			q.m.dropped.WithLabelValues(q.kind, "queue").Inc()
		}
	}
	q.m.queued.WithLabelValues(q.kind).Set(float64(q.bytes))
}

// front puts items back at the head (a retry).
func (q *profQueue) front(its ...pqItem) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range its {
		q.bytes += it.weight
	}
	q.items = append(its, q.items...)
	q.m.queued.WithLabelValues(q.kind).Set(float64(q.bytes))
}

func (q *profQueue) pop() (pqItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.now().Before(q.notBefore) {
		return pqItem{}, false
	}
	it := q.items[0]
	q.items[0] = pqItem{}
	q.items = q.items[1:]
	q.bytes -= it.weight
	if it.stacks != nil && q.lost[it.job] > 0 {
		it.stacks.Dropped = min(it.stacks.Dropped+q.lost[it.job], stack.MaxCount)
		delete(q.lost, it.job)
	}
	q.m.queued.WithLabelValues(q.kind).Set(float64(q.bytes))
	return it, true
}

// Len is the number of batches waiting.
func (q *profQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// flush ships queued batches until the queue is empty, a retryable
// failure (then backs off) or ctx ends.
func (q *profQueue) flush(ctx context.Context) {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	for ctx.Err() == nil {
		it, ok := q.pop()
		if !ok {
			return
		}
		ans, err := q.post(ctx, &it)
		var re *errRetry
		var st *errStatus
		switch {
		case err == nil:
			q.mu.Lock()
			q.failures = 0
			q.mu.Unlock()
			q.m.shipped.WithLabelValues(q.kind).Inc()
			q.noteRefused(it.job, ans)
		case errors.As(err, &re):
			q.front(it)
			q.mu.Lock()
			q.failures++
			d := backoff(q.failures)
			if re.after > 0 {
				d = re.after
			}
			q.notBefore = q.now().Add(d)
			q.mu.Unlock()
			q.log.Warn("shipping "+q.kind+" failed; will retry", "job", it.job, "err", err, "retry_in", d.Round(time.Millisecond))
			return
		case errors.As(err, &st) && st.code == http.StatusRequestEntityTooLarge && it.stacks != nil && len(it.stacks.Samples) > 1:
			// Too big for the server: halve it and send both halves.
			a, b := halve(it.stacks)
			q.front(pqItem{job: it.job, world: it.world, stacks: a, weight: stackWeight(a)}, pqItem{job: it.job, world: it.world, stacks: b, weight: stackWeight(b)})
		default:
			n := float64(1)
			if it.stacks != nil {
				n = float64(samplesIn(it.stacks))
			}
			q.m.dropped.WithLabelValues(q.kind, "rejected").Add(n)
			q.log.Error("server rejected a "+q.kind+" batch; dropping it", "job", it.job, "err", err)
		}
	}
}

// halve splits a stack batch's samples in two (each keeps every mapping;
// the server ignores unreferenced ones).
func halve(b *stack.Batch) (*stack.Batch, *stack.Batch) {
	k := len(b.Samples) / 2
	x, y := *b, *b
	x.Samples, y.Samples = b.Samples[:k:k], b.Samples[k:]
	y.Dropped = 0 // reported once
	return &x, &y
}

func (q *profQueue) post(ctx context.Context, it *pqItem) ([]byte, error) {
	var body []byte
	var err error
	if it.stacks != nil {
		body, err = laggardv1.MarshalProtoStacks(it.stacks)
	} else {
		body, err = laggardv1.MarshalProtoOSStats(it.os)
	}
	if err != nil {
		return nil, &errStatus{code: 0, msg: "encoding: " + err.Error()}
	}
	u := q.server + "/api/v1/jobs/" + url.PathEscape(it.job) + "/" + q.kind
	if it.world > 0 {
		// An unknown job is registered from the world its ranks
		// announced (as collective ingest does): the agent may ship a
		// window before the trainer's client registers the job.
		u += "?world=" + strconv.Itoa(it.world)
	}
	return postAnswer(ctx, q.client, q.token, q.timeout, http.MethodPost, u, "application/x-protobuf", bytes.NewReader(body))
}

// noteRefused counts the records the server left out of an accepted
// batch (its answer's "refused") and logs the first, at most once a
// minute per route.
func (q *profQueue) noteRefused(job string, ans []byte) {
	var a struct {
		Refused        int `json:"refused"`
		RefusedRecords []struct {
			Error string `json:"error"`
		} `json:"refused_records"`
	}
	if json.Unmarshal(ans, &a) != nil || a.Refused <= 0 {
		return
	}
	q.m.dropped.WithLabelValues(q.kind, "refused").Add(float64(a.Refused))
	now := q.now()
	q.mu.Lock()
	quiet := now.Before(q.refusedLogAt)
	if !quiet {
		q.refusedLogAt = now.Add(time.Minute)
	}
	q.mu.Unlock()
	if !quiet {
		first := ""
		if len(a.RefusedRecords) > 0 {
			first = a.RefusedRecords[0].Error
		}
		q.log.Warn("the server refused invalid records of a "+q.kind+" batch and stored the rest", "job", job, "refused", a.Refused, "first", first)
	}
}

// sysomSide is the agent's profiling half.
type sysomSide struct {
	cfg       *Config
	sanitized *prometheus.CounterVec
	proc      string // procfs root ("/proc"; tests use a fake tree)
	hostNS    uint64 // the agent's pid namespace
	reg       registry
	slots     slots
	stacks    *profQueue
	os        *profQueue
	syms      *symUploader
	m         *profMetrics
	warned    sync.Map // one-time warnings
}

func newSysomSide(cfg *Config, m *Metrics) *sysomSide {
	pm := newProfMetrics(m.Registry)
	q := func(kind string, maxBytes int) *profQueue {
		return &profQueue{kind: kind, server: cfg.Server, token: cfg.Token, client: cfg.Client, timeout: cfg.RequestTimeout,
			maxBytes: maxBytes, log: cfg.Log, m: pm, now: time.Now, lost: map[string]int64{}}
	}
	s := &sysomSide{cfg: cfg, m: pm, sanitized: m.sanitized, proc: "/proc", hostNS: nsInode("/proc/self/ns/pid"),
		stacks: q("stacks", cmp.Or(cfg.MaxProfileBytes, 64<<20)), os: q("osstats", 16<<20)}
	s.syms = newSymUploader(cfg, pm)
	return s
}

func (s *sysomSide) warnOnce(key, msg string, args ...any) {
	if _, loaded := s.warned.LoadOrStore(key, true); !loaded {
		s.cfg.Log.Warn(msg, args...)
	}
}

// rankOf is cpuprof.Config.RankOf: a registered process's slot.
func (s *sysomSide) rankOf(pid int) (int, bool) {
	if s.reg == nil {
		return 0, false
	}
	r, ok := s.reg.Lookup(pid)
	if !ok {
		return 0, false
	}
	id, ok := s.slots.of(r.Job, r.Rank)
	if !ok {
		s.warnOnce("slots", "too many (job, rank) registrations over the agent's life; new ones are not profiled", "max", maxSlots)
	}
	return id, ok
}

// credOf is the credentials of the process registered as job's rank; nil
// for rank −1 (-profile-all: an admin chose to ship every process) and
// for an unknown rank, which then gets nothing uploaded.
func (s *sysomSide) credOf(job string, rank int) *register.Cred {
	if rank < 0 || s.reg == nil {
		return nil
	}
	for _, r := range s.reg.All() {
		if r.Job == job && r.Rank == rank {
			c := r.Cred
			return &c
		}
	}
	return &register.Cred{UID: noUID, GID: noUID} // gone: nobody may read anything
}

// noUID is a uid no file belongs to (the kernel's overflow uid is 65534;
// this is (uid_t)−2, never assigned).
const noUID = 1<<32 - 2

// reveal is cpuprof.Config.Reveal: whether the registrant of the rank in
// slot could read process pid itself (visibility.go).
func (s *sysomSide) reveal(slot, pid int) bool {
	if s.cfg.ShowOtherProcesses {
		return true
	}
	jr, ok := s.slots.get(slot)
	if !ok {
		return false
	}
	c := s.credOf(jr.job, jr.rank)
	if c == nil {
		return false
	}
	p, ok := readProcIDs(s.proc, pid)
	return ok && mayRead(*c, p, s.hostNS)
}

// ranks is osstat.Config.Ranks: pid → slot of every registration.
func (s *sysomSide) ranks() map[int]int {
	out := map[int]int{}
	if s.reg == nil {
		return out
	}
	for _, r := range s.reg.All() {
		if id, ok := s.slots.of(r.Job, r.Rank); ok {
			out[r.PID] = id
		}
	}
	return out
}

// attribute maps a sample's or point's rank field (a slot, or −1) to a
// job and rank.
func (s *sysomSide) attribute(slot int) (string, int, bool) {
	if slot < 0 {
		return s.cfg.DefaultJob, -1, s.cfg.DefaultJob != ""
	}
	jr, ok := s.slots.get(slot)
	return jr.job, jr.rank, ok
}

// emitStacks is cpuprof.Config.Emit: split per job, queue, note the
// Build-IDs. It runs on the profiler's goroutine and never blocks.
func (s *sysomSide) emitStacks(b *stack.Batch) {
	if b == nil {
		return
	}
	if n := sanitizeStacks(b); n > 0 {
		s.sanitized.WithLabelValues("stacks").Add(float64(n))
	}
	var unattributed int64
	worlds := s.worlds()
	for job, jb := range splitStacks(b, s.attribute, &unattributed) {
		// Each job's files are uploaded with its own registrants'
		// credentials (visibility.go).
		s.syms.sawBatch(jb, func(rank int) *register.Cred { return s.credOf(job, rank) })
		s.stacks.push(pqItem{job: job, world: worlds[job], stacks: jb, weight: stackWeight(jb)})
	}
	if unattributed > 0 {
		s.m.dropped.WithLabelValues("stacks", "unattributed").Add(float64(unattributed))
	}
}

// splitStacks splits a node's batch into one batch per job, each with
// only the mappings its samples use (re-indexed) and real ranks. Dropped
// and the unwind counters are the node's and are copied to every job.
func splitStacks(b *stack.Batch, attribute func(int) (string, int, bool), unattributed *int64) map[string]*stack.Batch {
	out := map[string]*stack.Batch{}
	remaps := map[string][]int32{}
	for i := range b.Samples {
		smp := &b.Samples[i]
		job, rank, ok := attribute(smp.Rank)
		if !ok {
			*unattributed += smp.Count
			continue
		}
		jb := out[job]
		if jb == nil {
			jb = &stack.Batch{Node: b.Node, StartNS: b.StartNS, EndNS: b.EndNS, Hz: b.Hz, Ratio: b.Ratio, Dropped: b.Dropped, Unwind: b.Unwind}
			out[job] = jb
			rm := make([]int32, len(b.Mappings))
			for k := range rm {
				rm[k] = -1
			}
			remaps[job] = rm
		}
		rm := remaps[job]
		ns := *smp
		ns.Rank = rank
		if smp.Foreign && rank < 0 {
			ns.Foreign = false // cannot name the rank it hit
		}
		ns.Frames = make([]stack.Frame, len(smp.Frames))
		for k, fr := range smp.Frames {
			if fr.Mapping >= 0 && int(fr.Mapping) < len(b.Mappings) {
				if rm[fr.Mapping] < 0 {
					rm[fr.Mapping] = int32(len(jb.Mappings))
					jb.Mappings = append(jb.Mappings, b.Mappings[fr.Mapping])
				}
				fr.Mapping = rm[fr.Mapping]
			}
			ns.Frames[k] = fr
		}
		jb.Samples = append(jb.Samples, ns)
	}
	return out
}

// emitOS splits an OS batch per job: a rank's points go to its job, node
// and CPU points and absences to every job with a process here.
func (s *sysomSide) emitOS(b *osstat.Batch) {
	if b == nil {
		return
	}
	var jobs []string
	seen := map[string]bool{}
	if s.reg != nil {
		for _, r := range s.reg.All() {
			if !seen[r.Job] {
				seen[r.Job] = true
				jobs = append(jobs, r.Job)
			}
		}
	}
	if len(jobs) == 0 && s.cfg.DefaultJob != "" {
		jobs = append(jobs, s.cfg.DefaultJob)
	}
	if len(jobs) == 0 {
		s.m.dropped.WithLabelValues("osstats", "unattributed").Inc()
		return
	}
	if n := sanitizeOS(b); n > 0 {
		s.sanitized.WithLabelValues("osstats").Add(float64(n))
	}
	worlds := s.worlds()
	for job, jb := range splitOS(b, jobs, s.attribute, s.gpuOwner()) {
		s.os.push(pqItem{job: job, world: worlds[job], os: jb, weight: osWeight(jb)})
	}
}

// worlds maps each registered job to the largest world size its ranks
// announced.
func (s *sysomSide) worlds() map[string]int {
	out := map[string]int{}
	if s.reg == nil {
		return out
	}
	for _, r := range s.reg.All() {
		out[r.Job] = max(out[r.Job], r.World)
	}
	return out
}

// gpuOwner maps a GPU index to the registered process whose local rank
// it is (the usual one-GPU-per-local-rank launch), so a throttled GPU is
// its rank's evidence (§3.1 GPU diff).
func (s *sysomSide) gpuOwner() map[string]jobRank {
	own := map[string]jobRank{}
	if s.reg == nil {
		return own
	}
	for _, r := range s.reg.All() {
		k := strconv.Itoa(r.LocalRank)
		if _, dup := own[k]; !dup {
			own[k] = jobRank{r.Job, r.Rank}
		}
	}
	return own
}

func isGPUPoint(name string) bool { return strings.HasPrefix(name, "gpu_") }

func splitOS(b *osstat.Batch, jobs []string, attribute func(int) (string, int, bool), gpus map[string]jobRank) map[string]*osstat.Batch {
	out := make(map[string]*osstat.Batch, len(jobs))
	for _, j := range jobs {
		out[j] = &osstat.Batch{Node: b.Node, StartNS: b.StartNS, EndNS: b.EndNS, Absent: b.Absent}
	}
	for _, p := range b.Points {
		if jr, ok := gpus[p.Device]; ok && p.Rank < 0 && isGPUPoint(p.Name) && out[jr.job] != nil {
			p.Rank = jr.rank
			out[jr.job].Points = append(out[jr.job].Points, p)
			continue
		}
		if p.Rank < 0 {
			for _, j := range jobs {
				out[j].Points = append(out[j].Points, p)
			}
			continue
		}
		job, rank, ok := attribute(p.Rank)
		jb := out[job]
		if !ok || rank < 0 || jb == nil {
			continue
		}
		p.Rank = rank
		jb.Points = append(jb.Points, p)
	}
	return out
}

// start launches the registration socket, the profiler and the OS
// collector as configured. A source that cannot start is logged once and
// left out: the agent keeps shipping what it has (arch rule 7).
func (s *sysomSide) start(ctx context.Context, wg *sync.WaitGroup, newProf func(cpuprof.Config) (stackSource, error), newOS func(aosstat.Config) (osSource, error), newGPU func() (gpu.Source, error)) {
	cfg := s.cfg
	if cfg.Socket != "" && s.reg == nil {
		srv, err := register.Listen(cfg.Socket, cfg.Log)
		if err != nil {
			cfg.Log.Warn("registration socket unavailable; stacks and OS counters are not attributed to ranks", "socket", cfg.Socket, "err", err)
		} else {
			s.reg = srv
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer srv.Close()
				if err := srv.Serve(ctx); err != nil && ctx.Err() == nil {
					cfg.Log.Warn("registration socket stopped", "err", err)
				}
			}()
		}
	}
	if cfg.ProfileOn {
		pc := cfg.Profile
		pc.RankOf, pc.Emit, pc.Reveal, pc.SampleSelf = s.rankOf, s.emitStacks, s.reveal, true
		if pc.Log == nil {
			pc.Log = cfg.Log
		}
		p, err := newProf(pc)
		switch {
		case errors.Is(err, cpuprof.ErrUnsupported):
			cfg.Log.Warn("CPU profiling unsupported here; continuing without stacks", "reason", err)
		case err != nil:
			cfg.Log.Warn("CPU profiler failed to start; continuing without stacks", "err", err)
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer p.Close()
				if err := p.Run(ctx); err != nil && ctx.Err() == nil {
					cfg.Log.Warn("CPU profiler stopped", "err", err)
				}
			}()
		}
	}
	if cfg.OSOn {
		oc := cfg.OS
		if oc.Ranks == nil {
			oc.Ranks = s.ranks
		}
		if oc.Log == nil {
			oc.Log = cfg.Log
		}
		c, err := newOS(oc)
		if err != nil {
			cfg.Log.Warn("OS collector failed to start; continuing without OS counters", "err", err)
		} else {
			g, gerr := newGPU()
			if gerr != nil {
				cfg.Log.Info("GPU counters unavailable; reported as absent", "reason", gerr)
			}
			every := oc.Interval
			if every <= 0 {
				every = 5 * time.Second
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if g != nil {
					defer g.Close()
				}
				tick := time.NewTicker(every)
				defer tick.Stop()
				for {
					now := time.Now()
					b := c.Collect(now)
					if b != nil && g != nil {
						pts, abs := g.Points(now)
						b.Points = append(b.Points, pts[:min(len(pts), max(0, osstat.MaxPoints-len(b.Points)))]...)
						b.Absent = append(b.Absent, abs...)
					}
					s.emitOS(b)
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.syms.run(ctx)
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.flush(ctx)
			}
		}
	}()
}

// flush ships both queues.
func (s *sysomSide) flush(ctx context.Context) {
	s.stacks.flush(ctx)
	s.os.flush(ctx)
}

// symUploader asks the server once per Build-ID whether it has the
// symbols and uploads the file when it does not (§3.4). One upload at a
// time, on its own goroutine: never in the drain's way.
type symUploader struct {
	server, token string
	client        *http.Client // no overall timeout: uploads are long
	headTimeout   time.Duration
	partTimeout   time.Duration
	chunk         int64
	root          string // filesystem root ("/"; tests use a temp dir)
	debugDir      string // "/usr/lib/debug"
	log           *slog.Logger
	m             *profMetrics
	now           func() time.Time

	ch    chan symReq
	mu    sync.Mutex
	state map[string]symState
}

type symReq struct {
	id, path     string
	pid          int
	start, limit uint64 // the mapping, for /proc/<pid>/map_files
	// cred: the registrant whose job sampled the mapping; the file is
	// opened with its credentials (nil: the agent's, -profile-all).
	cred *register.Cred
}

// symState: done (asked and settled) or when to ask again.
type symState struct {
	done    bool
	retryAt time.Time
	fails   int
}

const (
	// unreadableFails marks a Build-ID whose file the registrant could
	// not read; it is asked again after unreadableRetry, not the backoff.
	unreadableFails = 1 << 20
	unreadableRetry = 10 * time.Minute
	// symChunk is one upload part (contract §4: at most 64 MiB).
	symChunk = 64 << 20
	// maxSymState bounds the Build-IDs remembered.
	maxSymState = 1 << 16
)

func newSymUploader(cfg *Config, m *profMetrics) *symUploader {
	var tr http.RoundTripper
	if cfg.Client != nil {
		tr = cfg.Client.Transport
	}
	return &symUploader{server: cfg.Server, token: cfg.Token, client: &http.Client{Transport: tr},
		headTimeout: cfg.RequestTimeout, partTimeout: 5 * time.Minute, chunk: symChunk, root: "/", debugDir: "/usr/lib/debug",
		log: cfg.Log, m: m, now: time.Now, ch: make(chan symReq, 256), state: map[string]symState{}}
}

// sawBatch notes the batch's Build-IDs; new ones are queued without
// blocking (a full queue: asked again when next seen).
func (u *symUploader) sawBatch(b *stack.Batch, credOf func(rank int) *register.Cred) {
	pids := make([]int, len(b.Mappings))
	creds := make([]*register.Cred, len(b.Mappings))
	for i := range b.Samples {
		for _, fr := range b.Samples[i].Frames {
			if fr.Kind == stack.Native && fr.Mapping >= 0 && int(fr.Mapping) < len(pids) && pids[fr.Mapping] == 0 {
				pids[fr.Mapping] = b.Samples[i].PID
				creds[fr.Mapping] = credOf(b.Samples[i].Rank)
			}
		}
	}
	now := u.now()
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, m := range b.Mappings {
		if m.BuildID == "" || m.Path == "" || pids[i] == 0 {
			continue
		}
		st, known := u.state[m.BuildID]
		if known && (st.done || now.Before(st.retryAt)) {
			continue
		}
		if !known && len(u.state) >= maxSymState {
			continue
		}
		select {
		case u.ch <- symReq{id: m.BuildID, path: m.Path, pid: pids[i], start: m.Start, limit: m.Limit, cred: creds[i]}:
			st.retryAt = now.Add(time.Hour) // in flight; settle sets the outcome
			u.state[m.BuildID] = st
		default:
		}
	}
}

func (u *symUploader) settle(id string, done bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.state[id]
	st.done = done
	if !done {
		st.fails++
		d := backoff(st.fails + 4) // ≥ 4 s, up to a minute
		if st.fails > unreadableFails {
			d = unreadableRetry
		}
		st.retryAt = u.now().Add(d)
	}
	u.state[id] = st
}

func (u *symUploader) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-u.ch:
			u.settle(r.id, u.handle(ctx, r))
		}
	}
}

// handle asks and uploads one Build-ID; done false means ask again later.
func (u *symUploader) handle(ctx context.Context, r symReq) bool {
	base := u.server + "/api/v1/symbols/" + url.PathEscape(r.id)
	err := postBody(ctx, u.client, u.token, u.headTimeout, http.MethodHead, base, "", nil)
	var st *errStatus
	switch {
	case err == nil:
		u.m.symUploads.WithLabelValues("present").Inc()
		return true
	case errors.As(err, &st) && st.code == http.StatusNotFound:
	case errors.As(err, &st):
		u.log.Warn("the server refused a symbol query; not uploading", "build_id", r.id, "err", err)
		u.m.symUploads.WithLabelValues("failed").Inc()
		return true
	default:
		return false
	}
	// Opened as the registrant: a binary it could not read itself is
	// never uploaded into its job's reach (issue 16 item 10).
	fh, err := openAs(r.cred, func() (*os.File, error) { return u.locate(r) })
	switch {
	case errors.Is(err, os.ErrPermission) || errors.Is(err, errCred):
		u.log.Debug("the registrant cannot read this Build-ID's file; not uploading it", "build_id", r.id, "path", r.path, "err", err)
		u.m.symUploads.WithLabelValues("unreadable").Inc()
		// Another job's registrant may read it: ask again, not soon.
		u.mu.Lock()
		st := u.state[r.id]
		st.fails = max(st.fails, unreadableFails)
		u.state[r.id] = st
		u.mu.Unlock()
		return false
	case err != nil:
		u.log.Debug("no local file for a Build-ID; its frames stay unnamed unless the server has symbols", "build_id", r.id, "path", r.path, "err", err)
		u.m.symUploads.WithLabelValues("missing").Inc()
		return true
	}
	defer fh.Close()
	path := fh.Name()
	if err := u.upload(ctx, base, fh); err != nil {
		if errors.As(err, &st) {
			u.log.Warn("the server refused a symbol upload", "build_id", r.id, "file", path, "err", err)
			u.m.symUploads.WithLabelValues("failed").Inc()
			return true
		}
		return false
	}
	u.log.Info("uploaded symbols", "build_id", r.id, "file", path)
	u.m.symUploads.WithLabelValues("uploaded").Inc()
	return true
}

// locate opens the file to upload for r: its separate debug file (full
// symbol tables) if one is installed, else the mapped file itself. The
// path comes from another process, which may have made it (or the
// debug path) a symlink to a host secret or a FIFO, or swap it under us:
// so the mapped inode is taken from /proc/<pid>/map_files, else opened
// confined to the process's root (elfinfo.OpenInRoot, no symlinks, no
// blocking, regular files only); every candidate must carry the
// Build-ID; and the fd that was checked is the one uploaded.
func (u *symUploader) locate(r symReq) (*os.File, error) {
	proc := filepath.Join(u.root, "proc", strconv.Itoa(r.pid))
	type cand struct {
		open func() (*os.File, error)
		root string // where the debug file is looked up
	}
	var cands []cand
	if r.limit > r.start {
		cands = append(cands, cand{func() (*os.File, error) {
			return elfinfo.OpenProc(filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", r.start, r.limit)))
		}, filepath.Join(proc, "root")})
	}
	for _, root := range []string{filepath.Join(proc, "root"), u.root} {
		cands = append(cands, cand{func() (*os.File, error) { return elfinfo.OpenInRoot(root, r.path, false) }, root})
	}
	var lastErr, permErr error = errors.New("not found"), nil
	for _, c := range cands {
		fh, err := c.open()
		if err != nil {
			lastErr = err
			if errors.Is(err, os.ErrPermission) {
				permErr = err
			}
			continue
		}
		f, err := elf.NewFile(fh)
		if err != nil {
			fh.Close()
			lastErr = err
			continue
		}
		if id, err := elfinfo.BuildID(f); err != nil || id != r.id {
			fh.Close()
			lastErr = fmt.Errorf("%s has Build-ID %q, want %s", fh.Name(), id, r.id)
			continue
		}
		if dbg, _, _ := elfinfo.OpenDebugFile(c.root, r.path, f, u.debugDir); dbg != nil {
			fh.Close()
			return dbg, nil
		}
		return fh, nil
	}
	// The binary may be gone while its debug file is installed.
	if p, err := elfinfo.BuildIDPath(u.debugDir, r.id); err == nil {
		if fh, err := elfinfo.OpenInRoot(u.root, p, true); err == nil {
			if elfinfo.HasBuildID(fh, r.id) {
				return fh, nil
			}
			fh.Close()
		}
	}
	if permErr != nil {
		return nil, permErr // denied somewhere: not "missing"
	}
	return nil, lastErr
}

// upload sends the open file f in chunk-sized parts (0-based part numbers).
func (u *symUploader) upload(ctx context.Context, base string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return &errStatus{msg: fmt.Sprintf("%s: empty or unreadable", f.Name())}
	}
	parts := (fi.Size() + u.chunk - 1) / u.chunk
	for i := int64(0); i < parts; i++ {
		n := min(u.chunk, fi.Size()-i*u.chunk)
		q := fmt.Sprintf("%s?part=%d&parts=%d", base, i, parts)
		body := io.NewSectionReader(f, i*u.chunk, n)
		if err := postBody(ctx, u.client, u.token, u.partTimeout, http.MethodPost, q, "application/octet-stream", body); err != nil {
			return err
		}
	}
	return nil
}
