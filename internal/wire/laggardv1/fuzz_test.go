package laggardv1

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// checkErr asserts the decoder error contract: a size error or a
// FieldError naming a field.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrTooLarge) {
		return
	}
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field == "" {
		t.Fatalf("error is not a FieldError with a field: %T %v", err, err)
	}
}

func checkValid(t *testing.T, vs []stagevec.Vector, job *signal.Job) {
	t.Helper()
	for i := range vs {
		if err := vs[i].Validate(job); err != nil {
			t.Fatalf("decoder returned invalid vector %d: %v", i, err)
		}
	}
}

// sameVectors is reflect.DeepEqual with NaN equal to itself (a probe that
// was not ready may carry any value).
func sameVectors(a, b []stagevec.Vector) bool {
	if len(a) != len(b) {
		return false
	}
	eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	for i := range a {
		x, y := a[i], b[i]
		if x.Step != y.Step || x.Rank != y.Rank || x.Micro != y.Micro || !eq(x.WallMS, y.WallMS) || x.DataLead != y.DataLead ||
			x.Dropped != y.Dropped || x.Nested != y.Nested || len(x.Durations) != len(y.Durations) || len(x.Probes) != len(y.Probes) {
			return false
		}
		for j := range x.Durations {
			if !eq(x.Durations[j], y.Durations[j]) {
				return false
			}
		}
		for k, p := range x.Probes {
			q, ok := y.Probes[k]
			if !ok || p.Ready != q.Ready || !eq(p.Value, q.Value) {
				return false
			}
		}
	}
	return true
}

func FuzzDecodeJSONBatch(f *testing.F) {
	good, _ := json.Marshal(map[string]any{"vectors": goodVectors()})
	f.Add(good)
	f.Add([]byte(`{"vectors":[{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}]}`))
	f.Add([]byte(`{"vectors":null}`))
	f.Add([]byte(`{"vectors":[{"step":1,"rank":0,"durations_ms":[1],"wall_ms":1}]}`))
	f.Add([]byte(`{"vectors":[{"probes":{"model.fwd_loss_cuda_event_ms":{"value_ms":-1,"ready":true}}}]}`))
	f.Add([]byte(`{"vectors":[],"x":1}`))
	f.Add([]byte(`[`))
	job := testJob()
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := DecodeJSONBatch(bytes.NewReader(b), job, 1<<16)
		if err != nil {
			checkErr(t, err)
			return
		}
		checkValid(t, vs, job)
		// Whatever was accepted must survive an encode/decode round trip
		// in both encodings.
		js, err := json.Marshal(map[string]any{"vectors": vs})
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeJSONBatch(bytes.NewReader(js), job, 0)
		if err != nil || !sameVectors(vs, again) {
			t.Fatalf("JSON round trip: %v\n%+v\n%+v", err, vs, again)
		}
		pbb, err := EncodeProtoBatch(vs)
		if err != nil {
			t.Fatal(err)
		}
		again, err = DecodeProtoBatch(bytes.NewReader(pbb), job, 0)
		if err != nil || !sameVectors(vs, again) {
			t.Fatalf("proto round trip: %v", err)
		}
	})
}

func FuzzDecodeProtoBatch(f *testing.F) {
	good, _ := EncodeProtoBatch(goodVectors())
	f.Add(good)
	bad, _ := EncodeProtoBatch([]stagevec.Vector{{Step: -1, Rank: 9, Durations: []float64{math.Inf(1)}}})
	f.Add(bad)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x05, 0x01})
	f.Add([]byte{0x48, 0x01})
	job := testJob()
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := DecodeProtoBatch(bytes.NewReader(b), job, 1<<16)
		if err != nil {
			checkErr(t, err)
			return
		}
		checkValid(t, vs, job)
		again, err := EncodeProtoBatch(vs)
		if err != nil {
			t.Fatal(err)
		}
		vs2, err := DecodeProtoBatch(bytes.NewReader(again), job, 0)
		if err != nil || !sameVectors(vs, vs2) {
			t.Fatalf("proto round trip: %v", err)
		}
	})
}

func FuzzDecodeJob(f *testing.F) {
	f.Add("j1", `{"id":"j1","name":"n","world_size":8,"schema":{"version":"v","stages":["a","step.other_cpu_wall"],"probes":["p"]},"accumulation":4,"labels":{"k":"v"}}`)
	f.Add("j2", `{"world_size":2,"ranks":[{"rank":1,"role":{"dp":1}}]}`)
	f.Add("", `{"id":"x","world_size":-1}`)
	f.Add("j", `{"world_size":2,"schema":{"stages":"a"}}`)
	f.Fuzz(func(t *testing.T, id, body string) {
		j, _, err := DecodeJob(strings.NewReader(body), id, 1<<16)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("decoded job does not validate: %v", err)
		}
		if id != "" && j.ID != id {
			t.Fatalf("job id %q, URL id %q", j.ID, id)
		}
	})
}

func FuzzDecodeRank(f *testing.F) {
	f.Add(`{"rank":3,"host":"h","local_rank":1,"role":{"dp":3,"tp":0,"pp":1,"ep":-1,"name":"dense"}}`)
	f.Add(`{"rank":0}`)
	f.Add(`{"rank":-1}`)
	f.Add(`{"rank":0,"role":null}`)
	job := testJob()
	f.Fuzz(func(t *testing.T, body string) {
		rk, _, err := DecodeRank(strings.NewReader(body), job, 1<<16)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := rk.Validate(job.WorldSize); err != nil {
			t.Fatalf("decoded rank does not validate: %v", err)
		}
	})
}

// FuzzVectorValues drives both decoders with vectors whose numbers range
// over every float64 and int64 bit pattern (the byte-valued targets above
// rarely leave 0–255), so 1e308, subnormals, -0, NaN, ±Inf and the int64
// edges are all reached. Whatever is accepted must lie within the value
// bounds, JSON and protobuf must agree on it, and errors stay short.
func FuzzVectorValues(f *testing.F) {
	f.Add(math.Float64bits(1), math.Float64bits(2), math.Float64bits(3), math.Float64bits(1.5), uint64(1), uint64(0), false)
	f.Add(math.Float64bits(1e308), math.Float64bits(-0.0), math.Float64bits(stagevec.MaxDurationMS), math.Float64bits(math.NaN()), uint64(1)<<62, uint64(math.MaxInt64), true)
	f.Add(math.Float64bits(math.SmallestNonzeroFloat64), math.Float64bits(stagevec.MaxDurationMS+1), math.Float64bits(math.Inf(1)), math.Float64bits(-1), uint64(stagevec.MaxStep), uint64(1)<<63, false)
	job := testJob()
	f.Fuzz(func(t *testing.T, d0, d1, wall, probe, step, dropped uint64, ready bool) {
		v := stagevec.Vector{Step: int64(step), Rank: 1, Durations: []float64{math.Float64frombits(d0), math.Float64frombits(d1), 1, 1, 1}, WallMS: math.Float64frombits(wall),
			Dropped: int64(dropped), Probes: map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: math.Float64frombits(probe), Ready: ready}}}
		pbb, err := EncodeProtoBatch([]stagevec.Vector{v})
		if err != nil {
			t.Fatal(err)
		}
		pvs, perr := DecodeProtoBatch(bytes.NewReader(pbb), job, 0)
		// JSON cannot carry NaN or ±Inf; write them as the nearest a
		// client could send (1e999 overflows the parser).
		num := func(x float64) string {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "1e999"
			}
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		js := `{"vectors":[{"step":` + strconv.FormatInt(v.Step, 10) + `,"rank":1,"durations_ms":[` + num(v.Durations[0]) + `,` + num(v.Durations[1]) +
			`,1,1,1],"wall_ms":` + num(v.WallMS) + `,"dropped":` + strconv.FormatInt(v.Dropped, 10) +
			`,"probes":{"` + stagevec.ProbeForwardCUDA + `":{"value_ms":` + num(math.Float64frombits(probe)) + `,"ready":` + strconv.FormatBool(ready) + `}}}]}`
		jvs, jerr := DecodeJSONBatch(strings.NewReader(js), job, 0)
		for _, e := range []error{perr, jerr} {
			if e != nil {
				checkErr(t, e)
				if len(e.Error()) > 1024 {
					t.Fatalf("error of %d bytes", len(e.Error()))
				}
			}
		}
		if perr == nil {
			checkValid(t, pvs, job)
			if jerr != nil && !strings.Contains(js, "1e999") {
				t.Fatalf("protobuf accepted what JSON refused: %v", jerr)
			}
		}
		if jerr == nil {
			checkValid(t, jvs, job)
			if perr != nil {
				t.Fatalf("JSON accepted what protobuf refused: %v", perr)
			}
			if !sameVectors(jvs, pvs) {
				t.Fatalf("JSON and protobuf disagree:\n%+v\n%+v", jvs, pvs)
			}
		}
	})
}
