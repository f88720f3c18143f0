package stagefrontier

import (
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// benchWindow builds a T×R default-schema window directly (no Assembler) so
// the benchmark input is the dense arrays only, with one data-late rank per
// step to keep the frontier honest.
func benchWindow(T, R int) *stagevec.Window {
	rng := rand.New(rand.NewPCG(1, 2))
	w := denseWindow(T, R)
	base := [6]float64{5, 40, 90, 2, 10, 1}
	S := 6
	for t := 0; t < T; t++ {
		late := rng.IntN(R)
		for r := 0; r < R; r++ {
			row := w.D[(t*R+r)*S : (t*R+r+1)*S]
			tot := 0.0
			for s := range row {
				row[s] = base[s] * (0.9 + 0.2*rng.Float64())
				tot += row[s]
			}
			if r == late {
				row[0] += 60
				tot += 60
			}
			w.Wall[t*R+r] = tot
		}
	}
	return w
}

func BenchmarkAnalyze16kx1000(b *testing.B) {
	w := benchWindow(1000, 16384)
	cfg := DefaultConfig()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Analyze(w, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAnalyze1kx200(b *testing.B) {
	w := benchWindow(200, 1024)
	cfg := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Analyze(w, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssemble1kx200 streams 1,024 ranks × 200 steps through the
// assembler, reusing one vector so only the assembler allocates.
func BenchmarkAssemble1kx200(b *testing.B) {
	const T, R = 200, 1024
	job := testJob(R, 1)
	job.Schema.Probes = nil
	v := &stagevec.Vector{Durations: []float64{5, 40, 90, 2, 10}, WallMS: 150}
	b.ReportAllocs()
	for b.Loop() {
		a := NewAssembler(job, AssembleOptions{FromStep: 0, ToStep: T - 1})
		for t := 0; t < T; t++ {
			for r := 0; r < R; r++ {
				v.Step, v.Rank = int64(t), r
				if err := a.Add(v); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := a.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(T*R), "vectors/op")
}
