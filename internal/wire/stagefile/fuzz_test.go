package stagefile

import (
	"os"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// The decoders read files users hand us; they must never panic and every
// vector they accept must satisfy the job contract.
func FuzzReadJSONL(f *testing.F) {
	b, _ := os.ReadFile("testdata/sync_wait.jsonl")
	f.Add(string(b))
	f.Add(`{"job":{"id":"j"}}` + "\n" + `{"step":1,"rank":0,"durations_ms":[1,1,1,1,1],"wall_ms":5}`)
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
	f.Fuzz(func(t *testing.T, in string) {
		job, err := ReadCSV(strings.NewReader(in), "fuzz", Sink{})
		if err == nil {
			if verr := job.Validate(); verr != nil {
				t.Fatalf("accepted an invalid job: %v", verr)
			}
		}
	})
}
