package stagefrontier

import (
	"math"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// FuzzAssembleAnalyze decodes arbitrary bytes into stage vectors (the
// outside input the engine sees) and checks that assembly and analysis
// never panic and that accounting stays exact (Theorem 1).
func FuzzAssembleAnalyze(f *testing.F) {
	f.Add([]byte{3, 1, 0, 10, 20, 50, 0, 10, 1, 1, 40, 20, 20, 0, 10})
	f.Add([]byte{2, 2, 1, 5, 5, 5, 5, 5, 200, 0, 0, 9, 9, 9, 9, 9, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		world, acc := 1+int(data[0]%6), 1+int(data[1]%3)
		job := testJob(world, acc)
		a := NewAssembler(job, AssembleOptions{FromStep: int64(data[2] % 3)})
		rest := data[3:]
		for len(rest) >= 8 {
			b := rest[:8]
			rest = rest[8:]
			v := &stagevec.Vector{
				Step: int64(b[0] % 8), Rank: int(b[1]) % world, Micro: int(b[2]) % acc,
				Durations: []float64{float64(b[3]), float64(b[4]) / 4, float64(b[5]), float64(b[6] % 7), float64(b[7] % 5)},
				WallMS:    float64(b[3]) + float64(b[5]) + float64(b[7]), DataLead: int(b[0]>>6) % 3,
			}
			if b[2]&0x80 != 0 {
				v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: float64(b[4]), Ready: b[4]&1 == 0}}
			}
			if err := a.Add(v); err != nil {
				t.Fatalf("valid vector rejected: %v", err)
			}
		}
		w, err := a.Finish()
		if err != nil {
			return // empty window
		}
		rep, err := Analyze(w, DefaultConfig())
		if err != nil {
			t.Fatalf("Analyze: %v", err)
		}
		if d := math.Abs(sumOf(rep.AdvanceMS) - rep.ExposedMS); d > 1e-9*math.Max(1, rep.ExposedMS) {
			t.Fatalf("telescoping broken by %v", d)
		}
		if len(rep.Labels) == 0 || rep.Labels[0].Name != LabelFrontierAccounting {
			t.Fatalf("labels %v", rep.Labels)
		}
	})
}
