// Package ringtest writes NCCL shim rings from Go, following
// native/ncclshim/record.h, so the agent's tests can produce rings without
// a C compiler. It is a test helper: production rings come from the shim.
package ringtest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/laggard-dev/laggard/internal/agent/nccl"
)

// Writer is a producer of one ring file. Like the shim it holds a shared
// flock on the file while it "lives"; Exit drops it.
type Writer struct {
	Path string
	mem  []byte
	mask uint64
	f    *os.File
}

var serial atomic.Uint64

// Create makes dir/laggard-nccl.<h.PID>.<hex> with header h (Capacity
// must be a power of two ≥ 8) and takes the producer's flock.
func Create(dir string, h nccl.Header) (*Writer, error) {
	if h.Capacity < 8 || h.Capacity&(h.Capacity-1) != 0 {
		return nil, fmt.Errorf("capacity %d is not a power of two ≥ 8", h.Capacity)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s%d.%x", nccl.FilePrefix, h.PID, serial.Add(1)))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	size := int64(nccl.HeaderSize) + int64(h.Capacity)*nccl.RecordSize
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, err
	}
	nccl.EncodeHeader(mem, &h)
	return &Writer{Path: p, mem: mem, mask: h.Capacity - 1, f: f}, nil
}

// Exit drops the producer's flock, as the process's death would: the
// mapping too, since it keeps the locked file open (the Writer is unusable
// afterwards).
func (w *Writer) Exit() {
	if w.mem != nil {
		_ = syscall.Munmap(w.mem)
		w.mem = nil
	}
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

func (w *Writer) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&w.mem[off])) }

// Append publishes r as the shim would (its Ticket is overwritten); false
// when the ring is full (the drop is counted in the header).
func (w *Writer) Append(r nccl.Record) bool {
	for {
		wi := atomic.LoadUint64(w.u64(32))
		if wi-atomic.LoadUint64(w.u64(40)) > w.mask {
			atomic.AddUint64(w.u64(48), 1)
			return false
		}
		if atomic.CompareAndSwapUint64(w.u64(32), wi, wi+1) {
			off := nccl.HeaderSize + int(wi&w.mask)*nccl.RecordSize
			slot := w.mem[off : off+nccl.RecordSize]
			r.Ticket = 0
			var tmp [nccl.RecordSize]byte
			nccl.EncodeRecord(tmp[:], &r)
			copy(slot[8:], tmp[8:])
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&slot[0])), wi+1)
			return true
		}
	}
}

// Reserve takes a ticket without publishing it (a writer that stalls or
// died mid-record).
func (w *Writer) Reserve() uint64 { return atomic.AddUint64(w.u64(32), 1) - 1 }

// Pause returns whether a pause generation is armed, and its timeout, as
// the shim sees them.
func (w *Writer) Pause() (on bool, timeoutMS uint32) {
	return w.PauseGen()&1 == 1, atomic.LoadUint32((*uint32)(unsafe.Pointer(&w.mem[60])))
}

// PauseGen is the raw pause word (generation; odd = armed).
func (w *Writer) PauseGen() uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&w.mem[56]))) }

// SetPauseGen stores the pause word (a previous agent's leftover).
func (w *Writer) SetPauseGen(g uint32) { atomic.StoreUint32((*uint32)(unsafe.Pointer(&w.mem[56])), g) }

// Dropped is the header's drop counter.
func (w *Writer) Dropped() uint64 { return atomic.LoadUint64(w.u64(48)) }

// Close unmaps the ring and drops the lock; the file stays.
func (w *Writer) Close() error {
	w.Exit()
	return nil
}
