package kineto

import (
	"bytes"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// TestMutationsTerminate: random byte edits of the seeds must end (the
// fuzzer cannot report a hang itself).
func TestMutationsTerminate(t *testing.T) {
	golden, _ := os.ReadFile("testdata/rank1.json")
	seeds := [][]byte{golden, gz(t, golden), synthetic(t, 4<<10), []byte(`{}`), []byte(`[{"ph":"X","name":"a","ts":1,"dur":1}]`)}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 5000; i++ {
		d := append([]byte(nil), seeds[i%len(seeds)]...)
		for j := 0; j < 1+r.Intn(4); j++ {
			if len(d) == 0 {
				break
			}
			p := r.Intn(len(d))
			switch r.Intn(4) {
			case 0:
				d[p] = byte(r.Intn(256))
			case 1:
				d = d[:p]
			case 2:
				d = append(d[:p], d[p+1:]...)
			case 3:
				d = append(d[:p], append([]byte{byte(r.Intn(256))}, d[p:]...)...)
			}
		}
		done := make(chan struct{})
		go func() {
			Decode(bytes.NewReader(d), Options{KeepArgs: true, CorrelationWindow: 64}, func(e *optrace.Event) error { return nil })
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			os.WriteFile("/tmp/kineto_hang.json", d, 0o644)
			t.Fatalf("hang on input %d", i)
		}
	}
}
