package stagefile

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// addCompressed seeds f with in gzipped, and cut short, so the fuzzer
// starts from valid gzip framing and mutates into the decompression path.
func addCompressed(f *testing.F, in []byte) {
	z := gz(f, in)
	f.Add(string(z))
	f.Add(string(z[:len(z)/2]))
	f.Add(string(z[:len(z)-5]))
}

// The decoders read files users hand us; they must never panic and every
// vector they accept must satisfy the job contract.
func FuzzReadJSONL(f *testing.F) {
	b, _ := os.ReadFile("testdata/sync_wait.jsonl")
	f.Add(string(b))
	f.Add(`{"job":{"id":"j"}}` + "\n" + `{"step":1,"rank":0,"durations_ms":[1,1,1,1,1],"wall_ms":5}`)
	addCompressed(f, b)
	f.Fuzz(func(t *testing.T, in string) {
		var vjob *signal.Job
		job, err := ReadJSONL(strings.NewReader(in), Sink{Vector: func(v *stagevec.Vector) error {
			if v.Validate(vjob) != nil {
				t.Fatalf("sink got an invalid vector %+v", v)
			}
			return nil
		}, Job: func(j *signal.Job) error { vjob = j; return nil }})
		if err == nil && job.Validate() != nil {
			t.Fatalf("accepted an invalid job: %v", job.Validate())
		}
	})
}

func FuzzReadCSV(f *testing.F) {
	b, _ := os.ReadFile("testdata/sync_wait.csv")
	f.Add(string(b))
	f.Add("step,rank,a,wall_ms\n1,0,1,2\n")
	addCompressed(f, b)
	f.Fuzz(func(t *testing.T, in string) {
		job, err := ReadCSV(strings.NewReader(in), "fuzz", Sink{})
		if err == nil {
			if verr := job.Validate(); verr != nil {
				t.Fatalf("accepted an invalid job: %v", verr)
			}
		}
	})
}

// memSource is an in-memory part that can be reopened, like a file.
func memSource(name string, data []byte, f Format) source {
	return source{name: name, format: f, open: func() (io.ReadCloser, bool, error) {
		return io.NopCloser(bytes.NewReader(data)), true, nil
	}}
}

// Two parts of one job, either may be CSV or gzipped: merging headers,
// inferring across parts and rereading must not panic, and what reaches
// the sink must satisfy the merged job.
func FuzzReadParts(f *testing.F) {
	jl, _ := os.ReadFile("testdata/sync_wait.jsonl")
	csv, _ := os.ReadFile("testdata/sync_wait.csv")
	f.Add(jl, jl, false)
	f.Add(jl, csv, true)
	f.Add(csv, csv, true)
	f.Add(jl, gz(f, csv), true)
	f.Add(gz(f, jl), []byte(`{"job":{"id":"fixture","world_size":4}}`), false)
	f.Add([]byte(`{"job":{"id":"j"}}`+"\n"+`{"step":1,"rank":2,"durations_ms":[1,1,1,1,1],"wall_ms":5}`), csv, true)
	f.Fuzz(func(t *testing.T, a, b []byte, bCSV bool) {
		fb := JSONL
		if bCSV {
			fb = CSV
		}
		var vjob *signal.Job
		srcs := []source{memSource("a.jsonl", a, JSONL), memSource("b", b, fb)}
		job, err := read(srcs, "fuzz", Sink{
			Job: func(j *signal.Job) error {
				if vjob != nil {
					t.Fatal("Job called twice")
				}
				vjob = j
				return nil
			},
			Vector: func(v *stagevec.Vector) error {
				if vjob == nil || v.Validate(vjob) != nil {
					t.Fatalf("sink got an invalid vector %+v", v)
				}
				return nil
			},
		})
		if err == nil && job.Validate() != nil {
			t.Fatalf("accepted an invalid job: %v", job.Validate())
		}
	})
}
