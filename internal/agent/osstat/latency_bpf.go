//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package osstat

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// bpfLatency runs bpf/schedlat.c on BTF-typed sched tracepoints (tp_btf:
// kernel BTF, no tracefs needed).
type bpfLatency struct {
	objs    schedlatObjects
	links   []link.Link
	log     *slog.Logger
	slots   slotTable         // rank → histogram slot
	tracked map[uint32]uint32 // tgid → slot as written to the map
	prev    map[uint32][]uint64
	full    bool
}

func openLatency(root string, log *slog.Logger) (latencySource, string) {
	if filepath.Clean(root) != "/" {
		return nil, "sched tracepoints read the live kernel only (Root is " + root + ")"
	}
	// Kernels ≥ 5.11 account BPF memory to the cgroup; without
	// CAP_SYS_RESOURCE this fails and is not needed there.
	_ = rlimit.RemoveMemlock()
	l := &bpfLatency{log: log, tracked: map[uint32]uint32{}, prev: map[uint32][]uint64{}}
	if err := loadSchedlatObjects(&l.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			log.Debug("schedlat verifier log", "log", fmt.Sprintf("%+v", ve))
		}
		return nil, clip("loading the sched latency BPF program: " + err.Error())
	}
	for _, p := range []*ebpf.Program{l.objs.HandleWakeup, l.objs.HandleWakeupNew, l.objs.HandleSwitch} {
		lk, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			l.Close()
			return nil, clip("attaching sched tracepoint " + p.String() + ": " + err.Error())
		}
		l.links = append(l.links, lk)
	}
	return l, ""
}

func (l *bpfLatency) Close() error {
	var errs []error
	for _, lk := range l.links {
		errs = append(errs, lk.Close())
	}
	l.links = nil
	errs = append(errs, l.objs.Close())
	return errors.Join(errs...)
}

// sync makes the tracked map hold exactly ranks' pids. Slots of ranks
// no longer present are handed to new ranks (zeroed first), so a
// long-lived agent keeps measuring new jobs (MAX_SLOTS is 256).
func (l *bpfLatency) sync(ranks map[int]int) error {
	for tgid := range l.tracked {
		if _, ok := ranks[int(tgid)]; !ok {
			if err := l.objs.Tracked.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("untracking pid %d: %w", tgid, err)
			}
			delete(l.tracked, tgid)
		}
	}
	active := map[int]bool{}
	for _, r := range ranks {
		active[r] = true
	}
	fresh, full := l.slots.assign(active)
	if full && !l.full {
		l.full = true
		l.log.Warn("osstat: sched latency slots exhausted; further ranks not tracked", "slots", maxSlots)
	}
	for _, s := range fresh {
		var zero schedlatHist
		if err := l.objs.Hists.Put(s, &zero); err != nil {
			return fmt.Errorf("zeroing histogram: %w", err)
		}
		if err := l.objs.Maxns.Put(s, uint64(0)); err != nil {
			return fmt.Errorf("zeroing max: %w", err)
		}
		delete(l.prev, s)
	}
	for pid, rank := range ranks {
		s, ok := l.slots.ids[rank]
		if !ok {
			continue
		}
		tgid := uint32(pid)
		if cur, ok := l.tracked[tgid]; ok && cur == s {
			continue
		}
		if err := l.objs.Tracked.Put(tgid, s); err != nil {
			return fmt.Errorf("tracking pid %d: %w", tgid, err)
		}
		l.tracked[tgid] = s
	}
	return nil
}

func (l *bpfLatency) Drain(ranks map[int]int) ([]osstat.Point, error) {
	if err := l.sync(ranks); err != nil {
		return nil, err
	}
	active := map[int]bool{}
	for _, r := range ranks {
		active[r] = true
	}
	var pts []osstat.Point
	var h schedlatHist
	for rank, s := range l.slots.ids {
		if err := l.objs.Hists.Lookup(s, &h); err != nil {
			return nil, fmt.Errorf("reading histogram: %w", err)
		}
		var mx uint64
		if err := l.objs.Maxns.Lookup(s, &mx); err != nil {
			return nil, fmt.Errorf("reading max: %w", err)
		}
		if err := l.objs.Maxns.Put(s, uint64(0)); err != nil {
			return nil, fmt.Errorf("resetting max: %w", err)
		}
		prev := l.prev[s]
		d := make([]uint64, nBuckets)
		for b := range d {
			var p uint64
			if prev != nil {
				p = prev[b]
			}
			d[b] = h.Count[b] - p // cumulative, never reset
		}
		l.prev[s] = append([]uint64(nil), h.Count[:]...)
		if !active[rank] {
			continue
		}
		p99, ok := quantile(d, 0.99)
		if !ok {
			continue // no wakeups of this rank in the window
		}
		pts = append(pts,
			osstat.Point{Name: osstat.RunQueueP99Ms, Rank: rank, CPU: -1, Value: p99 / 1e6},
			osstat.Point{Name: osstat.RunQueueMaxMs, Rank: rank, CPU: -1, Value: float64(mx) / 1e6})
	}
	return pts, nil
}
