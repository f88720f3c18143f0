package cpuprof

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BenchmarkDrain drains a full generation at paper scale: MaxStacks
// (16384) aggregated entries over 2048 distinct 32-frame user stacks of
// a live process (§4: one drain per 5 s interval per node).
func BenchmarkDrain(b *testing.B) {
	p := newOrSkip(b, Config{AllProcesses: true})
	pid := uint32(os.Getpid())
	pc := uint64(reflect.ValueOf(BenchmarkDrain).Pointer())
	const nStacks, nEntries = 2048, defaultMaxStacks
	ukeys := make([]uint64, nStacks)
	uvals := make([]cpuprofUstack, nStacks)
	for i := range ukeys {
		ukeys[i] = uint64(i)*2 + 1
		uvals[i].N = 32
		for j := 0; j < 32; j++ {
			uvals[i].Pcs[j] = pc + uint64((i*7+j)%64)
		}
	}
	ckeys := make([]cpuprofCountKey, nEntries)
	cvals := make([]uint64, nEntries)
	for i := range ckeys {
		ckeys[i] = cpuprofCountKey{Pid: pid, Tid: pid + uint32(i/nStacks), Cpu: uint32(i % 2), Kstack: -14, Uhash: ukeys[i%nStacks]}
		cvals[i] = uint64(i%5 + 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	samples := 0
	for b.Loop() {
		b.StopTimer()
		g := p.gens(p.gen)
		if _, err := g.ustacks.BatchUpdate(ukeys, uvals, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := g.counts.BatchUpdate(ckeys, cvals, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		bt := p.drain(time.Now())
		samples += len(bt.Samples)
	}
	b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "stacks/s")
}

// BenchmarkSampleCost measures the program's cost per sampled tick with
// the kernel's BPF run-time statistics (BPF_ENABLE_STATS, CAP_SYS_ADMIN)
// while it unwinds a -fomit-frame-pointer C chain and a CPython chain at
// ratio 1, and the agent's RSS and map memory (§5.1, §4 "~200 MB").
func BenchmarkSampleCost(b *testing.B) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		b.Skip("gcc not installed")
	}
	bin := filepath.Join(b.TempDir(), "chain")
	if out, err := exec.Command(gcc, "-O2", "-fomit-frame-pointer", "-o", bin, "testdata/chain.c").CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	var kids []*exec.Cmd
	for _, args := range [][]string{{bin}, {python3, "testdata/chain.py"}} {
		c := exec.Command(args[0], args[1:]...)
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		kids = append(kids, c)
	}
	defer func() {
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
	}()
	pids := map[int]bool{kids[0].Process.Pid: true, kids[1].Process.Pid: true}
	ratio, mode := 1.0, ModeHybrid
	if v, err := strconv.ParseFloat(os.Getenv("CPUPROF_RATIO"), 64); err == nil {
		ratio = v
	}
	if v, err := strconv.Atoi(os.Getenv("CPUPROF_MODE")); err == nil {
		mode = Mode(v)
	}
	p := newOrSkip(b, Config{Hz: 199, Ratio: ratio, Mode: mode, Interval: time.Second,
		RankOf: func(pid int) (int, bool) { return 0, pids[pid] }})
	statsOn, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Skipf("BPF_ENABLE_STATS refused: %v", err)
	}
	defer statsOn.Close()
	time.Sleep(300 * time.Millisecond) // let the children reach their loops
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := p.Run(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.StopTimer()
	ps, err := p.objs.Sample.Stats()
	if err != nil {
		b.Fatal(err)
	}
	rt, runs := ps.Runtime, ps.RunCount
	st := p.Stats()
	if runs > 0 {
		b.ReportMetric(float64(rt.Nanoseconds())/float64(runs), "ns/tick")
	}
	if st.Samples > 0 {
		b.ReportMetric(float64(st.BPFNanos)/float64(st.Samples), "ns/sample(ktime)")
	}
	b.ReportMetric(float64(st.MapBytes)/(1<<20), "MiB-maps")
	b.ReportMetric(float64(rssKiB())/1024, "MiB-rss")
	b.Logf("runs %d, run time %v, stats %+v", runs, rt, st)
}

func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
