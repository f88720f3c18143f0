package osstat

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json")

// fakeRoot returns a root path that points at testdata/<snap>, and a
// function to switch it.
func fakeRoot(t *testing.T) (string, func(snap string)) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	abs, _ := filepath.Abs("testdata")
	set := func(snap string) {
		os.Remove(root)
		if err := os.Symlink(filepath.Join(abs, snap), root); err != nil {
			t.Fatal(err)
		}
	}
	set("t0")
	return root, set
}

func find(b *osstat.Batch, name string, rank, cpu int, dev string) (float64, bool) {
	for _, p := range b.Points {
		if p.Name == name && p.Rank == rank && p.CPU == cpu && p.Device == dev {
			return p.Value, true
		}
	}
	return 0, false
}

func TestGoldenRates(t *testing.T) {
	root, set := fakeRoot(t)
	c, err := New(Config{Root: root, Ranks: func() map[int]int { return map[int]int{100: 0, 200: 1, 300: 2} }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	if b := c.Collect(t0); b != nil {
		t.Fatal("first Collect must prime and return nil")
	}
	set("t1")
	b := c.Collect(t0.Add(5 * time.Second))
	if b == nil {
		t.Fatal("no batch")
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	// Hand-computed from testdata/gen notes (5 s apart).
	want := []struct {
		name      string
		rank, cpu int
		dev       string
		v         float64
	}{
		{osstat.Interrupts, -1, 2, "38:virtio2-input.0", 1000},
		{osstat.Interrupts, -1, 0, "40:virtio3-rx", 2}, // 32-bit wrap: 4294967290 → 4
		{osstat.Interrupts, -1, 0, "LOC", 200},
		{osstat.Interrupts, -1, 2, "LOC", 200},
		{osstat.Interrupts, -1, -1, "ERR", 0.6},
		{osstat.SoftIRQs, -1, 2, "NET_RX", 2000},
		{osstat.SoftIRQs, -1, 0, "TIMER", 10},
		{osstat.CPUBusy, -1, 0, "", 0.6},
		{osstat.CPUIRQTime, -1, 0, "", 0.04},
		{osstat.CPUSoftTime, -1, 0, "", 0.06},
		{osstat.CPUSteal, -1, 0, "", 0},
		{osstat.CPUBusy, -1, 2, "", 0.2},
		{osstat.CPUSteal, -1, 2, "", 0.2},
		{osstat.RankCPU, 0, -1, "", 0.9},
		{osstat.RunQueueWait, 0, -1, "", 0.1},
		{osstat.CtxSwitchVol, 0, -1, "", 10},
		{osstat.CtxSwitchInvol, 0, -1, "", 6},
		{osstat.CPUMigrations, 0, -1, "", 3},
		{osstat.NUMAMigrations, 0, -1, "", 10},
		{osstat.RankOnCPU, 0, 2, "", 1},
		{osstat.RankOnCPU, 0, 0, "", 1},
		{osstat.NodeNUMAMigrations, -1, -1, "", 100},
		{osstat.CPUFreqMHz, -1, 0, "", 2400},
		{osstat.RDMACNPSent, -1, -1, "mlx5_0/1", 10},
		{osstat.RDMACNPHandled, -1, -1, "mlx5_0/1", 100}, // reset 1000 → 500
	}
	for _, w := range want {
		got, ok := find(b, w.name, w.rank, w.cpu, w.dev)
		if !ok || math.Abs(got-w.v) > 1e-9 {
			t.Errorf("%s rank %d cpu %d %q = %v (present %v), want %v", w.name, w.rank, w.cpu, w.dev, got, ok, w.v)
		}
	}
	// Unmoved pairs, the reused/new threads of rank 1 and the vanished
	// pid 300 yield no points.
	for _, p := range b.Points {
		if p.Rank == 1 || p.Rank == 2 {
			t.Errorf("point for a rank without comparable threads: %+v", p)
		}
		if p.Device == "24:ACPI:Ged" || p.Device == "41" || p.Device == "HI" {
			t.Errorf("point for an unmoved counter: %+v", p)
		}
	}
	var pause bool
	for _, a := range b.Absent {
		if a.Source == osstat.SrcRDMA && strings.Contains(a.Reason, "pause") {
			pause = true
		}
	}
	if !pause {
		t.Errorf("missing PFC-pause absence: %+v", b.Absent)
	}
	got, _ := json.MarshalIndent(b, "", " ")
	if *update {
		os.WriteFile("testdata/golden.json", got, 0o644)
	}
	gold, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(gold) {
		t.Errorf("batch differs from testdata/golden.json (go test -run Golden -update to accept):\n%s", got)
	}
}

func TestAbsentSources(t *testing.T) {
	root := t.TempDir() // nothing at all
	c, _ := New(Config{Root: root, SchedTracepoints: true})
	c.Collect(time.Unix(100, 0))
	b := c.Collect(time.Unix(105, 0))
	if b == nil {
		t.Fatal("no batch")
	}
	if len(b.Points) != 0 {
		t.Fatalf("points from an empty tree: %+v", b.Points)
	}
	srcs := map[string]string{}
	for _, a := range b.Absent {
		srcs[a.Source] = a.Reason
	}
	for _, s := range []string{osstat.SrcInterrupts, osstat.SrcSoftIRQs, osstat.SrcStat, osstat.SrcVMStat, osstat.SrcCPUFreq, osstat.SrcRDMA, osstat.SrcSchedTP} {
		if srcs[s] == "" {
			t.Errorf("source %s not reported absent: %v", s, srcs)
		}
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	// The clock not advancing yields nothing rather than infinities.
	if c.Collect(time.Unix(105, 0)) != nil {
		t.Fatal("batch over an empty interval")
	}
}

func TestDelta(t *testing.T) {
	for _, tc := range []struct {
		p, c uint64
		wrap bool
		want uint64
	}{
		{5, 9, true, 4},
		{math.MaxUint32 - 1, 3, true, 5},
		{math.MaxUint32 - 1, 3, false, 3},
		{1 << 40, 7, true, 7}, // not a 32-bit counter: a reset
	} {
		if got := delta(tc.p, tc.c, tc.wrap); got != tc.want {
			t.Errorf("delta(%d, %d, %v) = %d, want %d", tc.p, tc.c, tc.wrap, got, tc.want)
		}
	}
}

func TestParsePerCPUOfflineAndErrors(t *testing.T) {
	tab, rowErr, err := parsePerCPU([]byte("  CPU0 CPU3\n 1: 5 6 chip 1-edge eth0\nBAD 1 2\nX: 1 2 3\n"), 10, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.CPUs) != 2 || tab.CPUs[1] != 3 || len(tab.Rows) != 2 {
		t.Fatalf("table %+v", tab)
	}
	if rowErr == nil || !strings.HasPrefix(rowErr.Error(), "line 3:") {
		t.Fatalf("row error %v", rowErr)
	}
	if n := irqName(tab.Rows[0]); n != "1:eth0" {
		t.Fatalf("irqName = %q", n)
	}
	if _, _, err := parsePerCPU([]byte("CPU0 CPUx\n"), 10, 8); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad header: %v", err)
	}
	if _, _, err := parsePerCPU(nil, 10, 8); err == nil {
		t.Fatal("empty input accepted")
	}
}

func FuzzParsePerCPU(f *testing.F) {
	for _, s := range []string{"t0/proc/interrupts", "t0/proc/softirqs"} {
		b, _ := os.ReadFile(filepath.Join("testdata", s))
		f.Add(b)
	}
	f.Add([]byte("CPU0\nERR: 1\n 9: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, _, err := parsePerCPU(b, 64, 64)
		if err != nil {
			return
		}
		if len(tab.Rows) > 64 || len(tab.CPUs) == 0 {
			t.Fatalf("bounds: %d rows %d cpus", len(tab.Rows), len(tab.CPUs))
		}
		for _, r := range tab.Rows {
			if !r.Total && len(r.Counts) != len(tab.CPUs) {
				t.Fatalf("row %q: %d counts for %d cpus", r.Key, len(r.Counts), len(tab.CPUs))
			}
			if n := irqName(r); len(n) > maxDevice {
				t.Fatalf("device name %d bytes", len(n))
			}
		}
	})
}

func FuzzParseKV(f *testing.F) {
	b, _ := os.ReadFile("testdata/t0/proc/100/task/100/sched")
	f.Add(b)
	f.Add([]byte("numa_pages_migrated 12\nse.nr_migrations : 3.000000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := parseKV(b, schedKeys)
		for k := range m {
			if !schedKeys[k] {
				t.Fatalf("unwanted key %q", k)
			}
		}
	})
}

// writeScaleTree writes a node of paper scale (§4: 8 ranks per node) to
// dir: cpus CPUs, irqs IRQ lines, ranks processes of threads threads.
func writeScaleTree(tb testing.TB, dir string, cpus, irqs, ranks, threads int, bump uint64) map[int]int {
	tb.Helper()
	w := func(p, s string) {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	var sb strings.Builder
	for c := range cpus {
		fmt.Fprintf(&sb, " CPU%d", c)
	}
	sb.WriteString("\n")
	hdr := sb.String()
	row := func(key, desc string) {
		sb.WriteString(key + ":")
		for c := range cpus {
			fmt.Fprintf(&sb, " %d", uint64(c)*7+bump)
		}
		sb.WriteString(" " + desc + "\n")
	}
	for i := range irqs {
		row(strconv.Itoa(i+24), fmt.Sprintf("PCI-MSIX-0000:00:%02d.0 %d-edge mlx5_comp%d@pci:0000:3b:00.0", i%32, i, i))
	}
	w("proc/interrupts", sb.String())
	sb.Reset()
	sb.WriteString(hdr)
	for _, k := range []string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"} {
		row(k, "")
	}
	w("proc/softirqs", sb.String())
	sb.Reset()
	fmt.Fprintf(&sb, "cpu  1 2 3 4 5 6 7 8 0 0\n")
	for c := range cpus {
		fmt.Fprintf(&sb, "cpu%d %d 0 %d %d 0 %d %d 0 0 0\n", c, 100+bump, 50+bump, 1000+bump, 1+bump, 2+bump)
	}
	w("proc/stat", sb.String())
	w("proc/vmstat", fmt.Sprintf("numa_pages_migrated %d\n", bump))
	m := map[int]int{}
	for r := range ranks {
		pid := 1000 + r*1000
		m[pid] = r
		for t := range threads {
			tid := pid + t
			tp := fmt.Sprintf("proc/%d/task/%d/", pid, tid)
			w(tp+"schedstat", fmt.Sprintf("%d %d %d\n", 1000*bump, 10*bump, bump))
			w(tp+"status", fmt.Sprintf("Name:\tpython\nTgid:\t%d\nvoluntary_ctxt_switches:\t%d\nnonvoluntary_ctxt_switches:\t%d\n", pid, bump, bump))
			w(tp+"sched", fmt.Sprintf("se.nr_migrations : %d\nnuma_pages_migrated : %d\n", bump, bump))
			f := make([]string, 52)
			for i := range f {
				f[i] = "0"
			}
			f[0], f[1], f[2], f[21], f[38] = strconv.Itoa(tid), "(python)", "R", "5", strconv.Itoa(t%cpus)
			w(tp+"stat", strings.Join(f, " ")+"\n")
		}
	}
	return m
}

// BenchmarkCollectNode: one collection of a 128-CPU node with 256 IRQ
// lines and 8 ranks × 128 threads (the agent does this every 5 s).
// Every counter moves between readings (the worst case: all threads ran).
func BenchmarkCollectNode(b *testing.B) {
	dir := b.TempDir()
	var ranks map[int]int
	for i, snap := range []string{"a", "b"} {
		ranks = writeScaleTree(b, filepath.Join(dir, snap), 128, 256, 8, 128, uint64(i+1))
	}
	root := filepath.Join(dir, "root")
	c, _ := New(Config{Root: root, Ranks: func() map[int]int { return ranks }})
	now := time.Unix(1, 0)
	flip := func(i int) {
		os.Remove(root)
		os.Symlink(filepath.Join(dir, []string{"a", "b"}[i%2]), root)
	}
	flip(0)
	c.Collect(now)
	var pts, i int
	for b.Loop() {
		i++
		flip(i)
		now = now.Add(time.Second)
		if bt := c.Collect(now); bt != nil {
			pts = len(bt.Points)
		}
	}
	b.ReportMetric(float64(pts), "points")
}

// BenchmarkCollectLive: one collection on this machine's /proc with the
// benchmark process registered as a rank.
func BenchmarkCollectLive(b *testing.B) {
	c, _ := New(Config{Ranks: func() map[int]int { return map[int]int{os.Getpid(): 0} }})
	now := time.Now()
	c.Collect(now)
	for b.Loop() {
		now = now.Add(time.Second)
		c.Collect(now)
	}
}

// BenchmarkCollectLiveThreads: one collection on the real /proc of a
// process with 128 threads that each wake every 5 ms (so every thread ran
// between readings: the slow path), reported per thread.
func BenchmarkCollectLiveThreads(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 not installed")
	}
	const n = 128
	cmd := exec.Command(py, "-c", `
import threading, time, sys
def loop():
    while True:
        time.sleep(0.005)
for _ in range(`+strconv.Itoa(n)+`):
    threading.Thread(target=loop, daemon=True).start()
print("up", flush=True)
sys.stdin.read()
`)
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		b.Skip(err)
	}
	defer func() { in.Close(); cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 3)
	if _, err := io.ReadFull(out, buf); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	c, _ := New(Config{Ranks: func() map[int]int { return map[int]int{pid: 0} }})
	now := time.Now()
	c.Collect(now)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(20 * time.Millisecond) // let every thread run
		b.StartTimer()
		now = now.Add(time.Second)
		c.Collect(now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/thread")
}
