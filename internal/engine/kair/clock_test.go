package kair

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// hbSample is one exchange at client time c with true offset theta
// (server = client + theta), one-way delays up/down and server hold.
func hbSample(c, theta, up, hold, down int64) Heartbeat {
	return Heartbeat{ClientSendNS: c, ServerRecvNS: c + up + theta, ServerSendNS: c + up + hold + theta,
		ClientRecvNS: c + up + hold + down}
}

func TestOffsetFromHeartbeatsTable(t *testing.T) {
	const th = 1_234_567
	tests := []struct {
		name     string
		hb       []Heartbeat
		offset   int64
		residual int64
		samples  int
	}{
		{"symmetric exact", []Heartbeat{hbSample(1e9, th, 500, 100, 500)}, th, 500, 1},
		{"asymmetric: error within RTT/2", []Heartbeat{hbSample(1e9, th, 100, 0, 900)}, th - 400, 500, 1},
		{"min RTT wins", []Heartbeat{hbSample(1e9, th, 5_000, 10, 90_000), hbSample(2e9, th, 200, 10, 200),
			hbSample(3e9, th, 50_000, 10, 100)}, th, 200, 3},
		{"ties at min RTT: median", []Heartbeat{hbSample(1e9, th, 100, 0, 300), hbSample(2e9, th, 300, 0, 100),
			hbSample(3e9, th, 200, 0, 200)}, th, 200, 3},
		{"odd RTT rounds the bound up", []Heartbeat{hbSample(1e9, th, 1, 0, 0)}, th, 1, 1},
		{"negative RTT skipped", []Heartbeat{{100, 200, 300, 150}, hbSample(1e9, th, 10, 0, 10)}, th, 10, 1},
		{"reversed server times skipped", []Heartbeat{{100, 300, 200, 400}, hbSample(1e9, th, 10, 0, 10)}, th, 10, 1},
		{"overflow skipped", []Heartbeat{{math.MinInt64, math.MaxInt64, math.MaxInt64, 0}, hbSample(1e9, -th, 10, 0, 10)}, -th, 10, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := OffsetFromHeartbeats(3, tc.hb)
			if err != nil {
				t.Fatal(err)
			}
			if e.Rank != 3 || e.Method != ClockHeartbeat || e.OffsetNS != tc.offset || e.ResidualNS != tc.residual || e.Samples != tc.samples {
				t.Fatalf("%+v, want offset %d residual %d samples %d", e, tc.offset, tc.residual, tc.samples)
			}
			if d := absInt(e.OffsetNS - th); tc.offset != -th && d > e.ResidualNS {
				t.Errorf("error %d beyond residual %d", d, e.ResidualNS)
			}
		})
	}
	for _, tc := range []struct {
		field string
		rank  int
		hb    []Heartbeat
	}{
		{"rank", -1, []Heartbeat{hbSample(1, 2, 3, 4, 5)}},
		{"heartbeats", 0, nil},
		{"heartbeats", 0, []Heartbeat{{100, 200, 300, 150}}},
	} {
		_, err := OffsetFromHeartbeats(tc.rank, tc.hb)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want field %q, got %v", tc.field, err)
		}
	}
}

// Property: with arbitrary non-negative delays the true offset is always
// within ResidualNS of the estimate.
func TestOffsetFromHeartbeatsBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2_000 {
		theta := rng.Int64N(2e12) - 1e12
		var hb []Heartbeat
		for i := range 1 + rng.IntN(16) {
			hb = append(hb, hbSample(1.7e18+int64(i)*2e9, theta, rng.Int64N(5e6), rng.Int64N(1e5), rng.Int64N(5e6)))
		}
		e, err := OffsetFromHeartbeats(0, hb)
		if err != nil {
			t.Fatal(err)
		}
		if d := absInt(e.OffsetNS - theta); d > e.ResidualNS {
			t.Fatalf("error %d > residual %d (%+v)", d, e.ResidualNS, hb)
		}
	}
}

// randomCollTraces: n ranks with random compute before each of k
// collective instances on one clock; each member leaves after the last
// arrival plus a small random tail.
func randomCollTraces(rng *rand.Rand, n, k int, device bool) []optrace.Trace {
	tr := make([]optrace.Trace, n)
	now := make([]int64, n)
	for r := range tr {
		tr[r].Rank = r
		now[r] = 1e15
	}
	for s := range k {
		last := int64(0)
		entry := make([]int64, n)
		for r := range n {
			entry[r] = now[r] + 1_000 + rng.Int64N(200_000)
			last = max(last, entry[r])
		}
		done := last + 10_000 + rng.Int64N(50_000)
		for r := range n {
			exit := done + rng.Int64N(2_000)
			e := optrace.Event{Name: arName, Cat: optrace.Collective, Device: -1, StartNS: entry[r],
				DurNS: exit - entry[r], Step: int64(s), Comm: "world", Seq: int64(s)}
			if device {
				e.Device, e.Stream = 0, 7
			}
			tr[r].Events = append(tr[r].Events, e)
			now[r] = exit
		}
	}
	return tr
}

// Property: shifting rank r's clock by X is recovered as −X (relative to
// rank 0) within the residual, with no violations on consistent traces.
func TestAlignByCollectivesRecoversShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for it := range 300 {
		n := 2 + rng.IntN(6)
		tr := randomCollTraces(rng, n, 1+rng.IntN(20), it%3 == 0)
		shift := map[int]int64{}
		for r := range n {
			shift[r] = rng.Int64N(2e10) - 1e10
		}
		tr = skewed(tr, shift)
		rng.Shuffle(len(tr), func(i, j int) { tr[i], tr[j] = tr[j], tr[i] })
		est, err := AlignByCollectives(tr)
		if err != nil {
			t.Fatal(err)
		}
		if len(est) != n {
			t.Fatalf("%d estimates for %d ranks", len(est), n)
		}
		for j, e := range est {
			want := shift[0] - shift[e.Rank]
			if e.Rank != j || e.Method != ClockCollectives || e.Violations != 0 || absInt(e.OffsetNS-want) > e.ResidualNS {
				t.Fatalf("iteration %d rank %d: %+v, want offset %d", it, j, e, want)
			}
		}
		if est[0].OffsetNS != 0 || est[0].ResidualNS != 0 {
			t.Fatalf("reference %+v", est[0])
		}
	}
}

func TestAlignByCollectivesCases(t *testing.T) {
	ev := func(comm string, seq, start, dur int64, dev int) optrace.Event {
		return optrace.Event{Name: "c", Cat: optrace.Collective, Device: dev, StartNS: start, DurNS: dur, Comm: comm, Seq: seq, Step: -1}
	}
	t.Run("chain and unreachable", func(t *testing.T) {
		// 0–1 share "a", 1–2 share "b", 3 shares nothing.
		tr := []optrace.Trace{
			{Rank: 0, Events: []optrace.Event{ev("a", 0, 100, 50, -1)}},
			{Rank: 1, Events: []optrace.Event{ev("a", 0, 1_100, 50, -1), ev("b", 0, 2_000, 40, -1)}},
			{Rank: 2, Events: []optrace.Event{ev("b", 0, 7_000, 40, -1)}},
			{Rank: 3, Events: []optrace.Event{ev("z", 0, 7_000, 40, -1)}},
		}
		est, err := AlignByCollectives(tr)
		if err != nil {
			t.Fatal(err)
		}
		if est[1].OffsetNS != -1_000 || est[2].OffsetNS != -6_000 || est[2].Method != ClockCollectives ||
			est[2].ResidualNS < est[1].ResidualNS || est[3].Method != ClockNone || est[3].OffsetNS != 0 {
			t.Fatalf("%+v", est)
		}
	})
	t.Run("inconsistent host falls back to device", func(t *testing.T) {
		// Host ops are asynchronous enqueues (rank 1 returns before rank 0
		// enters); the device kernels obey barrier semantics, offset 0.
		tr := []optrace.Trace{
			{Rank: 0, Events: []optrace.Event{ev("a", 0, 10_000, 10, -1), ev("a", 0, 10_020, 5_000, 0),
				ev("a", 1, 20_000, 10, -1), ev("a", 1, 20_020, 5_000, 0)}},
			{Rank: 1, Events: []optrace.Event{ev("a", 0, 1_000, 10, -1), ev("a", 0, 1_020, 14_000, 0),
				ev("a", 1, 16_000, 10, -1), ev("a", 1, 16_020, 9_000, 0)}},
		}
		est, _ := AlignByCollectives(tr)
		if est[1].Violations != 0 || absInt(est[1].OffsetNS) > est[1].ResidualNS {
			t.Fatalf("%+v", est[1])
		}
		// Without the device kernels: inconsistent, violations reported.
		for i := range tr {
			tr[i].Events = []optrace.Event{tr[i].Events[0], tr[i].Events[2]}
		}
		est, _ = AlignByCollectives(tr)
		if est[1].Violations == 0 || est[1].Samples != 2 {
			t.Fatalf("%+v", est[1])
		}
	})
	t.Run("bad ranks", func(t *testing.T) {
		_, err := AlignByCollectives([]optrace.Trace{{Rank: 1}, {Rank: 1}})
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != "traces[1].rank" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if est, err := AlignByCollectives(nil); err != nil || len(est) != 0 {
			t.Fatalf("%v %v", est, err)
		}
	})
}

// Traces without collective ids (gloo, torch < 2.0) align on the k-th call
// of each collective op in the step; an asynchronous enqueue op that is
// no barrier (its entries and exits do not overlap across ranks) must not
// be the one chosen.
func TestAlignByCollectivesWithoutIDs(t *testing.T) {
	skew := map[int]int64{1: 3_000_000, 2: -7_500_000, 3: 250_000}
	var tr []optrace.Trace
	for r := range 4 {
		var ev []optrace.Event
		for s := range int64(5) {
			t0 := s * 100_000_000
			arrive := t0 + 10_000_000 + int64(r)*1_000_000 // rank 3 arrives last
			// The enqueue returns at once on every rank: no barrier.
			ev = append(ev, optrace.Event{Name: "c10d::allreduce_", Cat: optrace.Collective, TID: 1, Device: -1,
				StartNS: arrive, DurNS: 20_000, Step: s, Seq: -1})
			// The worker-side op ends for everyone after the last arrival.
			end := t0 + 10_000_000 + 3_000_000 + 500_000
			ev = append(ev, optrace.Event{Name: "gloo:all_reduce", Cat: optrace.Collective, TID: 3, Device: -1,
				StartNS: arrive + 30_000, DurNS: end + int64(r)*7_000 - arrive - 30_000, Step: s, Seq: -1})
		}
		for i := range ev {
			ev[i].StartNS += skew[r]
		}
		tr = append(tr, optrace.Trace{Rank: r, Events: ev})
	}
	est, err := AlignByCollectives(tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, ce := range est {
		// The bound is loose (arrivals spread 3 ms), the estimate (median
		// exit difference) close: the enqueue op would give 1 ms errors.
		if d := absInt(ce.OffsetNS + skew[ce.Rank]); ce.Method != ClockCollectives || d > ce.ResidualNS || ce.Violations != 0 || d > 100_000 {
			t.Errorf("rank %d: %+v, want offset %d ± 100 µs", ce.Rank, ce, -skew[ce.Rank])
		}
	}
}
