package analysis

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
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

// FuzzRunAnyValues: stage vectors with arbitrary float64 bits (NaN, ±Inf,
// 1e308, negatives, subnormals), arbitrary int64 steps and data leads,
// and an arbitrary window (from/to/last/reference, any int64) — what an
// older version may have stored, or a file handed to `laggard analyze`.
// Run never panics, and returns either an error or a report that
// JSON-encodes (issue 6 D5, D12).
func FuzzRunAnyValues(f *testing.F) {
	rec := func(step int64, rank, lead byte, ds ...float64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(step))
		b = append(b, rank, lead)
		for i := range 6 {
			x := 0.0
			if i < len(ds) {
				x = ds[i]
			}
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return b
	}
	seed := func(world, mode byte, from, to int64, recs ...[]byte) []byte {
		b := []byte{world, mode}
		b = binary.LittleEndian.AppendUint64(b, uint64(from))
		b = binary.LittleEndian.AppendUint64(b, uint64(to))
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	var normal [][]byte
	for s := int64(0); s < 12; s++ {
		for r := byte(0); r < 3; r++ {
			normal = append(normal, rec(s, r, 0, 1, 10, 20+float64(r), 2, 3, 36+float64(r)))
		}
	}
	f.Add(seed(3, 0, 0, 0, normal...))
	f.Add(seed(3, 1, 0, math.MaxInt64, append(normal, rec(math.MaxInt64, 1, 0, 1e308, 1e308, 1, 1, 1, math.MaxFloat64))...))
	f.Add(seed(3, 2, 5, 0, append(normal, rec(1<<62, 0, 3, 1, 2, 3, 4, 5, 15))...))
	f.Add(seed(2, 3, 0, 3, append(normal, rec(4, 1, 1, math.NaN(), math.Inf(1), -1, 0, 5e-324, math.Inf(-1)))...))
	f.Add(seed(4, 4, math.MaxInt64-1, math.MaxInt64, normal...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 18 {
			return
		}
		world := 1 + int(data[0]%5)
		mode := data[1]
		x := int64(binary.LittleEndian.Uint64(data[2:]))
		y := int64(binary.LittleEndian.Uint64(data[10:]))
		job := &signal.Job{ID: "f", WorldSize: world, Schema: stagevec.DefaultSchema()}
		if mode&0x20 != 0 {
			job.Accumulation = 2
		}
		m := NewMemSource(job)
		const size = 8 + 2 + 6*8
		for rest := data[18:]; len(rest) >= size; rest = rest[size:] {
			v := stagevec.Vector{Step: int64(binary.LittleEndian.Uint64(rest)), Rank: int(rest[8]) % world, DataLead: int(rest[9] % 4)}
			if rest[9]&0x80 != 0 {
				v.Micro = 1
			}
			for i := range 6 {
				v.Durations = append(v.Durations, math.Float64frombits(binary.LittleEndian.Uint64(rest[10+8*i:])))
			}
			v.WallMS, v.Durations = v.Durations[5], v.Durations[:5]
			if err := m.Add(&v); err != nil {
				t.Fatal(err)
			}
		}
		m.Seal()
		req := Request{Job: "f"}
		switch mode % 6 {
		case 1:
			req.From, req.To = &x, &y
		case 2:
			req.From = &x
		case 3:
			req.Last = 1 + int(uint64(x)%(maxLast))
		case 4:
			req.RefFrom, req.RefTo = &x, &y
		case 5:
			req.To = &y
		}
		// Only what ParseRequest admits reaches Run from the API and CLI.
		if _, err := ParseRequest("f", req.Values()); err != nil {
			return
		}
		rep, err := New(m, Limits{MaxCells: 1 << 16}).Run(context.Background(), req)
		if err != nil {
			if errors.Is(err, ErrInternal) {
				t.Fatalf("analysis panicked: %v", err)
			}
			return
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("report does not encode: %v", err)
		}
		if h := rep.Headline.Rank; h < -1 || h >= world {
			t.Fatalf("headline names rank %d of %d", h, world)
		}
	})
}
