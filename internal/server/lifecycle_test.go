package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/store"
)

// freeSpace is an injectable free-space reading for the store.
type freeSpace struct{ n atomic.Int64 }

func (f *freeSpace) fn(string) (uint64, error) { return uint64(f.n.Load()), nil }

func openStoreOpts(t testing.TB, dir string, o store.Options) *store.Store {
	t.Helper()
	o.Logger = quiet
	st, err := store.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// D7: with the disk full, ingest and registration answer 507 with
// Retry-After, reads keep working, the metrics say so, and ingest works
// again by itself once space returns. Before, the store panicked and the
// process exited.
func TestD7_DiskFull507(t *testing.T) {
	fs := &freeSpace{}
	fs.n.Store(1 << 40)
	st := openStoreOpts(t, t.TempDir(), store.Options{MinFreeBytes: 1 << 30, FreeSpace: fs.fn})
	_, ts := start(t, st, Config{})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	url := ts.URL + "/api/v1/jobs/j/vectors"
	if r := do(t, "POST", url, jsonType, jsonBatch(t, vectors(2, 0, 20))); r.status != 200 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	fs.n.Store(100 << 20)
	time.Sleep(1100 * time.Millisecond) // the free-space reading is cached for 1 s
	r := do(t, "POST", url, jsonType, jsonBatch(t, vectors(2, 20, 21)))
	if r.status != http.StatusInsufficientStorage || r.header.Get("Retry-After") == "" || !strings.Contains(r.errBody(t).Error, "disk full") {
		t.Fatalf("ingest on a full disk: %d Retry-After=%q %s, want 507 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := do(t, "PUT", ts.URL+"/api/v1/jobs/k", jsonType, mustJSON(t, testJob("k", 2))); r.status != http.StatusInsufficientStorage {
		t.Fatalf("register on a full disk: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/j", "/api/v1/jobs/j/report", "/api/v1/jobs/j/export", "/healthz"} {
		if r := do(t, "GET", ts.URL+path, "", nil); r.status != 200 {
			t.Fatalf("GET %s on a full disk: %d %.200s", path, r.status, r.body)
		}
	}
	if v := metric(t, ts.URL, "laggard_store_disk_full"); v != "1" {
		t.Fatalf("laggard_store_disk_full %s, want 1", v)
	}
	if v := metric(t, ts.URL, "laggard_store_free_bytes"); v != "1.048576e+08" {
		t.Fatalf("laggard_store_free_bytes %s", v)
	}
	fs.n.Store(1 << 40)
	time.Sleep(1100 * time.Millisecond)
	if r := do(t, "POST", url, jsonType, jsonBatch(t, vectors(2, 20, 21))); r.status != 200 {
		t.Fatalf("ingest after space returned: %d %s", r.status, r.body)
	}
	if v := metric(t, ts.URL, "laggard_store_disk_full"); v != "0" {
		t.Fatalf("laggard_store_disk_full %s after recovery, want 0", v)
	}
}

// warnCounter counts the log lines of a server under test that say
// msg="request failed".
type warnCounter struct{ n atomic.Int64 }

func (c *warnCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(strings.Count(string(p), `msg="request failed"`)))
	return len(p), nil
}

// Issue 16 item 12: while every write answers 507, /healthz said "ok" and
// each 507 logged its own WARN line (1,211 in 10 s). Now /healthz answers
// "degraded" (still 200: reads work and a restart frees no disk), the
// WARN lines are throttled with a count of the ones they stand for, and
// both recover with the disk.
func TestDiskFull_HealthzDegradedAndWarnThrottled(t *testing.T) {
	fs := &freeSpace{}
	fs.n.Store(1 << 40)
	st := openStoreOpts(t, t.TempDir(), store.Options{MinFreeBytes: 1 << 30, FreeSpace: fs.fn})
	var warns warnCounter
	_, ts := start(t, st, Config{Logger: slog.New(slog.NewTextHandler(&warns, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	health := func() resp {
		t.Helper()
		return do(t, "GET", ts.URL+"/healthz", "", nil)
	}
	if r := health(); r.status != 200 || string(r.body) != "ok\n" {
		t.Fatalf("healthz with space: %d %q", r.status, r.body)
	}
	fs.n.Store(100 << 20)
	time.Sleep(1100 * time.Millisecond) // the free-space reading is cached for 1 s
	const posts = 50
	for i := range posts {
		r := do(t, "POST", ts.URL+"/api/v1/jobs/j/vectors", jsonType, jsonBatch(t, vectors(2, int64(i), int64(i+1))))
		if r.status != http.StatusInsufficientStorage {
			t.Fatalf("post %d on a full disk: %d %s", i, r.status, r.body)
		}
	}
	r := health()
	if r.status != 200 || !strings.HasPrefix(string(r.body), "degraded: ") || !strings.Contains(string(r.body), "disk full") ||
		r.header.Get("Laggard-Health") != "degraded" {
		t.Errorf("healthz while writes get 507: %d %q %q, want 200 \"degraded: … disk full …\"", r.status, r.body, r.header.Get("Laggard-Health"))
	}
	if n := warns.n.Load(); n != 1 {
		t.Errorf("%d posts answered 507 logged %d WARN lines, want 1 (throttled)", posts, n)
	}
	fs.n.Store(1 << 40)
	time.Sleep(1100 * time.Millisecond)
	if r := health(); string(r.body) != "ok\n" {
		t.Errorf("healthz once space returned: %q, want ok", r.body)
	}
}

// DELETE /api/v1/jobs/{id} removes the job and its vectors (204), is 404
// for an unknown job, the background diagnosis forgets it, and the id can
// be registered afresh.
func TestDeleteJobAPI(t *testing.T) {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	s, ts := start(t, st, Config{})
	for _, id := range []string{"gone", "kept"} {
		register(t, ts.URL, testJob(id, 2), http.StatusCreated)
		if r := do(t, "POST", ts.URL+"/api/v1/jobs/"+id+"/vectors", jsonType, jsonBatch(t, vectors(2, 0, 40))); r.status != 200 {
			t.Fatalf("ingest: %d %s", r.status, r.body)
		}
	}
	s.Detector().EvaluateOnce(context.Background())
	if _, ok := s.Detector().Latest("gone"); !ok {
		t.Fatal("no diagnosis before delete")
	}
	if r := do(t, "DELETE", ts.URL+"/api/v1/jobs/gone", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if _, ok := s.Detector().Latest("gone"); ok {
		t.Error("the diagnosis of a deleted job is still shown")
	}
	for _, path := range []string{"/api/v1/jobs/gone", "/api/v1/jobs/gone/report", "/api/v1/jobs/gone/export"} {
		if r := do(t, "GET", ts.URL+path, "", nil); r.status != 404 {
			t.Errorf("GET %s after delete: %d", path, r.status)
		}
	}
	if r := do(t, "DELETE", ts.URL+"/api/v1/jobs/gone", "", nil); r.status != 404 {
		t.Errorf("second DELETE: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", ts.URL+"/api/v1/jobs/gone/vectors", jsonType, jsonBatch(t, vectors(2, 40, 41))); r.status != 404 {
		t.Errorf("ingest to a deleted job: %d %s", r.status, r.body)
	}
	if v := metric(t, ts.URL, `laggard_retention_deleted_jobs_total{reason="api"}`); v != "1" {
		t.Errorf("deleted_jobs_total{reason=api} %s", v)
	}
	// The deleted job's per-job series are gone; the other job's stay.
	if body := string(do(t, "GET", ts.URL+"/metrics", "", nil).body); strings.Contains(body, `job="gone"`) {
		t.Errorf("the deleted job's per-job series are still exported")
	}
	if v := metric(t, ts.URL, `laggard_ingest_vectors_total{encoding="json",job="kept"}`); v != "80" {
		t.Errorf("the kept job's ingest series: %q, want 80", v)
	}
	if got, _ := st.Stats("kept"); got.Vectors != 80 {
		t.Errorf("the other job has %d vectors", got.Vectors)
	}
	register(t, ts.URL, testJob("gone", 2), http.StatusCreated)
	if got, _ := st.Stats("gone"); got.Vectors != 0 {
		t.Errorf("re-registered job starts with %d vectors", got.Vectors)
	}
}

// Retention deletes jobs idle longer than RetentionAge, and the least
// recently written jobs while the store is above RetentionSize — never a
// job written within RetentionMinIdle.
func TestRetention(t *testing.T) {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	s, ts := start(t, st, Config{Lifecycle: LifecycleConfig{RetentionAge: time.Hour, Interval: time.Hour}})
	for _, id := range []string{"a", "b", "c"} {
		register(t, ts.URL, testJob(id, 2), http.StatusCreated)
		if r := do(t, "POST", ts.URL+"/api/v1/jobs/"+id+"/vectors", jsonType, jsonBatch(t, vectors(2, 0, 10))); r.status != 200 {
			t.Fatalf("ingest: %d %s", r.status, r.body)
		}
		time.Sleep(5 * time.Millisecond) // distinct last-write times
	}
	l := s.life
	base := time.Now()
	l.now = func() time.Time { return base.Add(30 * time.Minute) }
	l.round(context.Background())
	if u, _ := st.Usage(); u.Jobs != 3 {
		t.Fatalf("%d jobs after a round within the age, want 3", u.Jobs)
	}
	// b written again: only a and c are older than an hour then.
	if r := do(t, "POST", ts.URL+"/api/v1/jobs/b/vectors", jsonType, jsonBatch(t, vectors(2, 10, 11))); r.status != 200 {
		t.Fatal(r.status)
	}
	ages, _ := st.JobAges()
	bLast := ages[len(ages)-1].Last()
	l.now = func() time.Time { return bLast.Add(59 * time.Minute) }
	// Fake the clock so a and c are just over the age and b under it.
	l.cfg.RetentionAge = bLast.Add(59*time.Minute).Sub(ages[1].Last()) - time.Millisecond
	l.round(context.Background())
	var left []string
	if jobs, err := st.Jobs(); err == nil {
		for _, j := range jobs {
			left = append(left, j.ID)
		}
	}
	if !slices.Equal(left, []string{"b"}) {
		t.Fatalf("after age retention jobs %v, want [b] (ages %+v)", left, ages)
	}
	if v := metric(t, ts.URL, `laggard_retention_deleted_jobs_total{reason="age"}`); v != "2" {
		t.Errorf("deleted_jobs_total{reason=age} %s, want 2", v)
	}

	// Size: a limit below the store deletes idle jobs, oldest first, and
	// keeps one written within RetentionMinIdle.
	register(t, ts.URL, testJob("d", 2), http.StatusCreated)
	l.cfg.RetentionAge, l.cfg.RetentionSize, l.cfg.RetentionMinIdle = 0, 1, time.Hour
	l.now = func() time.Time { return bLast.Add(30 * time.Minute) } // b is 30 min old, d newer
	l.round(context.Background())
	if u, _ := st.Usage(); u.Jobs != 2 {
		t.Fatalf("size retention deleted jobs written within RetentionMinIdle: %d left", u.Jobs)
	}
	l.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	l.round(context.Background())
	if u, _ := st.Usage(); u.Jobs != 0 {
		t.Fatalf("%d jobs left above the size limit", u.Jobs)
	}
	if v := metric(t, ts.URL, `laggard_retention_deleted_jobs_total{reason="size"}`); v != "2" {
		t.Errorf("deleted_jobs_total{reason=size} %s, want 2", v)
	}
	for _, m := range []string{"laggard_store_size_bytes", "laggard_store_jobs"} {
		metric(t, ts.URL, m) // exposed
	}
}

// D9: the job list is paged by default (a bounded page, a cursor), a page
// size above the maximum is refused, and the job count is bounded with a
// clear 507.
func TestD9_JobListPagedAndJobCountBounded(t *testing.T) {
	st := openStoreOpts(t, t.TempDir(), store.Options{MaxJobs: 7})
	_, ts := start(t, st, Config{})
	for i := range 7 {
		register(t, ts.URL, testJob(fmt.Sprintf("j%02d", i), 2), http.StatusCreated)
	}
	r := do(t, "PUT", ts.URL+"/api/v1/jobs/j99", jsonType, mustJSON(t, testJob("j99", 2)))
	if r.status != http.StatusInsufficientStorage || !strings.Contains(r.errBody(t).Error, "limit") {
		t.Fatalf("job over the count limit: %d %s, want 507 naming the limit", r.status, r.body)
	}
	var got []string
	after := ""
	for range 10 {
		r := do(t, "GET", ts.URL+"/api/v1/jobs?limit=3&after="+after, "", nil)
		var page struct {
			Jobs []struct{ ID string } `json:"jobs"`
			Next string                `json:"next"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.Jobs) > 3 {
			t.Fatalf("page: %d %s", r.status, r.body)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if len(got) != 7 || !slices.IsSorted(got) {
		t.Fatalf("paged listing %v", got)
	}
	if r := do(t, "GET", ts.URL+"/api/v1/jobs?limit=1000000", "", nil); r.status != 400 || r.errBody(t).Field != "limit" {
		t.Fatalf("huge page: %d %s", r.status, r.body)
	}
}

// slowStore is a real store whose commits take at least delay, like a
// slow disk.
type slowStore struct {
	*store.Store
	delay time.Duration
}

func (s slowStore) AppendMany(bs []store.Batch) error {
	time.Sleep(s.delay)
	return s.Store.AppendMany(bs)
}

// D2 over HTTP: while one job floods the server with big batches through
// a slow store, another job's 1-vector posts are never shed and are
// acknowledged promptly. Before, such a post waited 94.8 s in the probe.
func TestD2_FairShareHTTP(t *testing.T) {
	st := openStoreOpts(t, t.TempDir(), store.Options{NoSync: true})
	_, ts := start(t, slowStore{st, 10 * time.Millisecond}, Config{})
	register(t, ts.URL, testJob("flood", 8), http.StatusCreated)
	register(t, ts.URL, testJob("small", 2), http.StatusCreated)
	big := protoBatch(t, vectors(8, 0, 2048)) // 16,384 vectors
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var shed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", ts.URL+"/api/v1/jobs/flood/vectors", strings.NewReader(string(big)))
				req.Header.Set("Content-Type", protoType)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				res.Body.Close()
				if res.StatusCode == http.StatusTooManyRequests {
					shed.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(300 * time.Millisecond) // the flood builds its backlog
	var lat []time.Duration
	for i := range 40 {
		body := jsonBatch(t, vectors(2, int64(i), int64(i)+1)[:1])
		start := time.Now()
		r := do(t, "POST", ts.URL+"/api/v1/jobs/small/vectors", jsonType, body)
		lat = append(lat, time.Since(start))
		if r.status != 200 {
			t.Fatalf("small post %d during the flood: %d %s", i, r.status, r.body)
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("small-job post latency during the flood: p50 %v p99 %v max %v (flood posts shed: %d); commits: %s s in %s",
		p50, p99, lat[len(lat)-1], shed.Load(), metric(t, ts.URL, "laggard_ingest_commit_seconds_sum"), metric(t, ts.URL, "laggard_ingest_commit_seconds_count"))
	// The goal is p99 < 100 ms (measured 84-108 ms on a loaded 2-core
	// machine); the bound is generous for CI. The old FIFO queue gave
	// p99 414 ms here, and seconds with a deeper backlog.
	bound := 250 * time.Millisecond
	if raceOn {
		bound = 2 * time.Second
	}
	if p99 > bound {
		t.Fatalf("p99 %v of the small job's posts while another job floods", p99)
	}
}
