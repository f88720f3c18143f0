package osstat

import (
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// Every value falls in the range of its bucket, buckets are monotonic,
// and a bucket is at most 1/8 of its lower bound wide (±6%).
func TestBucketsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prev := 0
	for i := range 200000 {
		var d uint64
		if i < 5000 {
			d = uint64(i)
		} else {
			d = r.Uint64() >> r.IntN(64)
		}
		b := bucketOf(d)
		lo, hi := bucketRange(b)
		if b >= nBuckets || d < lo || (d >= hi && hi != 0) {
			t.Fatalf("d=%d in bucket %d = [%d, %d)", d, b, lo, hi)
		}
		if lo >= sub && float64(hi-lo) > float64(lo)/8+1e-9 {
			t.Fatalf("bucket %d [%d, %d) wider than 1/8", b, lo, hi)
		}
		if i < 5000 {
			if b < prev {
				t.Fatalf("bucketOf not monotonic at %d", d)
			}
			prev = b
		}
	}
	if b := bucketOf(^uint64(0)); b >= nBuckets {
		t.Fatalf("max uint64 in bucket %d", b)
	}
}

func TestQuantile(t *testing.T) {
	c := make([]uint64, nBuckets)
	c[bucketOf(1000)] = 99
	c[bucketOf(1_000_000)] = 1
	p99, ok := quantile(c, 0.99)
	if !ok || p99 < 900 || p99 > 1100 {
		t.Fatalf("p99 = %v", p99)
	}
	p100, _ := quantile(c, 1)
	if p100 < 0.9e6 || p100 > 1.1e6 {
		t.Fatalf("p100 = %v", p100)
	}
	if _, ok := quantile(make([]uint64, nBuckets), 0.99); ok {
		t.Fatal("quantile of an empty histogram")
	}
}

// TestLiveSchedLatency loads the BPF program on the running kernel: two
// busy loops pinned to one CPU take turns, so each waits runnable for
// roughly a scheduler slice at every switch.
func TestLiveSchedLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("live BPF test skipped in -short")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("taskset not installed: cannot pin the busy loops")
	}
	var pids []int
	for range 2 {
		cmd := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot start a pinned busy loop: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pids = append(pids, cmd.Process.Pid)
	}
	c, err := New(Config{SchedTracepoints: true, Ranks: func() map[int]int { return map[int]int{pids[0]: 0, pids[1]: 1} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.tp == nil {
		t.Skipf("kernel refused the sched tracepoint program: %s", c.tpWhy)
	}
	time.Sleep(100 * time.Millisecond)
	c.Collect(time.Now())
	time.Sleep(1500 * time.Millisecond)
	b := c.Collect(time.Now())
	if b == nil {
		t.Fatal("no batch")
	}
	for _, a := range b.Absent {
		if a.Source == osstat.SrcSchedTP {
			t.Fatalf("sched tracepoints absent: %s", a.Reason)
		}
	}
	for rank := range 2 {
		p99, ok1 := find(b, osstat.RunQueueP99Ms, rank, -1, "")
		mx, ok2 := find(b, osstat.RunQueueMaxMs, rank, -1, "")
		wait, _ := find(b, osstat.RunQueueWait, rank, -1, "")
		t.Logf("rank %d: runq_latency p99 %.3f ms, max %.3f ms, runq_wait %.3f s/s", rank, p99, mx, wait)
		if !ok1 || !ok2 {
			t.Fatalf("rank %d: no latency points: %+v", rank, b.Points)
		}
		if p99 <= 0.05 || p99 > 2000 || mx < p99*0.9 {
			t.Errorf("rank %d: p99 %.3f ms, max %.3f ms out of bounds", rank, p99, mx)
		}
	}
	// An unregistered process (this test) gets no latency points.
	for _, p := range b.Points {
		if strings.HasPrefix(p.Name, "runq_latency") && p.Rank > 1 {
			t.Errorf("latency point for an unknown rank: %+v", p)
		}
	}
}

// TestSlotTableReuse (review finding 8): over an agent's life far more
// ranks than MAX_SLOTS come and go; slots of gone ranks are reused (and
// reported for zeroing), so new jobs keep being measured.
func TestSlotTableReuse(t *testing.T) {
	var st slotTable
	seen := map[uint32]bool{}
	for job := 0; job < 100; job++ { // 100 eight-rank jobs, one after another
		active := map[int]bool{}
		for r := 0; r < 8; r++ {
			active[job*8+r] = true
		}
		fresh, full := st.assign(active)
		if full {
			t.Fatalf("job %d: slots exhausted with only 8 ranks present", job)
		}
		used := map[uint32]bool{}
		for r := range active {
			s, ok := st.ids[r]
			if !ok || s >= maxSlots || used[s] {
				t.Fatalf("job %d rank %d: slot %d ok=%v (dup %v)", job, r, s, ok, used[s])
			}
			used[s] = true
		}
		for _, s := range fresh {
			if !seen[s] {
				t.Fatalf("slot %d reported fresh but never used before", s)
			}
		}
		if job > 0 && len(fresh) != 8 {
			t.Fatalf("job %d: %d reused slots reported, want 8", job, len(fresh))
		}
		for s := range used {
			seen[s] = true
		}
	}
	// More ranks at once than slots: the rest are reported, not aliased.
	active := map[int]bool{}
	for r := 0; r < maxSlots+3; r++ {
		active[10000+r] = true
	}
	if _, full := st.assign(active); !full || len(st.ids) != maxSlots {
		t.Fatalf("full=%v, %d slots; want full with %d", full, len(st.ids), maxSlots)
	}
}
