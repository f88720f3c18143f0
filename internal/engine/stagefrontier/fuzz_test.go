package stagefrontier

import (
	"encoding/binary"
	"encoding/json"
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

// FuzzAnalyzeAnyValues feeds Analyze a window built directly — bypassing
// the assembler's validation — with arbitrary float64 bits in every cell,
// wall and closure (NaN, ±Inf, 1e308, negatives) and arbitrary ascending
// int64 steps: Analyze never panics, and either refuses the window or
// returns a report that JSON-encodes (issue 6 D5).
func FuzzAnalyzeAnyValues(f *testing.F) {
	f.Add(uint8(2), uint8(3), []byte{0, 0, 0, 0, 0, 0, 0x40, 0x59})
	f.Add(uint8(1), uint8(2), binary.LittleEndian.AppendUint64(nil, math.Float64bits(1e308)))
	f.Add(uint8(3), uint8(1), binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.MaxFloat64)))
	f.Fuzz(func(t *testing.T, rr, tt uint8, data []byte) {
		R, T := 1+int(rr%4), 1+int(tt%4)
		w := denseWindow(T, R)
		next := func(i int) float64 {
			if len(data) < 8 {
				return 1
			}
			j := (8 * i) % (len(data) - 7)
			return math.Float64frombits(binary.LittleEndian.Uint64(data[j:]))
		}
		k := 0
		for i := range w.D {
			w.D[i] = next(k)
			k++
		}
		for i := range w.Wall {
			w.Wall[i], w.Closure[i] = next(k), next(k+1)
			k += 2
		}
		step := int64(0)
		for i := range w.Steps {
			if i > 0 {
				step += 1 + int64(uint64(math.Float64bits(next(k)))%(1<<62))
				if step < 0 {
					return
				}
				k++
			}
			w.Steps[i] = step
		}
		rep, err := Analyze(w, DefaultConfig())
		if err != nil {
			return
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("report does not encode: %v", err)
		}
	})
}
