package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/nccl"
	"github.com/laggard-dev/laggard/internal/agent/nccl/ringtest"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// syncBuffer is a bytes.Buffer safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAgentCommandShipsAndStops(t *testing.T) {
	dir := t.TempDir()
	w, err := ringtest.Create(dir, nccl.Header{Capacity: 64, PID: uint32(os.Getpid()), Rank: 1, World: 2, Job: "cmdjob"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t0 := time.Now().UnixNano()
	w.Append(nccl.Record{Op: nccl.OpCommInit, CommID: 9, CommRank: 1, NRanks: 2, Seq: -1})
	for i := range int64(4) {
		w.Append(nccl.Record{Op: 1, Dtype: 7, CommID: 9, CommRank: 1, NRanks: 2, Seq: i, Count: 1, Bytes: 4, Peer: -1, Root: -1, EnterNS: t0, ReturnNS: t0 + 1})
	}
	var mu sync.Mutex
	var got collective.Batch
	var auth, query string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rw.WriteHeader(204)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var b collective.Batch
		if pb, err := laggardv1.UnmarshalProtoCollectives(body, 0); err == nil {
			b = *pb
		}
		mu.Lock()
		got.Calls = append(got.Calls, b.Calls...)
		got.Comms = append(got.Comms, b.Comms...)
		auth, query = r.Header.Get("Authorization"), r.URL.String()
		mu.Unlock()
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("secret-token\n"), 0o600)

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"agent", "-server", srv.URL, "-token-file", tok, "-shm-dir", dir, "-interval", "20ms", "-metrics-addr", "127.0.0.1:0",
			"-no-profile", "-no-osstat", "-socket", ""}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got.Calls)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls not shipped; stderr:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// metrics are served where stdout says
	out := stdout.String()
	i := strings.Index(out, "http://")
	if i < 0 {
		t.Fatalf("no metrics address in %q", out)
	}
	// the server saw the calls before the agent read its answer: the
	// counter follows shortly
	for {
		resp, err := http.Get(strings.TrimSpace(out[i:]))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "laggard_agent_calls_shipped_total 4") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if auth != "Bearer secret-token" || query != "/api/v1/jobs/cmdjob/collectives?world=2" || len(got.Comms) != 1 {
		t.Fatalf("auth %q query %q comms %+v", auth, query, got.Comms)
	}
	if !strings.Contains(stderr.String(), "agent stopped") {
		t.Fatalf("no stop log: %s", stderr.String())
	}
}

func TestAgentCommandErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"agent"}, 2, "-server is required"},
		{[]string{"agent", "-server", "ftp://x"}, 1, "-server must be an http(s) URL"},
		{[]string{"agent", "-server", "http://x", "-interval", "1ms"}, 1, "-interval must be in"},
		{[]string{"agent", "-server", "http://x", "-token-file", empty}, 1, "is empty"},
		{[]string{"agent", "-server", "http://x", "-token-file", "/nonexistent/tok"}, 1, "-token-file"},
		{[]string{"agent", "-server", "http://x", "extra"}, 2, "Usage"},
		{[]string{"agent", "-server", "http://x", "-ring-uids", "1000,x"}, 1, "-ring-uids"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
