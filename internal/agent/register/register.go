// Package register is the node agent's registration socket: training
// processes announce their pid, job, rank and communicators over a Unix
// domain socket so the agent can attribute stacks and OS counters to
// ranks (SysOM-AI §4 "The node agent communicates with training
// applications via a Unix domain socket").
//
// Protocol: the client sends one JSON line
//
//	{"v":1,"pid":123,"job":"j","rank":0,"world":4,"local_rank":0,"host":"h","comms":[{"id":"…","size":4,"ranks":[0,1,2,3]}]}
//
// and the agent answers {"ok":true} or {"ok":false,"error":"<field>: …"}.
// Further lines on the same connection replace the registration (a client
// may announce its communicators once it knows them). The client keeps
// the connection open for its lifetime: EOF means the process is gone,
// and its entry is dropped after a grace period (stacks drained after the
// exit are still attributed).
//
// Trust: the announced pid must be the peer's own process (SO_PEERCRED),
// its thread-group leader, or — for a client in a container's pid
// namespace — the peer's innermost NSpid. So a user can only register
// processes it runs; the socket file is created mode 0666 for that reason
// (training usually runs as another user than the agent). Tighten it with
// the directory's permissions where that matters.
package register

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// DefaultPath is where the agent listens unless told otherwise; clients
// read LAGGARD_AGENT_SOCKET.
const DefaultPath = "/run/laggard/agent.sock"

// EnvVar names the socket path for training processes.
const EnvVar = "LAGGARD_AGENT_SOCKET"

// Bounds.
const (
	MaxLine     = 64 << 10 // bytes of one JSON line
	MaxConns    = 4096     // concurrent connections; more are refused
	MaxComms    = 1024     // communicators in one announcement
	MaxJobLen   = 256
	MaxHostLen  = 255
	MaxWorld    = collective.MaxCommSize
	FileMode    = 0o666
	helloTimout = 10 * time.Second // every line before the first accepted one must arrive within this
	// MaxConnsPerUID bounds one user's connections, so one local user
	// cannot hold every slot and lock out other users' trainers.
	MaxConnsPerUID = 256
)

// Registration is one announced training process.
type Registration struct {
	PID       int               `json:"pid"`
	Job       string            `json:"job"`
	Rank      int               `json:"rank"`
	World     int               `json:"world"`
	LocalRank int               `json:"local_rank"`
	Comms     []collective.Comm `json:"comms,omitempty"`
	Host      string            `json:"host,omitempty"`
	// Cred is who registered the process, from the socket (SO_PEERCRED),
	// never from what the client says: what the job may be shown of
	// other processes, and which files may be uploaded for it, is decided
	// with these credentials, not the agent's (docs/security.md).
	Cred Cred `json:"-"`
}

// Cred is a registrant's identity as the kernel reports it.
type Cred struct {
	UID, GID uint32
	// Groups are the registrant's supplementary groups (/proc/<pid>/status
	// at registration).
	Groups []uint32
	// PidNS is the inode of the registrant's pid namespace (0 unknown).
	PidNS uint64
}

// Server accepts registrations. Create it with Listen.
type Server struct {
	ln    *net.UnixListener
	path  string
	log   *slog.Logger
	grace time.Duration
	// proc is the procfs root used to resolve tgids and NSpids
	// (tests point it at a fake tree).
	proc string
	// peer returns the connection's peer credentials (SO_PEERCRED);
	// tests may replace it.
	peer func(*net.UnixConn) (cred, error)
	now  func() time.Time

	mu      sync.Mutex
	regs    map[int]*entry // tgid → entry
	tgid    map[int]int    // tid → tgid cache (−1: not a registered process's thread)
	tgidAt  time.Time      // when the cache was last cleared (ids get reused)
	conns   int
	byUID   map[uint32]int // open connections per peer uid
	perUID  int            // MaxConnsPerUID (tests lower it)
	hello   time.Duration  // helloTimout (tests shorten it)
	closing bool
	wg      sync.WaitGroup
}

type entry struct {
	reg    Registration
	uid    uint32    // peer uid that registered it
	start  uint64    // process start time (/proc/pid/stat field 22), 0 unknown
	conn   uint64    // connection that owns it
	goneAt time.Time // zero while connected
}

// Listen creates the socket at path. A stale socket file (nothing
// listening) is removed; a live one is an error, so two agents never
// steal each other's socket.
func Listen(path string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		path = DefaultPath
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("register: %s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("register: another process listens on %s", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("register: removing stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, FileMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("register: %w", err)
	}
	return &Server{
		ln: ln, path: path, log: log, grace: 30 * time.Second, proc: "/proc",
		peer: peerCred, now: time.Now,
		regs: map[int]*entry{}, tgid: map[int]int{}, byUID: map[uint32]int{}, perUID: MaxConnsPerUID, hello: helloTimout,
	}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// SetGrace changes how long an entry outlives its connection (default 30 s).
func (s *Server) SetGrace(d time.Duration) {
	s.mu.Lock()
	s.grace = d
	s.mu.Unlock()
}

// Serve accepts connections until ctx ends, then closes the listener and
// every connection and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	var (
		cmu   sync.Mutex
		conns = map[*net.UnixConn]bool{}
	)
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.ln.Close()
		cmu.Lock()
		for c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	defer stop()
	go s.janitor(ctx)
	var id uint64
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				s.wg.Wait()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.wg.Wait()
			return fmt.Errorf("register: accept: %w", err)
		}
		pc, err := s.peer(c)
		if err != nil {
			writeAnswer(c, fmt.Errorf("agent: no peer credentials: %v", err))
			c.Close()
			continue
		}
		s.mu.Lock()
		var refuse error
		switch {
		case s.conns >= MaxConns:
			refuse = fmt.Errorf("agent: too many connections (%d)", MaxConns)
		case s.byUID[pc.uid] >= s.perUID:
			refuse = fmt.Errorf("agent: too many connections of uid %d (%d)", pc.uid, s.perUID)
		default:
			s.conns++
			s.byUID[pc.uid]++
		}
		s.mu.Unlock()
		if refuse != nil {
			writeAnswer(c, refuse)
			c.Close()
			continue
		}
		id++
		cmu.Lock()
		conns[c] = true
		cmu.Unlock()
		s.wg.Add(1)
		go func(c *net.UnixConn, id uint64, pc cred) {
			defer s.wg.Done()
			s.handle(c, id, pc)
			cmu.Lock()
			delete(conns, c)
			cmu.Unlock()
			c.Close()
			s.mu.Lock()
			s.conns--
			if s.byUID[pc.uid]--; s.byUID[pc.uid] <= 0 {
				delete(s.byUID, pc.uid)
			}
			s.mu.Unlock()
		}(c, id, pc)
	}
}

// Close closes the listener (Serve returns once its context ends).
func (s *Server) Close() error { return s.ln.Close() }

// janitor drops entries whose connection ended more than grace ago.
func (s *Server) janitor(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.expire()
		}
	}
}

func (s *Server) expire() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.tgidAt) >= tgidCacheTTL {
		clear(s.tgid)
		s.tgidAt = now
	}
	for pid, e := range s.regs {
		if !e.goneAt.IsZero() && (now.Sub(e.goneAt) >= s.grace || s.reused(pid, e)) {
			delete(s.regs, pid)
			clear(s.tgid)
		}
	}
}

// reused reports whether the pid of an entry in its grace period now
// belongs to another process (same pid, other start time): its samples
// and OS points must not be attributed to the rank. s.mu is held.
func (s *Server) reused(pid int, e *entry) bool {
	if e.goneAt.IsZero() || e.start == 0 {
		return false
	}
	st, ok := s.readStart(pid)
	return ok && st != e.start
}

// readStart returns field 22 (starttime) of /proc/<pid>/stat.
func (s *Server) readStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(s.proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')') // comm may hold spaces and parens
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 { // fields 3.. after the comm; starttime is field 22
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil && v > 0
}

func (s *Server) handle(c *net.UnixConn, id uint64, pc cred) {
	peer := pc.pid
	r := bufio.NewReaderSize(c, 4096)
	var owned int // tgid this connection registered
	helloBy := time.Now().Add(s.hello)
	defer func() {
		if owned == 0 {
			return
		}
		s.mu.Lock()
		if e := s.regs[owned]; e != nil && e.conn == id {
			e.goneAt = s.now()
		}
		s.mu.Unlock()
		s.log.Debug("registration connection closed", "pid", owned)
	}()
	for {
		// Until a registration is accepted, reads share one deadline
		// from the connect (blank lines buy no time); after that the
		// client keeps the connection open and silent (EOF = process
		// gone), which the per-uid cap bounds.
		if owned == 0 {
			c.SetReadDeadline(helloBy)
		} else {
			c.SetReadDeadline(time.Time{})
		}
		line, err := readLine(r, MaxLine)
		if err != nil {
			if errors.Is(err, errLong) {
				writeAnswer(c, err)
			}
			return
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		reg, err := Decode(line)
		if err == nil {
			reg.PID, err = s.authorize(peer, reg.PID)
		}
		if err == nil && owned != 0 && reg.PID != owned {
			err = fmt.Errorf("pid: connection already registered pid %d", owned)
		}
		s.mu.Lock()
		if err == nil {
			err = s.claimable(reg, pc.uid)
		}
		if err == nil {
			st, _ := s.readStart(reg.PID)
			reg.Cred = s.credOf(pc)
			s.regs[reg.PID] = &entry{reg: reg, uid: pc.uid, start: st, conn: id}
			clear(s.tgid)
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Info("registration refused", "peer", peer, "uid", pc.uid, "err", err)
			writeAnswer(c, err)
			if owned == 0 {
				return // a refused hello: close, so garbage cannot hold a slot
			}
			continue
		}
		owned = reg.PID
		s.log.Info("rank registered", "pid", reg.PID, "job", reg.Job, "rank", reg.Rank, "world", reg.World)
		if writeAnswer(c, nil) != nil {
			return
		}
	}
}

// claimable refuses a registration of a job that another uid's live
// process holds on this node (any of its ranks), so one local user can
// neither poison another user's job (its stacks, OS points and GPU
// attribution) nor take a rank of it and be shown what runs on that
// rank's cores. s.mu is held.
func (s *Server) claimable(reg Registration, uid uint32) error {
	for pid, e := range s.regs {
		if pid == reg.PID || e.uid == uid || e.reg.Job != reg.Job {
			continue
		}
		if e.goneAt.IsZero() || s.alive(pid) {
			if e.reg.Rank == reg.Rank {
				return fmt.Errorf("job %q rank %d: held by pid %d of another user", reg.Job, reg.Rank, pid)
			}
			return fmt.Errorf("job %q: registered on this node by another user (pid %d, rank %d)", reg.Job, pid, e.reg.Rank)
		}
	}
	return nil
}

// credOf completes a peer's credentials for its registration: its
// supplementary groups and pid namespace, read from /proc.
func (s *Server) credOf(pc cred) Cred {
	c := Cred{UID: pc.uid, GID: pc.gid}
	for _, f := range s.readStatusField(pc.pid, "Groups") {
		if g, err := strconv.ParseUint(f, 10, 32); err == nil {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	if fi, err := os.Stat(filepath.Join(s.proc, strconv.Itoa(pc.pid), "ns", "pid")); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			c.PidNS = st.Ino
		}
	}
	return c
}

func (s *Server) alive(pid int) bool {
	_, err := os.Stat(filepath.Join(s.proc, strconv.Itoa(pid)))
	return err == nil
}

var errLong = fmt.Errorf("line: longer than %d bytes", MaxLine)

// readLine reads one '\n'-terminated line of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(buf)+len(frag) > max {
			return nil, errLong
		}
		buf = append(buf, frag...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				return buf, nil
			}
			return nil, err
		}
	}
}

func writeAnswer(c net.Conn, err error) error {
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	var b []byte
	if err == nil {
		b = []byte(`{"ok":true}` + "\n")
	} else {
		b, _ = json.Marshal(struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}{false, err.Error()})
		b = append(b, '\n')
	}
	_, werr := c.Write(b)
	return werr
}

// authorize checks the announced pid against the peer's credentials and
// returns the pid to register (the peer's tgid in the agent's namespace).
func (s *Server) authorize(peer, announced int) (int, error) {
	if announced == peer {
		return peer, nil
	}
	// A thread id of the peer's process.
	if tg, ok := s.readTgid(announced); ok && tg == peer {
		return peer, nil
	}
	// The peer lives in another pid namespace: its innermost NSpid is
	// what it sees as its own pid.
	if ns, ok := s.readNSpid(peer); ok && ns == announced {
		return peer, nil
	}
	return 0, fmt.Errorf("pid: %d is not the connecting process (peer pid %d)", announced, peer)
}

// readStatusField returns the fields of a /proc/<pid>/status line.
func (s *Server) readStatusField(pid int, key string) []string {
	b, err := os.ReadFile(filepath.Join(s.proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.Fields(v)
		}
	}
	return nil
}

func (s *Server) readTgid(pid int) (int, bool) {
	f := s.readStatusField(pid, "Tgid")
	if len(f) != 1 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil && n > 0
}

func (s *Server) readNSpid(pid int) (int, bool) {
	f := s.readStatusField(pid, "NSpid")
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.Atoi(f[len(f)-1])
	return n, err == nil && n > 0
}

// The tid → tgid cache is bounded, and cleared when full, when
// registrations change and every tgidCacheTTL (a thread id of an exited
// process may come back as a trainer's new thread).
const (
	maxTgidCache = 1 << 16
	tgidCacheTTL = 10 * time.Second
)

// Lookup returns the registration of pid, or of the process pid is a
// thread of. Entries of exited processes stay visible for the grace
// period.
func (s *Server) Lookup(pid int) (Registration, bool) {
	if pid <= 0 {
		return Registration{}, false
	}
	s.mu.Lock()
	if e := s.regs[pid]; e != nil {
		if s.reused(pid, e) {
			delete(s.regs, pid)
			clear(s.tgid)
			s.mu.Unlock()
			return Registration{}, false
		}
		s.mu.Unlock()
		return e.reg, true
	}
	tg, cached := s.tgid[pid]
	if cached {
		e := s.regs[tg]
		gone := e != nil && s.reused(tg, e)
		s.mu.Unlock()
		if e == nil || gone {
			return Registration{}, false
		}
		return e.reg, true
	}
	empty := len(s.regs) == 0
	s.mu.Unlock()
	if empty {
		return Registration{}, false
	}
	tg, ok := s.readTgid(pid)
	if !ok {
		tg = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tgid) >= maxTgidCache {
		clear(s.tgid)
	}
	s.tgid[pid] = tg
	if e := s.regs[tg]; e != nil && !s.reused(tg, e) {
		return e.reg, true
	}
	return Registration{}, false
}

// All returns every registration, ordered by job then rank.
func (s *Server) All() []Registration {
	s.mu.Lock()
	out := make([]Registration, 0, len(s.regs))
	for _, e := range s.regs {
		out = append(out, e.reg)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Registration) int {
		if c := strings.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return a.PID - b.PID
	})
	return out
}

// Ranks returns pid → rank for every registration (osstat.Config.Ranks).
func (s *Server) Ranks() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[int]int, len(s.regs))
	for pid, e := range s.regs {
		m[pid] = e.reg.Rank
	}
	return m
}

// wire is the announcement line.
type wire struct {
	V         *int       `json:"v"`
	PID       *int       `json:"pid"`
	Job       string     `json:"job"`
	Rank      *int       `json:"rank"`
	World     *int       `json:"world"`
	LocalRank int        `json:"local_rank"`
	Host      string     `json:"host"`
	Comms     []wireComm `json:"comms"`
}

type wireComm struct {
	ID       string `json:"id"`
	Size     int    `json:"size"`
	Rank     *int   `json:"rank"`
	CommRank *int   `json:"comm_rank"`
	Ranks    []int  `json:"ranks"`
	Parent   string `json:"parent"`
	Backend  string `json:"backend"`
}

// Decode parses and validates one announcement line; errors name the
// field. The pid is not checked against credentials here.
func Decode(line []byte) (Registration, error) {
	var w wire
	d := json.NewDecoder(strings.NewReader(string(line)))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return Registration{}, fmt.Errorf("line: not a JSON announcement: %v", err)
	}
	if d.More() {
		return Registration{}, errors.New("line: trailing data after the JSON object")
	}
	switch {
	case w.V == nil:
		return Registration{}, errors.New("v: missing (want 1)")
	case *w.V != 1:
		return Registration{}, fmt.Errorf("v: unsupported protocol version %d (want 1)", *w.V)
	case w.PID == nil || *w.PID <= 0 || *w.PID > collective.MaxPID:
		return Registration{}, errors.New("pid: missing or not a positive process id")
	case w.Job == "" || len(w.Job) > MaxJobLen || strings.ContainsAny(w.Job, "\x00\n/"):
		return Registration{}, fmt.Errorf("job: empty, longer than %d bytes, or contains '/', NUL or newline", MaxJobLen)
	case w.World == nil || *w.World < 1 || *w.World > MaxWorld:
		return Registration{}, fmt.Errorf("world: missing or outside [1, %d]", MaxWorld)
	case w.Rank == nil || *w.Rank < 0 || *w.Rank >= *w.World:
		return Registration{}, fmt.Errorf("rank: missing or outside [0, world=%d)", *w.World)
	case w.LocalRank < 0 || w.LocalRank >= *w.World:
		return Registration{}, fmt.Errorf("local_rank: %d outside [0, world=%d)", w.LocalRank, *w.World)
	case len(w.Host) > MaxHostLen:
		return Registration{}, fmt.Errorf("host: longer than %d bytes", MaxHostLen)
	case len(w.Comms) > MaxComms:
		return Registration{}, fmt.Errorf("comms: %d communicators exceed %d", len(w.Comms), MaxComms)
	}
	reg := Registration{PID: *w.PID, Job: w.Job, Rank: *w.Rank, World: *w.World, LocalRank: w.LocalRank, Host: w.Host}
	for i, wc := range w.Comms {
		c := collective.Comm{ID: wc.ID, Size: wc.Size, Ranks: wc.Ranks, Parent: wc.Parent, Backend: wc.Backend, Host: w.Host}
		c.Rank = reg.Rank
		if wc.Rank != nil {
			c.Rank = *wc.Rank
		}
		switch {
		case wc.CommRank != nil:
			c.CommRank = *wc.CommRank
		case len(wc.Ranks) > 0:
			c.CommRank = slices.Index(wc.Ranks, c.Rank)
			if c.CommRank < 0 {
				return Registration{}, fmt.Errorf("comms[%d].ranks: does not list rank %d", i, c.Rank)
			}
		}
		if err := c.Validate(reg.World); err != nil {
			return Registration{}, fmt.Errorf("comms[%d].%v", i, err)
		}
		reg.Comms = append(reg.Comms, c)
	}
	return reg, nil
}

// cred is a connection's peer (SO_PEERCRED).
type cred struct {
	pid int // thread-group id in the agent's pid namespace
	uid uint32
	gid uint32
}

// peerCred reads SO_PEERCRED: the peer's process (thread-group) id as
// seen in the agent's pid namespace, and its uid.
func peerCred(c *net.UnixConn) (cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return cred{}, err
	}
	var (
		uc   *syscall.Ucred
		cerr error
	)
	if err := rc.Control(func(fd uintptr) {
		uc, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return cred{}, err
	}
	if cerr != nil {
		return cred{}, cerr
	}
	if uc.Pid <= 0 {
		return cred{}, errors.New("peer has no pid in this namespace")
	}
	return cred{pid: int(uc.Pid), uid: uc.Uid, gid: uc.Gid}, nil
}
