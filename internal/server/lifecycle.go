package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/store"
)

// LifecycleConfig is data retention and the background compactor. Zero
// fields take the defaults; with neither retention set nothing is
// deleted automatically (deleting a job through the API still reclaims
// its space).
type LifecycleConfig struct {
	// RetentionAge deletes jobs whose last ingest (or registration, if
	// none) is older (-retention-age; 0 keeps jobs forever).
	RetentionAge time.Duration
	// RetentionSize deletes the least recently written jobs while the
	// store takes more disk than this (-retention-size bytes; 0: no
	// limit). Jobs written within RetentionMinIdle are never deleted for
	// size, so a live job is not lost to a limit set too small.
	RetentionSize    int64
	RetentionMinIdle time.Duration
	// Interval between compactor rounds (default 1m): apply retention,
	// then compact deleted jobs' key ranges so their space is returned.
	Interval time.Duration
}

func (c *LifecycleConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.RetentionMinIdle <= 0 {
		c.RetentionMinIdle = 10 * time.Minute
	}
}

// lifecycleStore is what the compactor needs beyond Store; *store.Store
// implements it. Fakes that do not are served without retention.
type lifecycleStore interface {
	Usage() (store.Usage, error)
	JobAges() ([]store.JobAge, error)
	JobDiskBytes(id string) (uint64, error)
	Reclaim() (int, error)
}

// lifecycle runs retention and reclaims deleted jobs' space.
type lifecycle struct {
	cfg    LifecycleConfig
	st     lifecycleStore
	cat    *catalog.Catalog
	forget func(job string) // drops a deleted job's diagnosis and per-job series
	log    *slog.Logger
	now    func() time.Time

	deleted *prometheus.CounterVec
	kick    chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	once    sync.Once
}

// startLifecycle registers the store metrics and starts the compactor
// when st supports it; called by New. The compactor stops in Close.
func (s *Server) startLifecycle(st Store, cat *catalog.Catalog) error {
	ls, ok := st.(lifecycleStore)
	if !ok {
		return nil
	}
	cfg := s.cfg.Lifecycle
	cfg.setDefaults()
	l := &lifecycle{cfg: cfg, st: ls, cat: cat, forget: s.forgetJob, log: s.log.With("component", "retention"), now: time.Now,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	var err error
	if l.deleted, err = newReasonCounter(s.reg, "retention", "deleted_jobs_total",
		"Jobs deleted, by reason: age (-retention-age), size (-retention-size) or api (DELETE /api/v1/jobs/{id}).",
		"age", "size", "api"); err != nil {
		return err
	}
	if err := s.reg.Register(storeCollector{ls}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	s.life = l
	go l.run(ctx)
	return nil
}

// forgetJob drops what the server keeps about a deleted job: its
// diagnosis and its per-job metric series.
func (s *Server) forgetJob(job string) {
	s.detector.Forget(job)
	s.apiMetrics.ForgetJob(job)
	if s.greyhound != nil {
		s.greyhound.Forget(job) // its series; the keyspace went with the job (store.DeleteJob)
	}
	if s.kair != nil {
		s.kair.Forget(job) // its cached open capture and reports
	}
	if s.incidents != nil {
		s.incidents.Forget(job) // its queued evidence, cached state and series; its keyspaces went with the job
	}
}

// onDelete is the API's OnDelete: the diagnosis forgets the job at once
// and the compactor reclaims its space soon.
func (s *Server) onDelete(job string) {
	s.forgetJob(job)
	if s.life != nil {
		s.life.deleted.WithLabelValues("api").Inc()
		select {
		case s.life.kick <- struct{}{}:
		default:
		}
	}
}

// stopLifecycle stops the compactor and waits for its round to end.
func (s *Server) stopLifecycle() {
	if s.life == nil {
		return
	}
	s.life.once.Do(s.life.stop)
	<-s.life.done
}

func (l *lifecycle) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.round(ctx)
		case <-l.kick:
			l.reclaim()
		}
	}
}

// round applies retention, then reclaims space.
func (l *lifecycle) round(ctx context.Context) {
	if l.cfg.RetentionAge > 0 || l.cfg.RetentionSize > 0 {
		l.retain(ctx)
	}
	l.reclaim()
}

func (l *lifecycle) retain(ctx context.Context) {
	ages, err := l.st.JobAges()
	if err != nil {
		l.log.Warn("retention: listing jobs", "err", err)
		return
	}
	now := l.now()
	kept := ages[:0]
	for _, a := range ages {
		if ctx.Err() != nil {
			return
		}
		if l.cfg.RetentionAge > 0 && now.Sub(a.Last()) > l.cfg.RetentionAge {
			l.delete(a, now.Add(-l.cfg.RetentionAge), "age", "idle_for", now.Sub(a.Last()).Round(time.Second).String())
			continue
		}
		kept = append(kept, a)
	}
	if l.cfg.RetentionSize <= 0 {
		return
	}
	u, err := l.st.Usage()
	if err != nil {
		return
	}
	size := int64(u.DiskBytes)
	for _, a := range kept { // least recently written first
		if size <= l.cfg.RetentionSize || ctx.Err() != nil {
			return
		}
		if now.Sub(a.Last()) < l.cfg.RetentionMinIdle {
			l.log.Warn("retention: store above -retention-size, but every remaining job was written recently; keeping them",
				"size_bytes", size, "limit_bytes", l.cfg.RetentionSize, "min_idle", l.cfg.RetentionMinIdle)
			return
		}
		est, _ := l.st.JobDiskBytes(a.ID)
		if l.delete(a, now.Add(-l.cfg.RetentionMinIdle), "size", "job_bytes", est, "store_bytes", size) {
			size -= int64(est)
		}
	}
}

// delete removes one job, logging why, unless it was written after
// idleSince (its age was read before; it may have resumed since).
func (l *lifecycle) delete(a store.JobAge, idleSince time.Time, reason string, attrs ...any) bool {
	deleted, err := l.cat.DeleteIdle(a.ID, idleSince)
	if err != nil {
		l.log.Warn("retention: deleting job", "job", a.ID, "reason", reason, "err", err)
		return false
	}
	if !deleted {
		l.log.Info("retention: job written again since it was found idle; kept", "job", a.ID, "reason", reason)
		return false
	}
	l.forget(a.ID)
	l.deleted.WithLabelValues(reason).Inc()
	l.log.Info("retention: job deleted", append([]any{"job", a.ID, "reason", reason, "last_write", a.Last().UTC().Format(time.RFC3339)}, attrs...)...)
	return true
}

func (l *lifecycle) reclaim() {
	start := l.now()
	n, err := l.st.Reclaim()
	if err != nil {
		l.log.Warn("reclaiming deleted jobs' space", "err", err)
	}
	if n > 0 {
		l.log.Info("reclaimed deleted jobs' space", "jobs", n, "took", l.now().Sub(start).Round(time.Millisecond))
	}
}

// storeCollector exports the store's size and free-space figures, read
// once per scrape.
type storeCollector struct{ st lifecycleStore }

var (
	descStoreSize = prometheus.NewDesc("laggard_store_size_bytes", "Disk space the store takes (sstables, WAL, MANIFEST).", nil, nil)
	descStoreJobs = prometheus.NewDesc("laggard_store_jobs", "Registered jobs.", nil, nil)
	descStoreFree = prometheus.NewDesc("laggard_store_free_bytes", "Free space on the store's filesystem (-1 unknown).", nil, nil)
	descDiskFull  = prometheus.NewDesc("laggard_store_disk_full", "1 while writes are refused (507) for lack of disk space, else 0.", nil, nil)
)

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStoreSize
	ch <- descStoreJobs
	ch <- descStoreFree
	ch <- descDiskFull
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	u, err := c.st.Usage()
	if err != nil {
		return // closed: no figures
	}
	full := 0.0
	if u.DiskFull {
		full = 1
	}
	ch <- prometheus.MustNewConstMetric(descStoreSize, prometheus.GaugeValue, float64(u.DiskBytes))
	ch <- prometheus.MustNewConstMetric(descStoreJobs, prometheus.GaugeValue, float64(u.Jobs))
	ch <- prometheus.MustNewConstMetric(descStoreFree, prometheus.GaugeValue, float64(u.FreeBytes))
	ch <- prometheus.MustNewConstMetric(descDiskFull, prometheus.GaugeValue, full)
}
