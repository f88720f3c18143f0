package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		q, w float64
	}{
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4, 5}, 0.1, 1.4},
		{[]float64{5}, 0.9, 5},
		{[]float64{1, 2}, -1, 1},
		{[]float64{1, 2}, 2, 2},
	} {
		if got := Quantile(c.xs, c.q); math.Abs(got-c.w) > 1e-12 {
			t.Errorf("Quantile(%v, %g) = %g, want %g", c.xs, c.q, got, c.w)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("empty: want NaN")
	}
}

func TestTrimmedMean(t *testing.T) {
	xs := []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1000}
	if got := TrimmedMean(xs, 0.1); got != 1 {
		t.Errorf("one outlier of 10 trimmed at 10%%: got %g, want 1", got)
	}
	if got := TrimmedMean(xs, 0); math.Abs(got-100.9) > 1e-9 {
		t.Errorf("trim 0 is the mean: got %g", got)
	}
	if got := TrimmedMean([]float64{4}, 0.4); got != 4 {
		t.Errorf("single value: %g", got)
	}
	if !math.IsNaN(TrimmedMean(nil, 0.1)) {
		t.Error("empty: want NaN")
	}
}

func TestTwoProportionZ(t *testing.T) {
	if z := TwoProportionZ(50, 100, 50, 100); z != 0 {
		t.Errorf("equal shares: z %g", z)
	}
	if z := TwoProportionZ(120, 420, 0, 900); z < 10 {
		t.Errorf("120/420 vs 0/900: z %g, want large", z)
	}
	if z := TwoProportionZ(0, 100, 10, 100); z >= 0 {
		t.Errorf("lower share must give negative z: %g", z)
	}
	if TwoProportionZ(1, 0, 1, 1) != 0 || TwoProportionZ(0, 10, 0, 10) != 0 {
		t.Error("degenerate inputs must give 0")
	}
}

func TestUpperZ(t *testing.T) {
	if z := UpperZ(0.025, 1); math.Abs(z-1.959964) > 1e-5 {
		t.Errorf("UpperZ(0.025,1) = %g", z)
	}
	if UpperZ(0.01, 10) <= UpperZ(0.01, 1) {
		t.Error("Bonferroni over more tests must raise z")
	}
}

func TestBinomialUpperTail(t *testing.T) {
	for _, c := range []struct {
		k, n int
		p, w float64
	}{
		{0, 10, 0.5, 1},
		{11, 10, 0.5, 0},
		{10, 10, 0.5, 1.0 / 1024},
		{9, 10, 0.5, 11.0 / 1024},
		{5, 10, 0.5, 638.0 / 1024},
		{1, 3, 0.2, 1 - 0.512},
	} {
		if got := BinomialUpperTail(c.k, c.n, c.p); math.Abs(got-c.w) > 1e-12 {
			t.Errorf("BinomialUpperTail(%d, %d, %g) = %g, want %g", c.k, c.n, c.p, got, c.w)
		}
	}
}
