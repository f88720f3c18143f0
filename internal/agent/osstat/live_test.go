package osstat

import (
	"os/exec"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// TestLiveRunQueue pins two busy loops to CPU 0 of the real machine: each
// is always runnable, so its run time plus run-queue wait is ≈ 1 s/s on
// an idle machine, and the wait is clearly positive (they take turns).
func TestLiveRunQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("live /proc test skipped in -short")
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
	c, err := New(Config{Ranks: func() map[int]int { return map[int]int{pids[0]: 0, pids[1]: 1} }})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // taskset has exec'd sh by now
	c.Collect(time.Now())
	time.Sleep(1500 * time.Millisecond)
	b := c.Collect(time.Now())
	if b == nil {
		t.Fatal("no batch")
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	for rank := range 2 {
		run, ok1 := find(b, osstat.RankCPU, rank, -1, "")
		wait, ok2 := find(b, osstat.RunQueueWait, rank, -1, "")
		if !ok1 || !ok2 {
			t.Fatalf("rank %d: no rank_cpu/runq_wait in %+v %+v", rank, b.Points, b.Absent)
		}
		t.Logf("rank %d: rank_cpu %.3f runq_wait %.3f", rank, run, wait)
		// Bounds are loose: other work on CPU 0 of a shared machine takes
		// its share (more wait), and a CPU-quota-throttled cgroup's
		// tasks are neither running nor counted as waiting.
		if run < 0.01 || run > 1.05 || wait < 0.05 || run+wait < 0.3 || run+wait > 1.25 {
			t.Errorf("rank %d: rank_cpu %.3f runq_wait %.3f: want both clearly positive and summing to ≈ 1", rank, run, wait)
		}
		if n, ok := find(b, osstat.RankOnCPU, rank, 0, ""); !ok || n != 1 {
			t.Errorf("rank %d: rank_on_cpu[0] = %v, %v", rank, n, ok)
		}
	}
	// The real machine has these sources.
	for _, a := range b.Absent {
		if a.Source == osstat.SrcInterrupts || a.Source == osstat.SrcStat || a.Source == osstat.SrcSchedstat {
			t.Errorf("%s absent on the live machine: %s", a.Source, a.Reason)
		}
	}
	if _, ok := find(b, osstat.CPUBusy, -1, 0, ""); !ok {
		t.Error("no cpu_busy for CPU 0")
	}
}
