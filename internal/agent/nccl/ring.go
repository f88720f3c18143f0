package nccl

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// FileID names a ring file by (device, inode): a path can be unlinked and
// reused, an inode the agent holds open cannot.
type FileID struct{ Dev, Ino uint64 }

// Ring is one producer's ring, mapped by the agent: the record area
// read-only, the header page read-write (the agent owns read_index, pause
// and pause_timeout_ms; record.h). The agent keeps the file open: the fd
// is what it probes the producer's flock with.
type Ring struct {
	Path   string
	ID     FileID
	UID    uint32 // file owner
	Header Header // as first decoded; counters are re-read live
	f      *os.File
	size   int64
	hdr    []byte // RW mapping of the header page
	slots  []byte // RO mapping of the whole file (slots from HeaderSize)
	mask   uint64
	broken error // set once the file shrank or faulted: never touched again
}

// ErrShrunk marks a ring whose file is smaller than its header says (it
// was truncated under the agent): reading it would fault (SIGBUS).
var ErrShrunk = errors.New("ring file shrank under the agent")

// ErrUntrusted marks a ring file the agent refuses to map (owner, mode).
var ErrUntrusted = errors.New("ring file not trusted")

// Trust decides whether a ring file owned by uid with mode may be mapped
// (R3). pid is the producer pid the header names (0 when not yet known).
type Trust func(uid uint32, mode os.FileMode, pid int, procStart uint64) error

// OpenRing maps a ring file. ErrNotReady means the producer is still
// creating it; try again on the next poll. trust, when not nil, vets the
// file's owner before anything is mapped.
func OpenRing(path string, trust Trust) (*Ring, error) {
	// O_NOFOLLOW: a symlink planted in the ring directory must not make
	// the agent map (and write read_index/pause into) another file.
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	mode := os.FileMode(st.Mode & 0o777)
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%w: not a regular file", ErrUntrusted)
	}
	if mode&0o022 != 0 {
		return nil, fmt.Errorf("%w: mode %v is writable by others (the shim creates 0600)", ErrUntrusted, mode)
	}
	if st.Size < HeaderSize {
		return nil, ErrNotReady
	}
	hdr, err := syscall.Mmap(fd, 0, HeaderSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap header: %w", err)
	}
	var h Header
	err = guard(func() error {
		// acquire: the shim stores magic last (review N1)
		if atomic.LoadUint64((*uint64)(unsafe.Pointer(&hdr[offMagic]))) == 0 {
			return ErrNotReady
		}
		var derr error
		h, derr = DecodeHeader(hdr, st.Size)
		return derr
	})
	if err == nil && trust != nil {
		err = trust(st.Uid, mode, int(h.PID), h.ProcStart)
	}
	if err != nil {
		_ = syscall.Munmap(hdr)
		return nil, err
	}
	all, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		_ = syscall.Munmap(hdr)
		return nil, fmt.Errorf("mmap records: %w", err)
	}
	ok = true
	return &Ring{Path: path, ID: FileID{uint64(st.Dev), st.Ino}, UID: st.Uid, Header: h, f: f, size: st.Size,
		hdr: hdr, slots: all, mask: h.Capacity - 1}, nil
}

// guard runs fn with faults on mapped memory turned into a panic it
// recovers (R3: a file truncated between the size check and the read
// must not kill the agent with SIGBUS).
func guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrShrunk, p)
		}
	}()
	return fn()
}

// Check re-validates the file size against the header (on every drain:
// a truncated mapping faults on access). A ring that fails stays broken.
func (r *Ring) Check() error {
	if r.broken != nil {
		return r.broken
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(r.f.Fd()), &st); err != nil {
		r.broken = err
		return err
	}
	if st.Size < r.size {
		r.broken = fmt.Errorf("%w: %d bytes, want %d", ErrShrunk, st.Size, r.size)
		return r.broken
	}
	return nil
}

// do runs fn on the mapping when the file is still whole, recovering a
// fault; the ring is marked broken on any failure.
func (r *Ring) do(fn func()) error {
	if err := r.Check(); err != nil {
		return err
	}
	err := guard(func() error { fn(); return nil })
	if err != nil {
		r.broken = err
	}
	return err
}

// Broken is the reason the ring is no longer read, or nil.
func (r *Ring) Broken() error { return r.broken }

// Close unmaps the ring and closes the file (the file stays).
func (r *Ring) Close() error {
	err1 := syscall.Munmap(r.hdr)
	err2 := syscall.Munmap(r.slots)
	r.f.Close()
	if err1 != nil {
		return err1
	}
	return err2
}

func (r *Ring) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.hdr[off])) }
func (r *Ring) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.hdr[off])) }

// Dropped is the producer's count of records lost to a full ring.
func (r *Ring) Dropped() (d uint64) {
	_ = r.do(func() { d = atomic.LoadUint64(r.u64(offDropped)) })
	return d
}

// Trapped is how many calls waited in the pause trap, and for how long.
func (r *Ring) Trapped() (calls, ns uint64) {
	_ = r.do(func() { calls, ns = atomic.LoadUint64(r.u64(offTrapped)), atomic.LoadUint64(r.u64(offTrappedNS)) })
	return calls, ns
}

// Pending is how many records are written or being written but not read.
func (r *Ring) Pending() (n uint64) {
	_ = r.do(func() { n = atomic.LoadUint64(r.u64(offWriteIndex)) - atomic.LoadUint64(r.u64(offReadIndex)) })
	return n
}

// Arm arms a new pause generation (Greyhound §4.3 trap): the producer's
// next intercepted call outside a group waits until Release(gen), at most
// timeoutMS (the shim's own bound, so a dead agent cannot hang training;
// a timed-out generation never traps again). It returns the generation,
// 0 when the ring is unusable.
func (r *Ring) Arm(timeoutMS uint32) (gen uint32) {
	_ = r.do(func() {
		atomic.StoreUint32(r.u32(offPauseTimeout), timeoutMS)
		for {
			cur := atomic.LoadUint32(r.u32(offPause))
			next := cur + 1
			if cur&1 == 1 {
				next = cur + 2 // armed by someone else: take a newer one
			}
			if atomic.CompareAndSwapUint32(r.u32(offPause), cur, next) {
				gen = next
				return
			}
		}
	})
	return gen
}

// Release releases generation gen if it is still the armed one (so a
// late release never clears a newer plan's trap); it reports whether it
// did.
func (r *Ring) Release(gen uint32) (done bool) {
	if gen&1 == 0 {
		return false
	}
	_ = r.do(func() { done = atomic.CompareAndSwapUint32(r.u32(offPause), gen, gen+1) })
	return done
}

// ReleaseAny releases whatever generation is armed (an agent attaching to
// a ring clears a pause it did not set: its predecessor died, B3). It
// returns the generation released, or 0.
func (r *Ring) ReleaseAny() (gen uint32) {
	_ = r.do(func() {
		for {
			cur := atomic.LoadUint32(r.u32(offPause))
			if cur&1 == 0 {
				return
			}
			if atomic.CompareAndSwapUint32(r.u32(offPause), cur, cur+1) {
				gen = cur
				return
			}
		}
	})
	return gen
}

// Paused reports whether a generation is armed.
func (r *Ring) Paused() (on bool) {
	_ = r.do(func() { on = atomic.LoadUint32(r.u32(offPause))&1 == 1 })
	return on
}

// Drain copies up to max complete records, in ticket order, to fn, then
// releases their slots to the producer. A slot not yet complete ends the
// drain while the producer lives (R1: never skip a slot a stalled writer
// may still be copying into — the slot would be handed out again and the
// record torn). With producerDead, incomplete slots up to write_index are
// skipped and counted in lost (B7: a writer killed mid-record). err is set
// when the file shrank or faulted; the ring is then not read again.
func (r *Ring) Drain(max int, producerDead bool, fn func(*Record)) (n int, lost uint64, err error) {
	var recs []Record
	err = r.do(func() {
		rd := atomic.LoadUint64(r.u64(offReadIndex))
		wi := atomic.LoadUint64(r.u64(offWriteIndex))
		if wi-rd > r.mask+1 { // corrupt indices: read at most one ring
			rd = wi - (r.mask + 1)
		}
		for n < max && rd != wi {
			off := HeaderSize + int(rd&r.mask)*RecordSize
			slot := r.slots[off : off+RecordSize]
			t := atomic.LoadUint64((*uint64)(unsafe.Pointer(&slot[0])))
			if t != rd+1 {
				if !producerDead {
					break // a write in progress: come back next poll
				}
				rd++
				lost++
				continue
			}
			rec, _ := DecodeRecord(slot) // length is right by construction
			recs = append(recs, rec)
			n++
			rd++
		}
		// After the copies: the producer may now reuse the slots.
		atomic.StoreUint64(r.u64(offReadIndex), rd)
	})
	if err != nil {
		return 0, 0, err
	}
	for i := range recs {
		fn(&recs[i])
	}
	return n, lost, nil
}

// Alive reports whether the producer still holds its flock on the file
// (record.h): a non-blocking exclusive lock succeeds only when no process
// holds the shared one. It works whatever PID namespace the producer is
// in, and a reused pid cannot fake it (B4).
func (r *Ring) Alive() bool { return locked(int(r.f.Fd())) }

func locked(fd int) bool {
	err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR)
}

// FileLocked opens path (no symlinks) and reports whether a producer holds
// its flock; false when it cannot be opened.
func FileLocked(path string) bool {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return locked(fd)
}

// ProcOwner returns the uid owning /proc/<pid> when that process is
// visible here and started at procStart (0: unknown start); ok false
// otherwise (another PID namespace, or gone).
func ProcOwner(pid int, procStart uint64) (uid uint32, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return 0, false
	}
	if procStart != 0 {
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			return 0, false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, false
		}
		f := strings.Fields(s[i+1:])
		// fields after the comm start at field 3 (state); starttime is 22
		if len(f) < 20 {
			return 0, false
		}
		if v, err := strconv.ParseUint(f[19], 10, 64); err != nil || v != procStart {
			return 0, false
		}
	}
	return st.Uid, true
}

// PIDFromName returns the pid in a ring file name
// (laggard-nccl.<pid>.<hex>), or 0.
func PIDFromName(name string) int {
	s, ok := strings.CutPrefix(name, FilePrefix)
	if !ok {
		return 0
	}
	p, suffix, ok := strings.Cut(s, ".")
	if !ok || suffix == "" {
		return 0
	}
	if _, err := strconv.ParseUint(suffix, 16, 64); err != nil {
		return 0
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
