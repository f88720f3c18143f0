package kineto

import (
	"bytes"
	"os"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// FuzzDecode: no panic on any input, every emitted event validates, and
// retained strings stay within their bounds.
func FuzzDecode(f *testing.F) {
	golden, err := os.ReadFile("testdata/rank1.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add(gz(f, golden))
	f.Add(synthetic(f, 4<<10))
	for _, s := range []string{
		`{}`, `[]`, `[{"ph":"X","name":"a","ts":1,"dur":1}]`,
		`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":"x","tid":"stream 3","ts":1.5e3,"dur":1,"args":{"device":1,"correlation":"9","Seq":2,"pg_name":"p"}}]}`,
		`{"distributedInfo":{"rank":2,"world_size":4,"backend":"gloo"},"baseTimeNanoseconds":5}`,
		`[{"ph":"X","name":"ProfilerStep#9","ts":0,"dur":10},{"ph":"X","name":"a","ts":1,"dur":1,"args":{"correlation":3}},{"ph":"s","id":3,"ts":1}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Decode(bytes.NewReader(data), Options{KeepArgs: true, CorrelationWindow: 64}, func(e *optrace.Event) error {
			if err := e.Validate(); err != nil {
				t.Fatalf("emitted invalid event %+v: %v", *e, err)
			}
			return nil
		})
	})
}
