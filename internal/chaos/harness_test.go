package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// fullMode is `make chaos` (LAGGARD_CHAOS=full); otherwise the suite runs
// its short mode inside `go test ./...`.
var fullMode = os.Getenv("LAGGARD_CHAOS") == "full"

// pick returns short in short mode and full in full mode.
func pick[T any](short, full T) T {
	if fullMode {
		return full
	}
	return short
}

func modeName() string { return pick("short", "full") }

// enabled skips t under `go test -short` or LAGGARD_CHAOS=off.
func enabled(t *testing.T) {
	t.Helper()
	if testing.Short() || os.Getenv("LAGGARD_CHAOS") == "off" {
		t.Skip("chaos suite skipped (go test -short or LAGGARD_CHAOS=off)")
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
	buildLog  string
	// serverRace: the server binary has the race detector (slower; CPU
	// bounds allow for it).
	serverRace bool

	buildLogOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the laggard binary, built once per test run with `go
// build` (go test puts its own go command first on PATH).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		race := raceBuild
		switch os.Getenv("LAGGARD_CHAOS_RACE") {
		case "1":
			race = true
		case "0":
			race = false
		}
		if p := os.Getenv("LAGGARD_CHAOS_BIN"); p != "" {
			serverRace = os.Getenv("LAGGARD_CHAOS_RACE") == "1"
			buildBin, buildErr = filepath.Abs(p)
			buildLog = fmt.Sprintf("using LAGGARD_CHAOS_BIN=%s (race=%v)", p, serverRace)
			return
		}
		serverRace = race
		if buildDir, buildErr = os.MkdirTemp("", "laggard-chaos-"); buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "laggard")
		args := []string{"build", "-o", bin}
		if race {
			args = append(args, "-race")
		}
		args = append(args, "github.com/laggard-dev/laggard/cmd/laggard")
		start := time.Now()
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		buildBin = bin
		buildLog = fmt.Sprintf("built laggard (race=%v) in %v", race, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatalf("building laggard: %v", buildErr)
	}
	return buildBin
}

var (
	helpOnce sync.Once
	helpText string
)

// hasFlag reports whether `laggard serve -h` lists -name. Flags other
// helpers add (timeouts, limits, tokens) are passed only when the binary
// has them, so the suite runs against any version of the server.
func hasFlag(t *testing.T, name string) bool {
	helpOnce.Do(func() {
		out, _ := exec.Command(binary(t), "serve", "-h").CombinedOutput()
		helpText = string(out)
	})
	return regexp.MustCompile(`(?m)^\s+-{1,2}` + regexp.QuoteMeta(name) + `\b`).MatchString(helpText)
}

// firstFlag returns "-name=value" for the first of names the binary has,
// or nil.
func firstFlag(t *testing.T, value string, names ...string) []string {
	for _, n := range names {
		if hasFlag(t, n) {
			return []string{"-" + n + "=" + value}
		}
	}
	return nil
}

// logTail keeps the last lines of the server's stderr and every line that
// shows a crash: a Go panic, a fatal error, a handler panic net/http
// recovered, a data race.
type logTail struct {
	mu      sync.Mutex
	lines   []string
	crashes []string
}

var crashMarkers = []string{"fatal error:", "WARNING: DATA RACE", "http: panic serving", "laggard serve: internal error:"}

func (l *logTail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 400 {
		l.lines = slices.Delete(l.lines, 0, 100)
	}
	l.lines = append(l.lines, line)
	crash := strings.HasPrefix(line, "panic: ")
	for _, m := range crashMarkers {
		crash = crash || strings.Contains(line, m)
	}
	if crash && len(l.crashes) < 20 {
		l.crashes = append(l.crashes, clip(line, 400))
	}
}

func (l *logTail) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-n):], "\n")
}

// server is one `laggard serve` subprocess on 127.0.0.1 (a free port,
// new on every start); restarts keep the data directory.
type server struct {
	t       *testing.T
	dataDir string
	args    []string
	logs    *logTail

	mu      sync.Mutex
	cmd     *exec.Cmd
	base    string
	done    chan struct{}
	exitErr error
	starts  int
}

// addrRE finds the served URL in the startup log line.
var addrRE = regexp.MustCompile(`(https?://(?:127\.0\.0\.1|localhost):\d+)`)

// startServer runs laggard serve on dataDir with extra flags; it is
// stopped at cleanup, and a crash seen in its log fails t.
func startServer(t *testing.T, dataDir string, args ...string) *server {
	t.Helper()
	s := &server{t: t, dataDir: dataDir, args: args, logs: &logTail{}}
	binary(t)
	buildLogOnce.Do(func() { t.Log(buildLog) })
	t.Cleanup(s.cleanup)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *server) start() error {
	argv := append([]string{"serve", "-addr", "127.0.0.1:0", "-log-json", "-data", s.dataDir}, s.args...)
	cmd := exec.Command(buildBin, argv...)
	pr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting laggard serve: %w", err)
	}
	addrc := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Text()
			s.logs.add(line)
			if m := addrRE.FindStringSubmatch(line); !found && m != nil && strings.Contains(line, "serving") {
				found = true
				addrc <- m[1]
			}
		}
		io.Copy(io.Discard, pr) // after an over-long line
		err := cmd.Wait()
		s.mu.Lock()
		s.exitErr = err
		s.mu.Unlock()
		close(done)
	}()
	var base string
	select {
	case base = <-addrc:
	case <-done:
		return fmt.Errorf("laggard serve exited before serving (%v):\n%s", s.exitError(), s.logs.tail(30))
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("laggard serve did not report its address within 60s:\n%s", s.logs.tail(30))
	}
	s.mu.Lock()
	s.cmd, s.base, s.done = cmd, base, done
	s.starts++
	s.mu.Unlock()
	// Any HTTP answer (even 401 where /healthz needs a token) means up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := quick.Get(base + "/healthz")
		if err == nil {
			res.Body.Close()
			return nil
		}
		if !s.alive() || time.Now().After(deadline) {
			return fmt.Errorf("laggard serve at %s not answering (%v):\n%s", base, err, s.logs.tail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) exitError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// URL is the base URL of the running process.
func (s *server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base
}

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

func (s *server) alive() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop asks for a graceful shutdown (SIGTERM) and kills after timeout; it
// reports whether the process exited by itself.
func (s *server) stop(timeout time.Duration) bool {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return true
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return false
	}
}

func (s *server) cleanup() {
	if s.alive() && !s.stop(20*time.Second) {
		s.t.Logf("server did not stop within 20s of SIGTERM; killed")
	}
	s.logs.mu.Lock()
	crashes := slices.Clone(s.logs.crashes)
	s.logs.mu.Unlock()
	if len(crashes) > 0 {
		s.t.Errorf("the server crashed, raced or panicked (never allowed):\n%s", strings.Join(crashes, "\n"))
	}
	if s.t.Failed() {
		s.t.Logf("server log tail:\n%s", s.logs.tail(40))
	}
}

// procMem reads the server's resident set and its peak from /proc.
func (s *server) procMem() (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid()))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// procCPU is the server's user+system CPU time so far, from
// /proc/<pid>/stat (fields 14 and 15, in USER_HZ = 100 ticks on Linux).
func (s *server) procCPU(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid()))
	if err != nil {
		t.Fatalf("reading server CPU time: %v", err)
	}
	// The command name may hold spaces; fields are counted after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// memSampler records the server's peak RSS until stopped.
func (s *server) memSampler() (stop func() (peakRSS, hwm int64)) {
	quit, done := make(chan struct{}), make(chan struct{})
	var peak int64
	go func() {
		defer close(done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			if rss, _ := s.procMem(); rss > peak {
				peak = rss
			}
			select {
			case <-quit:
				return
			case <-tk.C:
			}
		}
	}()
	return func() (int64, int64) {
		close(quit)
		<-done
		_, hwm := s.procMem()
		return peak, hwm
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// HTTP.

// quick is for single probes; posters make their own clients.
var quick = &http.Client{Timeout: 30 * time.Second}

func newClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
}

type reply struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// call sends one request; hdr may set "Host".
func call(c *http.Client, method, url, ctype string, body []byte, hdr map[string]string) (reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return reply{}, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return reply{took: time.Since(start)}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	return reply{status: res.StatusCode, header: res.Header, body: b, took: time.Since(start)}, err
}

// do is call on the test goroutine: a transport error fails t.
func (s *server) do(t *testing.T, method, path, ctype string, body []byte) reply {
	t.Helper()
	r, err := call(quick, method, s.URL()+path, ctype, body, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

const jsonType, protoType = "application/json", "application/x-protobuf"

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Jobs and vectors.

var defaultStages = []string{"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall",
	"callbacks.cpu_wall", "optim.step_cpu_wall", "step.other_cpu_wall"}

// valuesPerVector is what "values/s" counts: one value per stage.
var valuesPerVector = len(defaultStages)

func jobJSON(id string, world int) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "name": "chaos", "world_size": world,
		"schema": map[string]any{"version": "stagefrontier/v1", "stages": defaultStages},
	})
	return b
}

// register PUTs a job with the default schema; 200 or 201 is required.
func (s *server) register(t *testing.T, id string, world int) {
	t.Helper()
	if r := s.do(t, "PUT", "/api/v1/jobs/"+id, jsonType, jobJSON(id, world)); r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("registering job %s: %d %s", id, r.status, clip(string(r.body), 300))
	}
}

// key is one stage vector's identity.
type key struct {
	step int64
	rank int
}

// durations are plausible stage times; rank 1 is late in the data stage
// so reports have something to say.
func durations(k key) ([6]float64, float64) {
	d := [6]float64{1, 10, 20, 2, 3, 0.5}
	if k.rank == 1 {
		d[0] = 30
	}
	d[1] += float64(k.step%7) * 0.25
	wall := 0.0
	for _, x := range d {
		wall += x
	}
	return d, wall
}

// grid is steps [from, from+n) for each rank.
func grid(from, n int64, ranks ...int) []key {
	ks := make([]key, 0, int(n)*len(ranks))
	for s := from; s < from+n; s++ {
		for _, r := range ranks {
			ks = append(ks, key{s, r})
		}
	}
	return ks
}

// jsonBatch encodes {"vectors":[…]} by appending (many MB per second on the
// test's side, so the client does not compete with the server for CPU).
func jsonBatch(ks []key) []byte {
	b := make([]byte, 0, 16+len(ks)*110)
	b = append(b, `{"vectors":[`...)
	for i, k := range ks {
		if i > 0 {
			b = append(b, ',')
		}
		d, wall := durations(k)
		b = append(b, `{"step":`...)
		b = strconv.AppendInt(b, k.step, 10)
		b = append(b, `,"rank":`...)
		b = strconv.AppendInt(b, int64(k.rank), 10)
		b = append(b, `,"durations_ms":[`...)
		for j, x := range d {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		}
		b = append(b, `],"wall_ms":`...)
		b = strconv.AppendFloat(b, wall, 'g', -1, 64)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// protoBatch encodes a laggard.v1.VectorBatch.
func protoBatch(ks []key) []byte {
	m := &pb.VectorBatch{Vectors: make([]*pb.Vector, len(ks))}
	for i, k := range ks {
		d, wall := durations(k)
		m.Vectors[i] = &pb.Vector{Step: k.step, Rank: int32(k.rank), DurationsMs: d[:], WallMs: wall}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // cannot fail for these messages
	}
	return b
}

func encode(ctype string, ks []key) []byte {
	if ctype == protoType {
		return protoBatch(ks)
	}
	return jsonBatch(ks)
}

// exported streams GET /export and calls fn for every stored vector.
func (s *server) exported(t *testing.T, job string, fn func(key)) int {
	t.Helper()
	res, err := quick.Get(s.URL() + "/api/v1/jobs/" + job + "/export")
	if err != nil {
		t.Fatalf("export %s: %v", job, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
		t.Fatalf("export %s: %d %s", job, res.StatusCode, b)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(res.Body, 1<<20))
	n := 0
	for {
		var line struct {
			Job  json.RawMessage `json:"job"`
			Step *int64          `json:"step"`
			Rank *int            `json:"rank"`
		}
		if err := dec.Decode(&line); err == io.EOF {
			return n
		} else if err != nil {
			t.Fatalf("export %s: after %d vectors: %v", job, n, err)
		}
		if line.Job != nil {
			continue
		}
		if line.Step == nil || line.Rank == nil {
			t.Fatalf("export %s: a line without step or rank", job)
		}
		fn(key{*line.Step, *line.Rank})
		n++
	}
}

// quantile is the nearest-rank q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// statusCounts is a concurrent histogram of HTTP statuses (-1: transport
// error).
type statusCounts struct {
	mu sync.Mutex
	m  map[int]int
}

func (c *statusCounts) add(status int) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[int]int{}
	}
	c.m[status]++
	c.mu.Unlock()
}

func (c *statusCounts) get(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[status]
}

// other counts statuses outside ok.
func (c *statusCounts) other(ok ...int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for st, k := range c.m {
		if !slices.Contains(ok, st) {
			n += k
		}
	}
	return n
}

func (c *statusCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]int, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		name := strconv.Itoa(k)
		if k == -1 {
			name = "neterr"
		}
		fmt.Fprintf(&b, "%s×%d", name, c.m[k])
	}
	return b.String()
}

// storedVectors is the job's stored-vector count (GET /api/v1/jobs/{id}).
func (s *server) storedVectors(t *testing.T, job string) int64 {
	t.Helper()
	r := s.do(t, "GET", "/api/v1/jobs/"+job, "", nil)
	var v struct {
		Vectors int64 `json:"vectors"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil {
		t.Fatalf("GET job %s: %d %s", job, r.status, clip(string(r.body), 300))
	}
	return v.Vectors
}
