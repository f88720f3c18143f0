package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrDiskFull is returned (wrapped, with the figures) by writes while the
// store's filesystem has less free space than the reserve, or after a
// write failed for lack of space. Reads keep working. The HTTP API answers
// 507 + Retry-After; writes resume by themselves once space is freed.
var ErrDiskFull = errors.New("store: disk full")

// Why a reserve, checked before every write, rather than handling ENOSPC
// when it comes: Pebble (v1.1) treats a failed WAL or MANIFEST write as
// fatal and offers no option to change that —
//   - commitPipeline.Commit → DB.commitWrite panics when LogWriter.SyncRecord
//     reports an earlier WAL write error, with the commit pipeline's mutex
//     still held, so every later write would block forever;
//   - DB.Apply calls Logger.Fatalf("pebble: fatal commit error") when
//     rotating to a new WAL (makeRoomForWrite) fails;
//   - versionSet.logAndApply calls Logger.Fatalf when a MANIFEST write or
//     sync fails — from the flush and compaction goroutines, where no
//     caller can recover it, and from Open (create/replay).
// A failed memtable flush only reports a background error and is retried,
// but it needs the space for the new sstable. So the store stops writing
// while free space is below a reserve that covers flushing every memtable
// and a few commits: Pebble then never sees ENOSPC from our writes. If it
// sees it anyway (another process fills the disk between checks), the
// store recovers the panic on the writing goroutine, returns ErrDiskFull
// and refuses writes until it is reopened (see Store.broken); a fatal
// error on a Pebble background goroutine still ends the process, and the
// store then opens read-only while the disk is full (Open) and reopens
// writable by itself once space returns.

// spaceCheckEvery is how long a free-space reading is trusted; writes in
// between are subtracted from it, so a burst cannot overshoot the reserve.
const spaceCheckEvery = time.Second

// spaceGuard keeps the store's free space above a reserve.
type spaceGuard struct {
	dir     string
	reserve int64 // negative: no check
	free    func(dir string) (uint64, error)
	log     *slog.Logger
	now     func() time.Time

	// debt, if set, is the bytes the store's pending compactions still
	// have to write (Pebble's estimate): room they need on top of the
	// reserve, read with each free-space reading.
	debt func() int64

	mu      sync.Mutex
	checked time.Time
	avail   int64 // free bytes at the last reading, less the writes since
	owed    int64 // debt at the last reading
	known   bool  // the last reading succeeded
	full    bool
}

func newSpaceGuard(dir string, reserve int64, free func(string) (uint64, error), log *slog.Logger) *spaceGuard {
	if free == nil {
		free = statfsFree
	}
	return &spaceGuard{dir: dir, reserve: reserve, free: free, log: log, now: time.Now}
}

// refresh re-reads free space if the reading is stale; g.mu is held.
func (g *spaceGuard) refresh(force bool) {
	now := g.now()
	if !force && g.known && now.Sub(g.checked) < spaceCheckEvery {
		return
	}
	g.checked = now
	f, err := g.free(g.dir)
	if err != nil {
		if g.known || g.checked.IsZero() {
			g.log.Warn("cannot read free disk space; the free-space reserve is not enforced until it can", "dir", g.dir, "err", err)
		}
		g.known = false
		g.setFull(false, 0)
		return
	}
	g.known = true
	g.avail = int64(min(f, uint64(1)<<62))
	if g.debt != nil {
		g.owed = max(g.debt(), 0)
	}
	g.setFull(g.avail < g.floor(), 0)
}

// floor is the free space writes must leave: the reserve, plus what
// pending compactions will write. Why the debt: compactions run after
// writes stop, and on a small volume they took the reserve to 0 and
// failed (ENOSPC) while level 0 filled until Pebble stalled every write
// (issue 16 item 12). Admitting writes only while the compactions they
// cause have room keeps the store able to catch up, and then to accept
// writes again.
func (g *spaceGuard) floor() int64 { return g.reserve + g.owed }

// setFull records the state, logging each transition once.
func (g *spaceGuard) setFull(full bool, need int64) {
	if full == g.full {
		return
	}
	g.full = full
	if full {
		g.log.Error("disk nearly full: refusing writes (ingest answers 507) until space is freed; reads keep working",
			"dir", g.dir, "free_bytes", g.avail, "reserve_bytes", g.reserve, "compaction_debt_bytes", g.owed, "write_bytes", need)
	} else {
		g.log.Info("disk space available again: accepting writes", "dir", g.dir, "free_bytes", g.avail, "reserve_bytes", g.reserve)
	}
}

// check admits a write of about need bytes, or returns ErrDiskFull.
func (g *spaceGuard) check(need int64) error {
	if g == nil || g.reserve < 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refresh(false)
	if !g.known {
		return nil
	}
	if g.avail-need < g.floor() {
		if g.avail >= g.floor() {
			// Close to the edge: a fresh reading before refusing, since
			// the subtracted writes overstate what the WAL really took.
			g.refresh(true)
		}
		if g.avail-need < g.floor() {
			g.setFull(true, need)
			return g.errLocked()
		}
	}
	g.avail -= need
	return nil
}

// noteNoSpace records that a write failed for lack of space, whatever
// the last reading said.
func (g *spaceGuard) noteNoSpace() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.avail, g.checked = 0, g.now()
	g.setFull(true, 0)
}

func (g *spaceGuard) errLocked() error {
	if g.owed > 0 {
		return fmt.Errorf("%w: %s free on the data directory's filesystem, below the reserve of %s plus the %s pending compactions will write; writes resume by themselves once space is freed",
			ErrDiskFull, fmtBytes(g.avail), fmtBytes(g.reserve), fmtBytes(g.owed))
	}
	return fmt.Errorf("%w: %s free on the data directory's filesystem, below the reserve of %s; writes resume by themselves once space is freed",
		ErrDiskFull, fmtBytes(g.avail), fmtBytes(g.reserve))
}

// low reports whether free space is below the reserve now (a fresh
// reading); false when it cannot be read or the check is off.
func (g *spaceGuard) low() bool {
	if g == nil || g.reserve < 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refresh(true)
	return g.known && g.full
}

// state returns the last reading: free bytes (-1 unknown) and whether
// writes are refused for lack of space.
func (g *spaceGuard) state() (free int64, full bool) {
	if g == nil {
		return -1, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refresh(false)
	if !g.known {
		return -1, g.full
	}
	return g.avail, g.full
}

// WriteError is nil while the store accepts writes, else why every write
// is refused: the disk is below the free-space reserve, the store is
// read-only after starting on a full disk, or a write broke Pebble. The
// server's /healthz reports it as "degraded" (reads keep working). Like a
// write, it starts reopening a read-only store once space is back.
func (s *Store) WriteError() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	return s.writable(0)
}

// isNoSpace reports whether err (or a recovered panic value) is the
// filesystem running out of space.
func isNoSpace(v any) bool {
	switch e := v.(type) {
	case error:
		return errors.Is(e, syscall.ENOSPC) || errors.Is(e, syscall.EDQUOT)
	case string:
		return containsNoSpace(e)
	}
	return false
}

func containsNoSpace(s string) bool {
	return strings.Contains(s, "no space left on device") || strings.Contains(s, "disk quota exceeded")
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
