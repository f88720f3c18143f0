package stagefile

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func collect(t *testing.T, read func(fn func(*stagevec.Vector) error) (*signal.Job, error)) (*signal.Job, []stagevec.Vector) {
	t.Helper()
	var vs []stagevec.Vector
	job, err := read(func(v *stagevec.Vector) error { vs = append(vs, *v); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return job, vs
}

func TestReadJSONLAndCSVAgree(t *testing.T) {
	fj, _ := os.Open("testdata/sync_wait.jsonl")
	defer fj.Close()
	jj, vj := collect(t, func(fn func(*stagevec.Vector) error) (*signal.Job, error) { return ReadJSONL(fj, Sink{Vector: fn}) })
	fc, _ := os.Open("testdata/sync_wait.csv")
	defer fc.Close()
	jc, vc := collect(t, func(fn func(*stagevec.Vector) error) (*signal.Job, error) {
		return ReadCSV(fc, "fixture", Sink{Vector: fn})
	})
	if jj.WorldSize != 3 || jc.WorldSize != 3 {
		t.Fatalf("world sizes %d %d, want 3", jj.WorldSize, jc.WorldSize)
	}
	if jj.Schema.OrderHash() != jc.Schema.OrderHash() {
		t.Fatalf("schemas differ: %v vs %v", jj.Schema.Stages, jc.Schema.Stages)
	}
	if len(vj) != 3 || len(vc) != 3 {
		t.Fatalf("vector counts %d %d", len(vj), len(vc))
	}
	for i := range vj {
		if vj[i].Rank != vc[i].Rank || vj[i].WallMS != vc[i].WallMS || len(vj[i].Durations) != len(vc[i].Durations) {
			t.Fatalf("vector %d differs: %+v vs %+v", i, vj[i], vc[i])
		}
		for s := range vj[i].Durations {
			if vj[i].Durations[s] != vc[i].Durations[s] {
				t.Fatalf("vector %d stage %d: %v vs %v", i, s, vj[i].Durations[s], vc[i].Durations[s])
			}
		}
	}
}

func TestErrorsNameLineAndField(t *testing.T) {
	head := `{"job":{"id":"j","world_size":2,"schema":{"version":"v","stages":["a","step.other_cpu_wall"]}}}` + "\n"
	cases := []struct {
		name, in, want string
	}{
		{"no header", `{"step":1}` + "\n", "line 1"},
		{"bad json", head + "{nope\n", "line 2"},
		{"negative duration", head + `{"step":1,"rank":0,"durations_ms":[-1],"wall_ms":1}` + "\n", "line 2: durations_ms"},
		{"rank out of world", head + `{"step":1,"rank":0,"durations_ms":[1],"wall_ms":1}` + "\n" + `{"step":1,"rank":5,"durations_ms":[1],"wall_ms":1}` + "\n", "line 3: rank"},
		{"unknown field", head + `{"step":1,"rank":0,"durations":[1],"wall_ms":1}` + "\n", "line 2"},
		{"wrong length", head + `{"step":1,"rank":0,"durations_ms":[1,2,3],"wall_ms":1}` + "\n", "durations_ms"},
		{"bad schema", `{"job":{"id":"j","world_size":2,"schema":{"version":"v","stages":["a","b"]}}}` + "\n", "schema.stages"},
		{"empty", "", "no job header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(c.in), Sink{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	_, err := ReadCSV(strings.NewReader("step,rank,a,wall_ms\n1,0,1,2\n1,x,1,2\n"), "j", Sink{})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "rank") {
		t.Fatalf("csv err = %v, want line 3 naming rank", err)
	}
	_, err = ReadCSV(strings.NewReader("rank,a,wall_ms\n"), "j", Sink{})
	if err == nil || !strings.Contains(err.Error(), "step") {
		t.Fatalf("missing step column: err = %v", err)
	}
}

func TestInferWorldSize(t *testing.T) {
	in := `{"job":{"id":"j"}}` + "\n" + `{"step":1,"rank":3,"durations_ms":[1,1,1,1,1],"wall_ms":5}` + "\n"
	job, vs := collect(t, func(fn func(*stagevec.Vector) error) (*signal.Job, error) {
		return ReadJSONL(strings.NewReader(in), Sink{Vector: fn})
	})
	if job.WorldSize != 4 || len(vs) != 1 || len(job.Schema.Stages) != 6 {
		t.Fatalf("job %+v, %d vectors", job, len(vs))
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	job := &signal.Job{ID: "rt", WorldSize: 2, Schema: stagevec.DefaultSchema()}
	src := []stagevec.Vector{
		{Step: 7, Rank: 0, Durations: []float64{1, 2, 3, 4, 5, 0.5}, WallMS: 15.5, Probes: map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 1.5, Ready: true}}},
		{Step: 7, Rank: 1, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 15, DataLead: 1, Dropped: 2},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, job)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if err := w.Write(&src[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, vs := collect(t, func(fn func(*stagevec.Vector) error) (*signal.Job, error) { return ReadJSONL(&buf, Sink{Vector: fn}) })
	if got.ID != "rt" || len(vs) != 2 || vs[1].Dropped != 2 || vs[1].DataLead != 1 || !vs[0].Probes[stagevec.ProbeForwardCUDA].Ready {
		t.Fatalf("round trip lost data: %+v %+v", got, vs)
	}
}
