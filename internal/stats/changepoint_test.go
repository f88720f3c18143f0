package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// series builds levels[i] for counts[i] points with Gaussian noise of sd
// (relative to the level) and optional spikes every `every` points.
func series(seed uint64, levels []float64, counts []int, sd float64, every int, spike float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	var x []float64
	for i, l := range levels {
		for range counts[i] {
			v := l * (1 + sd*rng.NormFloat64())
			if every > 0 && len(x)%every == every-1 {
				v *= spike
			}
			x = append(x, v)
		}
	}
	return x
}

func TestRankSegmenterFindsLevelChanges(t *testing.T) {
	d := DefaultSegmenter(1)
	cases := []struct {
		name   string
		x      []float64
		want   []int // change indices
		slack  int   // allowed index error
		rising []bool
	}{
		{"onset", series(1, []float64{150, 270}, []int{60, 60}, 0.03, 0, 0), []int{60}, 1, []bool{true}},
		{"relief", series(2, []float64{270, 150}, []int{40, 80}, 0.03, 0, 0), []int{40}, 1, []bool{false}},
		{"onset then relief", series(3, []float64{100, 130, 100}, []int{50, 50, 50}, 0.03, 0, 0), []int{50, 100}, 2, []bool{true, false}},
		{"12% shift in noise", series(4, []float64{100, 112}, []int{100, 100}, 0.03, 0, 0), []int{100}, 3, []bool{true}},
		{"onset under periodic spikes", series(5, []float64{100, 140}, []int{80, 80}, 0.03, 10, 8), []int{80}, 2, []bool{true}},
		{"late onset, short tail", series(6, []float64{100, 200}, []int{200, 6}, 0.02, 0, 0), []int{200}, 0, []bool{true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := d.Detect(c.x)
			if len(got) != len(c.want) {
				t.Fatalf("found %d change points %+v, want %d at %v", len(got), got, len(c.want), c.want)
			}
			for i, cp := range got {
				if abs(cp.Index-c.want[i]) > c.slack {
					t.Errorf("change %d at %d, want %d±%d", i, cp.Index, c.want[i], c.slack)
				}
				if cp.Rise() != c.rising[i] {
					t.Errorf("change %d rise=%v, want %v (%+v)", i, cp.Rise(), c.rising[i], cp)
				}
			}
		})
	}
}

// No level change: noise, heavy periodic spikes and sub-threshold drifts
// must not produce change points on any seed.
func TestRankSegmenterQuietOnSteadySeries(t *testing.T) {
	d := DefaultSegmenter(1)
	for seed := uint64(0); seed < 50; seed++ {
		for _, x := range [][]float64{
			series(seed, []float64{120}, []int{400}, 0.05, 0, 0),
			series(seed, []float64{120}, []int{400}, 0.05, 10, 20), // a checkpoint spike every 10 steps
			series(seed, []float64{120, 125}, []int{200, 200}, 0.02, 0, 0),
		} {
			if got := d.Detect(x); len(got) != 0 {
				t.Fatalf("seed %d: false change points %+v", seed, got)
			}
		}
	}
}

func TestRankSegmenterEdgeCases(t *testing.T) {
	d := DefaultSegmenter(1)
	if got := d.Detect(nil); got != nil {
		t.Errorf("nil series: %v", got)
	}
	if got := d.Detect(make([]float64, 100)); len(got) != 0 {
		t.Errorf("constant series: %v", got)
	}
	x := series(9, []float64{100, 300}, []int{30, 30}, 0.01, 0, 0)
	x[40] = math.NaN() // a broken point reads as slow, never panics
	x[45] = math.Inf(1)
	if got := d.Detect(x); len(got) != 1 || got[0].Index != 30 {
		t.Errorf("non-finite points: %+v", got)
	}
	// A change below MinAbsChange is not reported even when significant.
	y := series(10, []float64{1, 1.5}, []int{50, 50}, 0.01, 0, 0)
	if got := DefaultSegmenter(1).Detect(y); len(got) != 0 {
		t.Errorf("0.5 ms shift under a 1 ms floor: %+v", got)
	}
	if got := DefaultSegmenter(0.1).Detect(y); len(got) != 1 {
		t.Errorf("0.5 ms shift over a 0.1 ms floor: %+v", got)
	}
}

func TestWarmup(t *testing.T) {
	d := DefaultSegmenter(1)
	cases := []struct {
		name string
		x    []float64
		want int
	}{
		{"three slow first steps", append([]float64{900, 400, 300}, series(1, []float64{120}, []int{80}, 0.02, 0, 0)...), 3},
		{"long warm-up segment", series(2, []float64{200, 120}, []int{12, 100}, 0.02, 0, 0), 12},
		{"no warm-up", series(3, []float64{120}, []int{80}, 0.02, 0, 0), 0},
		{"onset is not warm-up", series(4, []float64{120, 250}, []int{10, 70}, 0.02, 0, 0), 0},
		{"slow start then onset", append([]float64{800}, series(5, []float64{120, 250}, []int{20, 60}, 0.02, 0, 0)...), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Warmup(c.x, d.Detect(c.x), 50, 0.1); got != c.want {
				t.Errorf("Warmup = %d, want %d", got, c.want)
			}
		})
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func BenchmarkRankSegmenter2000(b *testing.B) {
	x := series(1, []float64{100, 150, 110, 160}, []int{500, 500, 500, 500}, 0.05, 10, 5)
	d := DefaultSegmenter(1)
	for b.Loop() {
		d.Detect(x)
	}
}
