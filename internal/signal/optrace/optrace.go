// Package optrace is the operator/kernel event signal (KAIR §III-A
// Feature 1): one record per CPU operator, CUDA runtime call, GPU kernel,
// memcpy/memset, collective instance or user range on one rank, as the
// PyTorch profiler (Kineto, CUPTI underneath) records them. KAIR's three
// stages (§III-B) read it: Stage 1 counts op completions per window,
// Stage 2 compares the same operator instance across ranks, Stage 3
// builds the step DAG from program order per thread/stream, launch →
// kernel correlation and collective instances joining ranks.
//
// Timestamps are nanoseconds on the capturing rank's clock (StartNS);
// cross-rank alignment is a separate offset (Trace.ClockOffsetNS), not
// folded into events, so the raw capture stays checkable.
package optrace

import (
	"cmp"
	"fmt"
	"sort"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Category is what kind of activity an event is. The zero value is
// invalid so a missing field is caught.
type Category uint8

const (
	CatInvalid Category = iota
	// CPUOp is a framework operator on a host thread (aten::*, autograd).
	CPUOp
	// GPUKernel is a device kernel on a stream.
	GPUKernel
	// Memcpy / Memset are device copies and fills on a stream.
	Memcpy
	Memset
	// Collective is a communication call (host-side record_param_comms /
	// nccl:* op, or the device-side NCCL kernel); Comm+Seq name the
	// instance when the trace carries them.
	Collective
	// UserRange is a record_function / ProfilerStep# / PerfScope range
	// (§III-A: stages that align profiling with the training loop).
	UserRange
	// Runtime is a CUDA runtime/driver call (cudaLaunchKernel, …): the
	// host end of a launch → kernel edge of the step DAG.
	Runtime
	// Python is a Python function frame (with_stack profiling).
	Python
	// Other is anything else the profiler recorded.
	Other
	numCats
)

var catNames = [numCats]string{"", "cpu_op", "gpu_kernel", "memcpy", "memset", "collective", "user_range", "runtime", "python", "other"}

// Categories lists the valid categories in code order.
func Categories() []Category {
	out := make([]Category, 0, numCats-1)
	for c := CPUOp; c < numCats; c++ {
		out = append(out, c)
	}
	return out
}

func (c Category) String() string {
	if c.Valid() {
		return catNames[c]
	}
	return fmt.Sprintf("Category(%d)", uint8(c))
}

// Valid reports whether c is a known category.
func (c Category) Valid() bool { return c > CatInvalid && c < numCats }

// OnDevice reports whether events of c run on a GPU stream (Collective
// may be either: look at Event.Device).
func (c Category) OnDevice() bool { return c == GPUKernel || c == Memcpy || c == Memset }

// ParseCategory reads a category name (case-insensitive).
func ParseCategory(s string) (Category, error) {
	k := strings.ToLower(s)
	for c := CPUOp; c < numCats; c++ {
		if catNames[c] == k {
			return c, nil
		}
	}
	return CatInvalid, fmt.Errorf("unknown event category %q", signal.Clip(s))
}

func (c Category) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("invalid event category %d", uint8(c))
	}
	return []byte(catNames[c]), nil
}

func (c *Category) UnmarshalText(b []byte) error {
	v, err := ParseCategory(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Arg is one retained profiler argument, both sides as text.
type Arg struct {
	Key   string `json:"k"`
	Value string `json:"v"`
}

// Event is one recorded activity on one rank.
type Event struct {
	// Name is the operator / kernel / range name ("aten::mm",
	// "ProfilerStep#3", "ncclKernel_AllReduce_…"). Callers may intern it:
	// a trace has few distinct names and millions of events.
	Name string   `json:"name"`
	Cat  Category `json:"cat"`
	// PID is the profiled process (for Kineto device rows, the row id).
	PID int64 `json:"pid,omitempty"`
	// TID is the host thread of a host event; Stream the stream of a
	// device event (exactly one of the two is meaningful, per Device).
	TID    int64 `json:"tid,omitempty"`
	Stream int64 `json:"stream,omitempty"`
	// Device is the GPU index of a device event, -1 for host events.
	Device int `json:"device"`
	// StartNS / DurNS on the rank's clock, nanoseconds.
	StartNS int64 `json:"start_ns"`
	DurNS   int64 `json:"dur_ns"`
	// Step is the training step (from the enclosing ProfilerStep#N
	// range, or the launch's step for device work), -1 when unknown.
	Step int64 `json:"step"`
	// Correlation links a runtime launch to the device work it started
	// (CUPTI correlation id), 0 when none. ExternalID links a CPU op to
	// the runtime calls it issued (Kineto "External id"), 0 when none.
	Correlation int64 `json:"corr,omitempty"`
	ExternalID  int64 `json:"ext,omitempty"`
	// FlowID is the id of a Chrome-trace flow arrow ending or starting at
	// this event, 0 when none.
	FlowID int64 `json:"flow,omitempty"`
	// Comm and Seq identify the collective instance (collective.Call:
	// communicator + per-communicator sequence) when the trace names
	// them; Seq is -1 when unknown.
	Comm string `json:"comm,omitempty"`
	Seq  int64  `json:"seq"`
	// Args are retained profiler arguments (bounded by MaxArgs).
	Args []Arg `json:"args,omitempty"`
}

// EndNS is StartNS + DurNS.
func (e *Event) EndNS() int64 { return e.StartNS + e.DurNS }

// Compare orders events by time, enclosing before enclosed — start
// ascending, then end descending (a parent that starts with its first
// child comes first, as profilers write them) — and then by content, so
// that the order never depends on where an event sat in a file: the
// Chrome trace format requires no order, and a reordered file must
// analyse the same (issue 16 item 7d). Args are not compared.
func Compare(a, b *Event) int {
	return cmp.Or(cmp.Compare(a.StartNS, b.StartNS), cmp.Compare(b.DurNS, a.DurNS),
		cmp.Compare(a.Device, b.Device), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.PID, b.PID), cmp.Compare(a.TID, b.TID),
		cmp.Compare(a.Cat, b.Cat), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Step, b.Step),
		cmp.Compare(a.Correlation, b.Correlation), cmp.Compare(a.ExternalID, b.ExternalID), cmp.Compare(a.FlowID, b.FlowID),
		cmp.Compare(a.Comm, b.Comm), cmp.Compare(a.Seq, b.Seq))
}

// Sort puts t's events in Compare order, in place.
func (t *Trace) Sort() {
	ev := t.Events
	sort.Slice(ev, func(i, j int) bool { return Compare(&ev[i], &ev[j]) < 0 })
}

// Trace is one rank's captured window.
type Trace struct {
	Rank int `json:"rank"`
	// ClockOffsetNS is added to every event's StartNS to put it on the
	// reference clock (Feature 4); 0 when not aligned.
	ClockOffsetNS int64   `json:"clock_offset_ns,omitempty"`
	Events        []Event `json:"events"`
}

// Bounds on stored values: sums over a window must never overflow and one
// hostile event must not cost unbounded memory.
const (
	// MaxNameLen bounds an event name (C++ kernel names run to a few KiB).
	MaxNameLen = 4096
	// MaxCommLen bounds a communicator id.
	MaxCommLen = 256
	// MaxArgs bounds retained arguments per event; MaxArgLen each side.
	MaxArgs   = 32
	MaxArgLen = 256
	// MaxAbsNS bounds |StartNS|: ±2200-01-01 in ns since the epoch (traces
	// with relative timestamps stay far below).
	MaxAbsNS = int64(7_258_118_400) * 1e9
	// MaxDurNS bounds a duration: one day.
	MaxDurNS = int64(86_400) * 1e9
	// MaxStep and MaxSeq bound step and sequence numbers: 2^48.
	MaxStep = int64(1) << 48
	MaxSeq  = int64(1) << 48
	// MaxDevice bounds a device index.
	MaxDevice = 1 << 16
)

// Validate checks e's bounds; errors name the field.
func (e *Event) Validate() error { return e.validate("") }

func (e *Event) validate(p string) error {
	switch {
	case e.Name == "":
		return signal.FieldErrorf(p+"name", "must not be empty")
	case len(e.Name) > MaxNameLen:
		return signal.FieldErrorf(p+"name", "%d bytes, longer than %d", len(e.Name), MaxNameLen)
	case !e.Cat.Valid():
		return signal.FieldErrorf(p+"cat", "invalid category %d", uint8(e.Cat))
	case e.Device < -1 || e.Device >= MaxDevice:
		return signal.FieldErrorf(p+"device", "%d out of range [-1,%d)", e.Device, MaxDevice)
	case e.StartNS < -MaxAbsNS || e.StartNS > MaxAbsNS:
		return signal.FieldErrorf(p+"start_ns", "%d out of range", e.StartNS)
	case e.DurNS < 0 || e.DurNS > MaxDurNS:
		return signal.FieldErrorf(p+"dur_ns", "%d out of range [0,%d]", e.DurNS, MaxDurNS)
	case e.Step < -1 || e.Step > MaxStep:
		return signal.FieldErrorf(p+"step", "%d out of range [-1,%d]", e.Step, MaxStep)
	case e.Seq < -1 || e.Seq > MaxSeq:
		return signal.FieldErrorf(p+"seq", "%d out of range [-1,%d]", e.Seq, MaxSeq)
	case len(e.Comm) > MaxCommLen:
		return signal.FieldErrorf(p+"comm", "%d bytes, longer than %d", len(e.Comm), MaxCommLen)
	case e.Seq >= 0 && e.Comm == "":
		return signal.FieldErrorf(p+"comm", "must be set when seq is")
	case len(e.Args) > MaxArgs:
		return signal.FieldErrorf(p+"args", "%d args, more than %d", len(e.Args), MaxArgs)
	}
	for i, a := range e.Args {
		if len(a.Key) > MaxArgLen || len(a.Value) > MaxArgLen {
			return signal.FieldErrorf(fmt.Sprintf("%sargs[%d]", p, i), "key or value longer than %d", MaxArgLen)
		}
	}
	return nil
}

// Validate checks every event; errors name the element ("events[3].dur_ns").
func (t *Trace) Validate() error {
	if t.Rank < 0 {
		return signal.FieldErrorf("rank", "%d must be ≥ 0", t.Rank)
	}
	if t.ClockOffsetNS < -MaxAbsNS || t.ClockOffsetNS > MaxAbsNS {
		return signal.FieldErrorf("clock_offset_ns", "%d out of range", t.ClockOffsetNS)
	}
	for i := range t.Events {
		// The element path is built only on failure: formatting it for
		// every event costs two allocations each on million-event traces.
		if err := t.Events[i].validate(""); err != nil {
			if fe, ok := err.(*signal.FieldError); ok {
				return signal.FieldErrorf(fmt.Sprintf("events[%d].%s", i, fe.Field), "%s", fe.Msg)
			}
			return err
		}
	}
	return nil
}
