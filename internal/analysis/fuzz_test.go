package analysis

import (
	"context"
	"encoding/binary"
	"math"
	"net/url"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// FuzzParseRequest: any query string either parses into a request that
// round-trips through Values, or is refused with a FieldError — never a
// panic, never an invalid window.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"", "last=5", "from=1&to=3", "tau=0.5&model_fit=1", "from=9&to=1", "ref_from=1&ref_to=2&compare=x", "last=-1", "no_reference"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		r, err := ParseRequest("j", q)
		if err != nil {
			if !isField(err, ParamFrom) && !isField(err, ParamTo) && !isField(err, ParamLast) && !isField(err, ParamRefFrom) &&
				!isField(err, ParamRefTo) && !isField(err, ParamTau) && !isField(err, ParamModelFit) && !isField(err, ParamNoRef) && !isField(err, ParamCompare) {
				t.Fatalf("%q: error is not a FieldError on a parameter: %v", s, err)
			}
			return
		}
		if r.From != nil && r.To != nil && *r.To < *r.From {
			t.Fatalf("%q: accepted an inverted window", s)
		}
		if r.Tau != nil && !(*r.Tau > 0 && *r.Tau <= 1) {
			t.Fatalf("%q: accepted tau %v", s, *r.Tau)
		}
		back, err := ParseRequest("j", r.Values())
		if err != nil || !sameRequest(r, back) {
			t.Fatalf("%q: round trip %+v → %+v (%v)", s, r, back, err)
		}
	})
}

// FuzzRun: arbitrary (valid) stage vectors of a small job through the whole
// analysis — time axis, default window, references, headline — never
// panic, and whatever rank the headline names is a rank of the job.
func FuzzRun(f *testing.F) {
	f.Add([]byte{4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(make([]byte, 400))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		world := 1 + int(data[0]%5)
		job := &signal.Job{ID: "f", WorldSize: world, Schema: stagevec.DefaultSchema()}
		m := NewMemSource(job)
		rest := data[1:]
		for len(rest) >= 7 {
			b := rest[:7]
			rest = rest[7:]
			d := []float64{float64(b[2]), float64(b[3]) / 2, float64(b[4]), float64(b[5] % 9), float64(b[6] % 5)}
			wall := 0.0
			for _, x := range d {
				wall += x
			}
			step := int64(binary.LittleEndian.Uint16([]byte{b[0], b[1] & 0x3}))
			if err := m.Add(&stagevec.Vector{Step: step, Rank: int(b[1]>>2) % world, Durations: d, WallMS: wall}); err != nil {
				t.Fatal(err)
			}
		}
		m.Seal()
		rep, err := New(m, Limits{}).Run(context.Background(), Request{Job: "f"})
		if err != nil {
			return // no vectors, or nothing in the window
		}
		if h := rep.Headline.Rank; h < -1 || h >= world {
			t.Fatalf("headline names rank %d of %d", h, world)
		}
		for _, g := range rep.Groups {
			if e := g.Report.TelescopeErrMS; math.IsNaN(e) || e > 1e-6*math.Max(1, g.Report.ExposedMS) {
				t.Fatalf("telescoping error %v", e)
			}
		}
	})
}
