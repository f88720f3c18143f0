package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

func TestCleanString(t *testing.T) {
	for _, c := range []struct {
		in      string
		max     int
		want    string
		changed bool
	}{
		{"python3", 16, "python3", false},
		{"py\xffthon", 16, "py\uFFFDthon", true},
		{"héllo", 2, "h", true}, // clipped on a rune boundary, never inside é
		{"héllo", 3, "hé", true},
		{"\xc3", 16, "\uFFFD", true},
	} {
		got, changed := cleanString(c.in, c.max)
		if got != c.want || changed != c.changed || !utf8.ValidString(got) || len(got) > c.max {
			t.Errorf("cleanString(%q, %d) = %q, %v; want %q, %v", c.in, c.max, got, changed, c.want, c.changed)
		}
	}
}

func TestCleanIDValidAndInjective(t *testing.T) {
	ids := []string{"c0ffee", "nccl:\xff", "nccl:\xfe", "has space", "a%ff", strings.Repeat("\x01", 200), strings.Repeat("\x02", 200)}
	seen := map[string]string{}
	for _, id := range ids {
		got, changed := cleanID(id)
		if id == "c0ffee" && (changed || got != id) {
			t.Errorf("a valid id changed: %q → %q", id, got)
		}
		if err := (&collective.Comm{ID: got, Size: 1}).Validate(0); err != nil && strings.Contains(err.Error(), "id") {
			t.Errorf("cleanID(%q) = %q is not a valid id: %v", id, got, err)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%q and %q both became %q", prev, id, got)
		}
		seen[got] = id
		if again, _ := cleanID(id); again != got {
			t.Errorf("cleanID(%q) not deterministic", id)
		}
	}
}

// TestInvalidUTF8StacksStillShipped: a process named with invalid UTF-8
// (prctl PR_SET_NAME takes any bytes) and a Python function name that is
// not UTF-8 made the whole node window fail to encode and drop (issue 16
// item 8a). The agent repairs the strings and ships every sample.
func TestInvalidUTF8StacksStillShipped(t *testing.T) {
	me := os.Getpid()
	reg := fakeRegistry{{PID: me, Job: "j", Rank: 0, World: 2}}
	mk := func(rankOf func(int) (int, bool)) []*stack.Batch {
		s, _ := rankOf(me)
		return []*stack.Batch{{Node: "n\xff1", StartNS: t0, EndNS: t0 + 5e9, Hz: 99, Ratio: 0.1, Samples: []stack.Sample{
			{Rank: s, PID: me, TID: me, Comm: "train", Count: 3, Frames: []stack.Frame{{Kind: stack.Python, Mapping: -1, Func: "step", File: "t.py"}}},
			{Rank: s, PID: me, TID: me + 1, Comm: "wörk\xe9r", Thread: "\xff", Count: 2, Frames: []stack.Frame{{Kind: stack.Python, Mapping: -1, Func: "lo\xc3ss", File: "t\xfe.py"}}},
		}}}
	}
	srv := newProfServer()
	a, _, _ := startAgent(t, srv, Config{ProfileOn: true}, &fakeProfiler{mk: mk}, nil, reg)
	waitFor(t, "the window", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.stacks["j"]) == 1
	})
	srv.mu.Lock()
	b := srv.stacks["j"][0]
	srv.mu.Unlock()
	if len(b.Samples) != 2 || b.Samples[1].Comm != "wörk\uFFFDr" || b.Samples[1].Frames[0].Func != "lo\uFFFDss" {
		t.Fatalf("shipped %+v", b.Samples)
	}
	if v := counterValue(t, a.metrics, "laggard_agent_strings_sanitized_total", "stacks"); v != 5 {
		t.Errorf("sanitized strings counted %v, want 5 (node, comm, thread, func, file)", v)
	}
}

// TestShipperDropsOnlyTheRefusedCall: the server's 400 names the record
// (calls[i]); the agent drops that call alone and sends the rest again,
// where it used to drop the whole batch.
func TestShipperDropsOnlyTheRefusedCall(t *testing.T) {
	var mu sync.Mutex
	var got []collective.Call
	var dropped int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b, err := laggardv1.UnmarshalProtoCollectives(body, 0)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		for i, c := range b.Calls {
			if c.Comm == "refused" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(400)
				json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("calls[%d].comm: not registered", i), "field": fmt.Sprintf("calls[%d].comm", i)})
				return
			}
		}
		mu.Lock()
		got = append(got, b.Calls...)
		dropped += b.Dropped
		mu.Unlock()
	}))
	defer srv.Close()
	s := &Shipper{Server: srv.URL}
	calls := testCalls(5)
	calls[2].Comm = "refused"
	s.Add("j", 2, nil, calls, 0)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 || dropped != 1 {
		t.Fatalf("server got %d calls, %d reported dropped; want 4 and 1", len(got), dropped)
	}
	for _, c := range got {
		if c.Comm == "refused" {
			t.Fatal("the refused call was stored")
		}
	}
}

func TestCollectiveStringsSanitized(t *testing.T) {
	fs := &fakeServer{}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	s := &Shipper{Server: srv.URL}
	comm := testComm
	comm.ID, comm.Host = "c\xff", "h\xfe"
	calls := testCalls(2)
	for i := range calls {
		calls[i].Comm = "c\xff"
	}
	s.Add("j", 2, []collective.Comm{comm}, calls, 0)
	s.Flush(context.Background())
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.batches) != 1 || len(fs.batches[0].Calls) != 2 || len(fs.batches[0].Comms) != 1 {
		t.Fatalf("batches %+v", fs.batches)
	}
	b := fs.batches[0]
	if b.Comms[0].ID != b.Calls[0].Comm || b.Comms[0].ID != "c%ff" {
		t.Fatalf("comm id %q, calls name %q: want the same escaped id", b.Comms[0].ID, b.Calls[0].Comm)
	}
}

// counterValue reads a counter of m's registry with the given first
// label value ("" for a counter without labels).
func counterValue(t *testing.T, m *Metrics, name, label string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if label == "" || len(mt.GetLabel()) > 0 && mt.GetLabel()[0].GetValue() == label {
				sum += mt.GetCounter().GetValue()
			}
		}
	}
	return sum
}
