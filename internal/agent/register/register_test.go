package register

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func start(t *testing.T) (*Server, string) {
	t.Helper()
	return startWith(t, nil)
}

// startWith lets a test configure the server before Serve runs.
func startWith(t *testing.T, setup func(*Server)) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "agent.sock")
	s, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, path
}

type answer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

func send(t *testing.T, c net.Conn, r *bufio.Reader, line string) answer {
	t.Helper()
	if _, err := fmt.Fprintln(c, line); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading answer to %s: %v", line, err)
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	return a
}

func dial(t *testing.T, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestRegisterLookupAndExpire(t *testing.T) {
	s, path := start(t)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != FileMode {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	c, r := dial(t, path)
	line := fmt.Sprintf(`{"v":1,"pid":%d,"job":"j1","rank":2,"world":4,"local_rank":2,"host":"h","comms":[{"id":"c0","size":4,"ranks":[0,1,2,3]}]}`, os.Getpid())
	if a := send(t, c, r, line); !a.OK {
		t.Fatalf("refused: %s", a.Error)
	}
	reg, ok := s.Lookup(os.Getpid())
	if !ok || reg.Job != "j1" || reg.Rank != 2 || reg.World != 4 || len(reg.Comms) != 1 || reg.Comms[0].CommRank != 2 {
		t.Fatalf("Lookup = %+v, %v", reg, ok)
	}
	if got := s.Ranks(); got[os.Getpid()] != 2 || len(got) != 1 {
		t.Fatalf("Ranks = %v", got)
	}
	// A thread of this process resolves to it (the test binary has
	// several threads; find one that is not the leader).
	tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", os.Getpid()))
	for _, d := range tids {
		var tid int
		fmt.Sscan(d.Name(), &tid)
		if tid == os.Getpid() {
			continue
		}
		if reg, ok := s.Lookup(tid); !ok || reg.Rank != 2 {
			t.Fatalf("Lookup(thread %d) = %+v, %v", tid, reg, ok)
		}
		break
	}
	if _, ok := s.Lookup(1); ok {
		t.Fatal("pid 1 resolved to a registration")
	}
	// An update on the same connection replaces it.
	line2 := strings.Replace(line, `"job":"j1"`, `"job":"j2"`, 1)
	if a := send(t, c, r, line2); !a.OK {
		t.Fatalf("update refused: %s", a.Error)
	}
	if all := s.All(); len(all) != 1 || all[0].Job != "j2" {
		t.Fatalf("All = %+v", all)
	}
	// EOF keeps it for the grace, then drops it.
	clock := time.Now()
	s.mu.Lock()
	s.now = func() time.Time { return clock }
	s.mu.Unlock()
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		gone := !s.regs[os.Getpid()].goneAt.IsZero()
		s.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("EOF not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.expire()
	if _, ok := s.Lookup(os.Getpid()); !ok {
		t.Fatal("dropped before the grace")
	}
	s.mu.Lock()
	s.now = func() time.Time { return clock.Add(time.Minute) }
	s.mu.Unlock()
	s.expire()
	if _, ok := s.Lookup(os.Getpid()); ok {
		t.Fatal("kept after the grace")
	}
}

func TestRefusals(t *testing.T) {
	_, path := start(t)
	me := os.Getpid()
	cases := []struct{ line, field string }{
		{`not json`, "line:"},
		{`{"v":2,"pid":1,"job":"j","rank":0,"world":1}`, "v:"},
		{`{"pid":1,"job":"j","rank":0,"world":1}`, "v:"},
		{`{"v":1,"job":"j","rank":0,"world":1}`, "pid:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"","rank":0,"world":1}`, me), "job:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":4,"world":4}`, me), "rank:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":0}`, me), "world:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2,"local_rank":-1}`, me), "local_rank:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2,"extra":1}`, me), "line:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2,"comms":[{"id":"c","size":3}]}`, me), "comms[0].size:"},
		{fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2,"comms":[{"id":"c","size":2,"ranks":[1,1]}]}`, me), "comms[0].ranks:"},
		// Another process's pid: SO_PEERCRED says otherwise.
		{`{"v":1,"pid":1,"job":"j","rank":0,"world":1}`, "pid:"},
	}
	for _, tc := range cases {
		c, r := dial(t, path) // a refused hello closes the connection
		a := send(t, c, r, tc.line)
		if a.OK || !strings.HasPrefix(a.Error, tc.field) {
			t.Errorf("%s: got %+v, want error on %s", tc.line, a, tc.field)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := r.ReadByte(); err == nil {
			t.Errorf("%s: connection left open after a refused hello", tc.line)
		}
	}
}

// TestIdleBeforeRegistrationClosed (review finding 7): every line before
// an accepted registration has a deadline.
func TestIdleBeforeRegistrationClosed(t *testing.T) {
	const hello = 300 * time.Millisecond
	_, path := startWith(t, func(s *Server) { s.hello = hello })
	c, r := dial(t, path)
	start := time.Now()
	go func() { // blank lines do not buy time
		for i := 0; i < 20; i++ {
			if _, err := fmt.Fprint(c, "\n"); err != nil {
				return
			}
			time.Sleep(hello / 3)
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("got bytes, want the connection closed")
	} else if d := time.Since(start); d > 6*hello {
		t.Fatalf("closed after %v (err %v), want about %v", d, err, hello)
	}
}

// TestPerUIDConnectionCap (review finding 7): one uid cannot hold every
// connection.
func TestPerUIDConnectionCap(t *testing.T) {
	uid := uint32(1000)
	var mu sync.Mutex
	_, path := startWith(t, func(s *Server) {
		s.perUID = 2
		s.peer = func(*net.UnixConn) (cred, error) {
			mu.Lock()
			defer mu.Unlock()
			return cred{pid: os.Getpid(), uid: uid}, nil
		}
	})
	line := fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":1}`, os.Getpid())
	for i := 0; i < 2; i++ {
		c, r := dial(t, path)
		if a := send(t, c, r, line); !a.OK {
			t.Fatalf("connection %d refused: %+v", i, a)
		}
	}
	c, r := dial(t, path)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := r.ReadBytes('\n'); !strings.Contains(string(b), "too many connections of uid 1000") {
		t.Fatalf("third connection of uid 1000: %q", b)
	}
	mu.Lock()
	uid = 1001
	mu.Unlock()
	c, r = dial(t, path)
	if a := send(t, c, r, line); !a.OK {
		t.Fatalf("another uid refused: %+v", a)
	}
}

// TestJobRankOfAnotherUserRefused (review finding 7): a registration of a
// (job, rank) that another uid's live process holds is refused — and of
// any rank of a job another uid holds on this node (issue 16 item 10: a
// rank taken in someone else's job would inject stacks into it).
func TestJobRankOfAnotherUserRefused(t *testing.T) {
	var mu sync.Mutex
	uid := uint32(1000)
	s, path := startWith(t, func(s *Server) {
		s.peer = func(*net.UnixConn) (cred, error) {
			mu.Lock()
			defer mu.Unlock()
			return cred{pid: os.Getpid(), uid: uid}, nil
		}
	})
	// pid 1 (alive) holds job j rank 0 for uid 1000.
	s.mu.Lock()
	s.regs[1] = &entry{reg: Registration{PID: 1, Job: "j", Rank: 0, World: 2}, uid: 1000, conn: 1 << 40}
	s.mu.Unlock()
	mu.Lock()
	uid = 1001
	mu.Unlock()
	c, r := dial(t, path)
	a := send(t, c, r, fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2}`, os.Getpid()))
	if a.OK || !strings.Contains(a.Error, "another user") {
		t.Fatalf("uid 1001 claiming uid 1000's rank: %+v", a)
	}
	c, r = dial(t, path)
	if a := send(t, c, r, fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":1,"world":2}`, os.Getpid())); a.OK || !strings.Contains(a.Error, "another user") {
		t.Fatalf("a free rank of another user's job: %+v", a)
	}
	c, r = dial(t, path)
	if a := send(t, c, r, fmt.Sprintf(`{"v":1,"pid":%d,"job":"k","rank":1,"world":2}`, os.Getpid())); !a.OK {
		t.Fatalf("uid 1001's own job refused: %+v", a)
	}
	mu.Lock()
	uid = 1000
	mu.Unlock()
	c, r = dial(t, path)
	if a := send(t, c, r, fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":0,"world":2}`, os.Getpid())); !a.OK {
		t.Fatalf("the same uid re-registering its rank refused: %+v", a)
	}
}

func TestLongLineRefused(t *testing.T) {
	_, path := start(t)
	c, r := dial(t, path)
	a := send(t, c, r, `{"v":1,"job":"`+strings.Repeat("x", MaxLine)+`"}`)
	if a.OK || !strings.Contains(a.Error, "longer than") {
		t.Fatalf("got %+v", a)
	}
}

func TestStaleSocketRemovedLiveOneKept(t *testing.T) {
	s, path := start(t)
	if _, err := Listen(path, nil); err == nil || !strings.Contains(err.Error(), "another process listens") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	_ = s
	// A stale socket file: bind and close without unlinking.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s2, err := Listen(stale, nil)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	s2.Close()
	// A regular file is never removed.
	reg := filepath.Join(t.TempDir(), "file")
	os.WriteFile(reg, []byte("x"), 0o600)
	if _, err := Listen(reg, nil); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
}

func TestConcurrentClients(t *testing.T) {
	s, path := start(t)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fmt.Fprintf(c, `{"v":1,"pid":%d,"job":"j","rank":%d,"world":32}`+"\n", os.Getpid(), i)
			b, err := bufio.NewReader(c).ReadBytes('\n')
			if err != nil || !strings.Contains(string(b), `"ok":true`) {
				t.Errorf("client %d: %q %v", i, b, err)
			}
			s.Lookup(os.Getpid())
			s.All()
		}()
	}
	wg.Wait()
	if _, ok := s.Lookup(os.Getpid()); !ok {
		t.Fatal("no registration")
	}
}

func TestAuthorizeNamespaces(t *testing.T) {
	// A fake /proc: 100 is a thread of 50; 70's innermost NSpid is 7.
	dir := t.TempDir()
	for pid, status := range map[string]string{
		"100": "Name:\tx\nTgid:\t50\nPid:\t100\n",
		"70":  "Name:\tx\nTgid:\t70\nNSpid:\t70\t7\n",
	} {
		os.MkdirAll(filepath.Join(dir, pid), 0o755)
		os.WriteFile(filepath.Join(dir, pid, "status"), []byte(status), 0o644)
	}
	s := &Server{proc: dir, regs: map[int]*entry{}, tgid: map[int]int{}}
	for _, tc := range []struct {
		peer, announced, want int
		ok                    bool
	}{
		{50, 50, 50, true},
		{50, 100, 50, true}, // a thread id of the peer
		{70, 7, 70, true},   // the peer's pid inside its namespace
		{50, 70, 0, false},
		{70, 8, 0, false},
	} {
		got, err := s.authorize(tc.peer, tc.announced)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("authorize(%d, %d) = %d, %v", tc.peer, tc.announced, got, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"pid":123,"job":"j","rank":0,"world":4,"local_rank":0,"host":"h","comms":[{"id":"c","size":4,"ranks":[0,1,2,3]}]}`))
	f.Add([]byte(`{"v":1,"pid":1,"job":"j","rank":0,"world":1,"comms":[{"id":"c","size":1,"comm_rank":0}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		reg, err := Decode(b)
		if err != nil {
			if !strings.Contains(err.Error(), ":") {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		if reg.PID <= 0 || reg.Rank < 0 || reg.Rank >= reg.World || reg.Job == "" {
			t.Fatalf("accepted invalid %+v", reg)
		}
		for _, c := range reg.Comms {
			if err := c.Validate(reg.World); err != nil {
				t.Fatalf("accepted invalid comm: %v", err)
			}
		}
	})
}

// BenchmarkLookup: the profiler resolves every sample's pid; after the
// first miss a thread or a foreign pid is answered from the cache.
func BenchmarkLookup(b *testing.B) {
	s := &Server{proc: "/proc", regs: map[int]*entry{}, tgid: map[int]int{}, now: time.Now}
	s.regs[os.Getpid()] = &entry{reg: Registration{PID: os.Getpid(), Job: "j", World: 1}}
	pids := []int{os.Getpid(), 1, 2, os.Getpid() + 1}
	for b.Loop() {
		for _, p := range pids {
			s.Lookup(p)
		}
	}
}

// TestPidReuseDuringGrace (review finding 14): an entry kept for the
// grace period after its connection closed is not handed to a new
// process that got the same pid (other start time).
func TestPidReuseDuringGrace(t *testing.T) {
	s, path := start(t)
	me := os.Getpid()
	c, r := dial(t, path)
	if a := send(t, c, r, fmt.Sprintf(`{"v":1,"pid":%d,"job":"j","rank":1,"world":2}`, me)); !a.OK {
		t.Fatalf("refused: %+v", a)
	}
	s.mu.Lock()
	st := s.regs[me].start
	s.mu.Unlock()
	if st == 0 {
		t.Fatal("start time not recorded")
	}
	c.Close()
	waitGone := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		gone := !s.regs[me].goneAt.IsZero()
		s.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(waitGone) {
			t.Fatal("EOF not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := s.Lookup(me); !ok {
		t.Fatal("same process dropped during the grace")
	}
	// The pid now belongs to a process started later: a fake procfs.
	fake := t.TempDir()
	os.MkdirAll(filepath.Join(fake, fmt.Sprint(me)), 0o755)
	stat := fmt.Sprintf("%d (a b) c) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", me, st+500)
	os.WriteFile(filepath.Join(fake, fmt.Sprint(me), "stat"), []byte(stat), 0o644)
	s.mu.Lock()
	s.proc = fake
	s.mu.Unlock()
	if _, ok := s.Lookup(me); ok {
		t.Fatal("a reused pid was attributed to the rank")
	}
	if got := s.Ranks(); len(got) != 0 {
		t.Fatalf("Ranks after reuse: %v", got)
	}
}
