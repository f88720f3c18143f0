package nccl

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Config configures a Collector.
type Config struct {
	// Dir holds the rings (the shim's $LAGGARD_SHM_DIR; default /dev/shm).
	Dir string
	// DefaultJob names the job of rings whose producer had no
	// $LAGGARD_JOB / $TORCHELASTIC_RUN_ID; empty: such rings are drained
	// and their records counted as unattributed.
	DefaultJob string
	// Grace is how long a dead producer's ring stays after its last drain
	// before the file is removed (default 30 s).
	Grace time.Duration
	// MaxPerRing bounds the records drained from one ring per poll
	// (default: the whole ring).
	MaxPerRing int
	Log        *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// TrustedUIDs may own ring files besides the owner of the producing
	// process (when it is visible in this PID namespace) and this agent's
	// own uid (R3). Set it when the agent runs in another PID namespace
	// than trainers of another uid.
	TrustedUIDs []uint32
}

// JobData is what one poll gathered for one job.
type JobData struct {
	Job   string
	World int // $WORLD_SIZE of its producers, else the largest communicator seen
	Comms []collective.Comm
	Calls []collective.Call
	// Dropped counts records lost since the previous poll: full rings,
	// slots given up, records that did not translate.
	Dropped int64
}

// Stats are counters since the Collector started.
type Stats struct {
	Rings        int    // rings mapped now
	Records      uint64 // records read
	Calls        uint64 // calls translated
	Invalid      uint64 // records that did not translate
	RingDropped  uint64 // producer-side drops (full ring)
	Lost         uint64 // slots given up by the reader
	Unattributed uint64 // records of rings without a job
	Removed      uint64 // stale ring files removed
	Refused      uint64 // ring files not mapped: untrusted owner or mode
	Broken       uint64 // rings dropped because their file shrank
	StaleCleared uint64 // pauses cleared on attach (armed by a dead agent)
}

// Local names a producer on this node, for the validation trap.
type Local struct {
	Job       string
	Rank      int
	LocalRank int
	PID       int
	Path      string
}

type ringState struct {
	ring        *Ring
	origin      Origin
	job         string
	world       int
	lastDropped uint64
	deadSince   time.Time
	warned      bool
	armed       uint32          // pause generation this agent armed, 0 none
	pairs       map[string]bool // P2P pair comms announced
}

// Collector discovers rings in Dir and drains them.
type Collector struct {
	cfg     Config
	mu      sync.Mutex
	rings   map[FileID]*ringState
	refused map[FileID]bool // files not to open again
	stats   Stats
	ids     map[uint64]string // interned comm ids
}

// NewCollector returns a Collector; it touches nothing until Poll.
func NewCollector(cfg Config) *Collector {
	if cfg.Dir == "" {
		cfg.Dir = "/dev/shm"
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{cfg: cfg, rings: map[FileID]*ringState{}, refused: map[FileID]bool{}, ids: map[uint64]string{}}
}

// Poll finds new rings, drains every ring, and retires rings whose
// producer is gone. Jobs come back sorted by name.
func (c *Collector) Poll() ([]*JobData, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.discover()
	jobs := map[string]*JobData{}
	now := c.cfg.Now()
	keys := make([]FileID, 0, len(c.rings))
	for k := range c.rings {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return c.rings[keys[a]].ring.Path < c.rings[keys[b]].ring.Path })
	for _, k := range keys {
		st := c.rings[k]
		p := st.ring.Path
		// Liveness first: a producer that died before this drain has
		// written everything it ever will, so one drain (skipping the
		// slots a killed writer left incomplete) empties it.
		alive := st.ring.Alive()
		if err := c.drain(st, jobs, !alive); err != nil {
			c.cfg.Log.Warn("nccl ring dropped: its file shrank or faulted", "path", p, "err", err)
			c.stats.Broken++
			c.refused[k] = true
			_ = st.ring.Close()
			delete(c.rings, k)
			continue
		}
		if alive {
			st.deadSince = time.Time{}
			continue
		}
		if st.deadSince.IsZero() {
			st.deadSince = now
			c.cfg.Log.Info("nccl ring producer exited", "path", p, "pid", st.origin.PID, "job", st.job, "rank", st.origin.Rank)
		}
		if now.Sub(st.deadSince) >= c.cfg.Grace {
			_ = st.ring.Close()
			delete(c.rings, k)
			if c.removeIfDead(p, k) {
				c.stats.Removed++
			}
		}
	}
	out := make([]*JobData, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Job < out[b].Job })
	return out, err
}

func (c *Collector) discover() error {
	ents, err := os.ReadDir(c.cfg.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		pid := PIDFromName(name)
		if pid == 0 || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(c.cfg.Dir, name)
		id, ok := fileID(p)
		if !ok || c.refused[id] {
			continue
		}
		if _, ok := c.rings[id]; ok {
			continue
		}
		r, err := OpenRing(p, c.trust)
		if err != nil {
			c.unusable(p, id, err)
			continue
		}
		if r.ID != id { // replaced between the lstat and the open
			_ = r.Close()
			continue
		}
		st := &ringState{ring: r, origin: Origin{PID: int(r.Header.PID), Rank: int(r.Header.Rank), Host: r.Header.Host}, job: r.Header.Job, world: int(r.Header.World), pairs: map[string]bool{}}
		if st.job == "" {
			st.job = c.cfg.DefaultJob
		}
		if st.origin.Rank < 0 {
			st.origin.Rank = -1
		}
		c.rings[id] = st
		// B3: a pause armed now was armed by an agent that is gone (this
		// one has armed nothing here yet): release it.
		if gen := r.ReleaseAny(); gen != 0 {
			c.stats.StaleCleared++
			c.cfg.Log.Warn("cleared a validation pause left by a previous agent", "path", p, "generation", gen)
		}
		c.cfg.Log.Info("nccl ring found", "path", p, "pid", st.origin.PID, "job", st.job, "rank", st.origin.Rank, "world", st.world, "capacity", r.Header.Capacity)
	}
	return nil
}

func fileID(p string) (FileID, bool) {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return FileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, false
	}
	return FileID{uint64(st.Dev), st.Ino}, true
}

// trust is the R3 policy: a ring file may be mapped when its owner owns
// the producing process (visible here, same start time), is this agent's
// uid, or is listed in TrustedUIDs. OpenRing has already refused links,
// non-regular files and files writable by others.
func (c *Collector) trust(uid uint32, _ os.FileMode, pid int, procStart uint64) error {
	if owner, ok := ProcOwner(pid, procStart); ok && owner == uid {
		return nil
	}
	if uid == uint32(os.Geteuid()) || slices.Contains(c.cfg.TrustedUIDs, uid) {
		return nil
	}
	return fmt.Errorf("%w: owner uid %d neither owns the producer pid %d here nor is trusted (agent -ring-uids)", ErrUntrusted, uid, pid)
}

// removeIfDead unlinks p only while it still is the file id names and no
// producer holds its lock: a new ring at the same path is never removed.
func (c *Collector) removeIfDead(p string, id FileID) bool {
	if cur, ok := fileID(p); !ok || cur != id || FileLocked(p) {
		return false
	}
	return os.Remove(p) == nil
}

// unusable handles a ring file that cannot be mapped: a half-created one
// is removed once no producer holds its lock and it is older than the
// grace; an untrusted one is left alone and not tried again.
func (c *Collector) unusable(p string, id FileID, err error) {
	if errors.Is(err, ErrUntrusted) {
		c.stats.Refused++
		if len(c.refused) > 1<<14 {
			clear(c.refused)
		}
		c.refused[id] = true
		c.cfg.Log.Warn("nccl ring file refused", "path", p, "err", err)
		return
	}
	fi, serr := os.Lstat(p)
	if serr != nil {
		return
	}
	if errors.Is(err, ErrNotReady) && c.cfg.Now().Sub(fi.ModTime()) >= c.cfg.Grace && c.removeIfDead(p, id) {
		c.stats.Removed++
		return
	}
	if !errors.Is(err, ErrNotReady) {
		c.cfg.Log.Debug("nccl ring unusable", "path", p, "err", err)
	}
}

func (c *Collector) drain(st *ringState, jobs map[string]*JobData, producerDead bool) error {
	max := c.cfg.MaxPerRing
	if max <= 0 {
		max = int(st.ring.Header.Capacity)
	}
	var jd *JobData
	if st.job != "" {
		jd = jobs[st.job]
		if jd == nil {
			jd = &JobData{Job: st.job}
			jobs[st.job] = jd
		}
	}
	n, lost, err := st.ring.Drain(max, producerDead, func(r *Record) {
		switch {
		case jd == nil:
			c.stats.Unattributed++
		case r.IsCall():
			call, err := st.origin.Call(r)
			if err != nil {
				c.stats.Invalid++
				jd.Dropped++
				return
			}
			if call.Op.P2P() {
				if !st.pairs[call.Comm] {
					if m, err := st.origin.PairComm(r); err == nil {
						st.pairs[call.Comm] = true
						jd.Comms = append(jd.Comms, m)
					}
				}
			} else {
				call.Comm = c.intern(r.CommID)
			}
			jd.Calls = append(jd.Calls, call)
			c.stats.Calls++
		case r.IsComm():
			m, err := st.origin.Comm(r)
			if err != nil {
				c.stats.Invalid++
				return
			}
			st.world = max2(st.world, m.Size)
			jd.Comms = append(jd.Comms, m)
		}
	})
	if err != nil {
		return err
	}
	c.stats.Records += uint64(n)
	c.stats.Lost += lost
	d := st.ring.Dropped()
	delta := d - st.lastDropped
	st.lastDropped = d
	c.stats.RingDropped += delta
	if jd == nil {
		if !st.warned && n > 0 {
			st.warned = true
			c.cfg.Log.Warn("nccl ring has no job id: set LAGGARD_JOB in the trainer or -job on the agent; its records are discarded", "path", st.ring.Path, "pid", st.origin.PID)
		}
		return nil
	}
	jd.Dropped += int64(delta + lost)
	jd.World = max2(jd.World, st.world)
	return nil
}

func max2(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func (c *Collector) intern(id uint64) string {
	s, ok := c.ids[id]
	if !ok {
		if len(c.ids) > 1<<16 {
			clear(c.ids)
		}
		s = CommID(id)
		c.ids[id] = s
	}
	return s
}

// Stats returns the counters.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Rings = len(c.rings)
	return s
}

// Locals lists the live producers with a job, for validation polling.
func (c *Collector) Locals() []Local {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Local
	for _, st := range c.rings {
		if st.job == "" || !st.deadSince.IsZero() || st.origin.Rank < 0 {
			continue
		}
		out = append(out, Local{Job: st.job, Rank: st.origin.Rank, LocalRank: int(st.ring.Header.LocalRank), PID: st.origin.PID, Path: st.ring.Path})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Job != out[b].Job {
			return out[a].Job < out[b].Job
		}
		return out[a].Rank < out[b].Rank
	})
	return out
}

// Armed names the pause generations one Arm call set, for Release.
type Armed struct {
	rings map[FileID]uint32
}

// Rings is how many rings the Arm call trapped.
func (a Armed) Rings() int { return len(a.rings) }

// Arm arms a new pause generation in every live ring of (job, rank)
// (Greyhound §4.3 trap); the shim gives up on it after timeout.
func (c *Collector) Arm(job string, rank int, timeout time.Duration) Armed {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := uint32(min(max(timeout.Milliseconds(), 1), 1<<31))
	a := Armed{rings: map[FileID]uint32{}}
	for id, st := range c.rings {
		if st.job == job && st.origin.Rank == rank && st.deadSince.IsZero() {
			if gen := st.ring.Arm(ms); gen != 0 {
				st.armed = gen
				a.rings[id] = gen
			}
		}
	}
	return a
}

// Release releases the generations a armed, where they are still the
// armed ones (a newer plan's trap stays), and reports how many it freed.
func (c *Collector) Release(a Armed) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id, gen := range a.rings {
		st := c.rings[id]
		if st == nil {
			continue
		}
		if st.ring.Release(gen) {
			n++
		}
		if st.armed == gen {
			st.armed = 0
		}
	}
	return n
}

// Close unmaps every ring, releasing any trap this agent armed so a
// stopping agent never leaves training paused.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, st := range c.rings {
		if st.armed != 0 {
			st.ring.Release(st.armed)
		}
		_ = st.ring.Close()
		delete(c.rings, id)
	}
	return nil
}

// IsRingName reports whether a file name is a shim ring's.
func IsRingName(name string) bool {
	return strings.HasPrefix(name, FilePrefix) && PIDFromName(name) > 0
}
