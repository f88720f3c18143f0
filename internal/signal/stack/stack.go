// Package stack is the CPU-stack signal: sampled call stacks per process
// and thread, aggregated over a window (SysOM-AI §3.3, §4: in-kernel
// aggregation drained every 5 s), with the raw addresses and Build-IDs the
// server symbolizes centrally (§3.4), and the symbolized Profile the
// engines, the UI and pprof export read.
//
// Two shapes:
//   - Batch is what a node agent (or an importer of outside profiles)
//     ships: frames are raw (Native: an ELF virtual address inside a
//     Build-ID'd mapping) or already named (Kernel from kallsyms, Python
//     from the interpreter, Symbol from pprof/collapsed input).
//   - Profile is the symbolized, interned form for one rank (or a group)
//     over a window: what flame graphs, the CPU waterline and the
//     differential diagnosis read.
package stack

import (
	"errors"
	"fmt"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Kind says where a frame's code lives and who names it.
type Kind uint8

const (
	KindInvalid Kind = iota
	// Native is user-space machine code: Addr is the normalized ELF
	// virtual address (what the binary's symbol table uses) inside
	// Batch.Mappings[Mapping]; the server names it from the Build-ID.
	Native
	// Kernel is kernel code, named by the agent from /proc/kallsyms
	// (complete on every node, so node-side naming cannot be sparse).
	Kernel
	// Python is a CPython frame: Func, File and Line from the code object.
	Python
	// Symbol is a frame an outside profiler already named (pprof,
	// collapsed stacks) or a synthetic frame laggard adds (the interfering
	// process's name above a foreign sample).
	Symbol
	numKinds
)

var kindNames = [numKinds]string{"", "native", "kernel", "python", "symbol"}

func (k Kind) String() string {
	if k < numKinds && k != KindInvalid {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k > KindInvalid && k < numKinds }

func (k Kind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("invalid frame kind %d", uint8(k))
	}
	return []byte(kindNames[k]), nil
}

func (k *Kind) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	for i := Native; i < numKinds; i++ {
		if kindNames[i] == s {
			*k = i
			return nil
		}
	}
	return fmt.Errorf("unknown frame kind %q", signal.Clip(string(b)))
}

// Mapping is one executable file mapping of a sampled process.
type Mapping struct {
	// Start, Limit: the mapped virtual address range [Start, Limit);
	// Offset: the file offset mapped at Start.
	Start  uint64 `json:"start"`
	Limit  uint64 `json:"limit"`
	Offset uint64 `json:"offset"`
	// BuildID is the ELF .note.gnu.build-id as lowercase hex ("" when the
	// file has none; its frames are then named only by the agent).
	BuildID string `json:"build_id,omitempty"`
	Path    string `json:"path,omitempty"`
}

// Frame is one frame of a stack.
type Frame struct {
	Kind Kind `json:"kind"`
	// Addr: for Native, the normalized ELF virtual address of the
	// instruction (a return address minus one for caller frames, so it
	// lies inside the call); for Kernel, the kernel address (kept for
	// export); 0 otherwise.
	Addr uint64 `json:"addr,omitempty"`
	// Mapping indexes Batch.Mappings for Native frames; -1 otherwise.
	Mapping int32 `json:"mapping"`
	// Func, File, Line: the name when known at capture (Kernel, Python,
	// Symbol, or a Native frame the agent named from an exported symbol
	// because its file has no Build-ID).
	Func string `json:"func,omitempty"`
	File string `json:"file,omitempty"`
	Line int32  `json:"line,omitempty"`
}

// Sample is one distinct stack of one thread with its sample count over
// the batch's window (in-kernel aggregation, §4).
type Sample struct {
	// Rank is the training rank the process registered as (§4 Unix
	// socket), or -1 for an unregistered process.
	Rank int `json:"rank"`
	PID  int `json:"pid"`
	TID  int `json:"tid"`
	// Comm is the process name, Thread the thread name.
	Comm   string `json:"comm,omitempty"`
	Thread string `json:"thread,omitempty"`
	// Foreign marks a sample of another process taken on a CPU where
	// Rank's threads ran in this window: interference on the rank's
	// cores (a CPU hog, a system service) that the rank's own stacks
	// cannot show. Rank is the rank it interfered with.
	Foreign bool `json:"foreign,omitempty"`
	// Frames, leaf first.
	Frames []Frame `json:"frames"`
	Count  int64   `json:"count"`
	// Truncated: the unwinder stopped before the stack's root (depth
	// limit, unreadable memory, no unwind rule).
	Truncated bool `json:"truncated,omitempty"`
}

// Opaque foreign samples: another process's samples on a rank's CPUs
// that the agent ships without the process's name or stacks — because
// the rank's registrant could not read that process itself
// (docs/security.md), or because it is laggard's own agent or server.
// Such a sample is Foreign, has PID 0 and a single Symbol frame that
// names it; symbolization shows that frame alone, so the interference
// keeps its width in the rank's flame graph and nothing else is told.
const (
	HiddenFrame = "[other process] (hidden)"
	SelfFrame   = "[other process] laggard (its own agent or server)"
)

// Opaque reports whether s is an opaque foreign sample.
func (s *Sample) Opaque() bool {
	return s.Foreign && s.PID == 0 && len(s.Frames) == 1 && s.Frames[0].Kind == Symbol
}

// UnwindStats counts how the agent unwound a batch's user frames
// (§3.3 Algorithm 1; §5.2 frame accuracy).
type UnwindStats struct {
	FPFrames       int64 `json:"fp_frames"`
	DWARFFrames    int64 `json:"dwarf_frames"`
	FallbackFrames int64 `json:"fallback_frames"` // complex CFI, unwound in user space
	PythonFrames   int64 `json:"python_frames"`
	Truncated      int64 `json:"truncated"`
}

// Batch is one node's (or one imported file's) stacks over a window.
type Batch struct {
	Node    string `json:"node,omitempty"`
	StartNS int64  `json:"start_ns"`
	EndNS   int64  `json:"end_ns"`
	// Hz is the sampling timer's frequency and Ratio the fraction of its
	// ticks that collected a stack (§5.1 "sampling rate"); a sample
	// stands for 1/(Hz·Ratio) s of CPU time. Imported profiles without a
	// rate carry Hz 0.
	Hz       int         `json:"hz"`
	Ratio    float64     `json:"ratio"`
	Mappings []Mapping   `json:"mappings,omitempty"`
	Samples  []Sample    `json:"samples"`
	Dropped  int64       `json:"dropped,omitempty"`
	Unwind   UnwindStats `json:"unwind"`
}

// Bounds on input (the wire decoders enforce them before allocating).
const (
	MaxFrames   = 256
	MaxSamples  = 1 << 20
	MaxMappings = 1 << 16
	MaxNameLen  = 4096
	MaxHz       = 999
	MinHz       = 10
	MaxCount    = int64(1) << 40
	// MaxBuildIDLen bounds a hex Build-ID (SHA-1 is 40; some linkers
	// emit longer ids).
	MaxBuildIDLen = 128
	MaxPID        = 1<<31 - 1
	MaxRank       = 1 << 20
)

// Validate checks a batch and names the offending field.
func (b *Batch) Validate() error {
	if err := b.ValidateHeader(); err != nil {
		return err
	}
	for i := range b.Mappings {
		if err := b.ValidateMapping(i); err != nil {
			return err
		}
	}
	for i := range b.Samples {
		if err := b.ValidateSample(i); err != nil {
			return err
		}
	}
	return nil
}

// ValidateHeader checks what belongs to the whole batch (window, rate,
// counts, node) but not its mappings and samples: the parts of Validate
// a partial decode cannot keep a batch without (laggardv1 partial
// decoders refuse single mappings and samples instead).
func (b *Batch) ValidateHeader() error {
	if b.StartNS <= 0 || b.EndNS < b.StartNS {
		return signal.FieldErrorf("end_ns", "window [%d, %d] is empty or reversed", b.StartNS, b.EndNS)
	}
	if b.Hz != 0 && (b.Hz < MinHz || b.Hz > MaxHz) {
		return signal.FieldErrorf("hz", "%d outside [%d, %d]", b.Hz, MinHz, MaxHz)
	}
	if b.Hz != 0 && !(b.Ratio > 0 && b.Ratio <= 1) {
		return signal.FieldErrorf("ratio", "%v outside (0, 1]", b.Ratio)
	}
	if len(b.Mappings) > MaxMappings {
		return signal.FieldErrorf("mappings", "%d mappings exceed %d", len(b.Mappings), MaxMappings)
	}
	if len(b.Samples) > MaxSamples {
		return signal.FieldErrorf("samples", "%d samples exceed %d", len(b.Samples), MaxSamples)
	}
	if b.Dropped < 0 {
		return signal.FieldErrorf("dropped", "negative")
	}
	if len(b.Node) > MaxNameLen {
		return signal.FieldErrorf("node", "longer than %d bytes", MaxNameLen)
	}
	return nil
}

// ValidateMapping checks mappings[i]; the error names mappings[i].field.
func (b *Batch) ValidateMapping(i int) error {
	m := &b.Mappings[i]
	f := func(name string) string { return fmt.Sprintf("mappings[%d].%s", i, name) }
	if m.Limit <= m.Start {
		return signal.FieldErrorf(f("limit"), "limit %#x not above start %#x", m.Limit, m.Start)
	}
	if len(m.BuildID) > MaxBuildIDLen || !isHex(m.BuildID) {
		return signal.FieldErrorf(f("build_id"), "not lowercase hex of at most %d digits", MaxBuildIDLen)
	}
	if len(m.Path) > MaxNameLen {
		return signal.FieldErrorf(f("path"), "longer than %d bytes", MaxNameLen)
	}
	return nil
}

// ValidateSample checks samples[i] against the batch's mappings; the
// error names samples[i].field.
func (b *Batch) ValidateSample(i int) error {
	if err := b.Samples[i].validate(len(b.Mappings)); err != nil {
		if fe, ok := errors.AsType[*signal.FieldError](err); ok {
			return signal.FieldErrorf(fmt.Sprintf("samples[%d].%s", i, fe.Field), "%s", fe.Msg)
		}
		return err
	}
	return nil
}

func (s *Sample) validate(mappings int) error {
	if s.Rank < -1 || s.Rank > MaxRank {
		return signal.FieldErrorf("rank", "%d outside [-1, %d]", s.Rank, MaxRank)
	}
	if s.Foreign && s.Rank < 0 {
		return signal.FieldErrorf("foreign", "a foreign sample must name the rank it interfered with")
	}
	if s.PID < 0 || s.PID > MaxPID || s.TID < 0 || s.TID > MaxPID {
		return signal.FieldErrorf("pid", "pid %d / tid %d outside [0, %d]", s.PID, s.TID, MaxPID)
	}
	if s.Count <= 0 || s.Count > MaxCount {
		return signal.FieldErrorf("count", "%d outside [1, %d]", s.Count, MaxCount)
	}
	if len(s.Comm) > MaxNameLen || len(s.Thread) > MaxNameLen {
		return signal.FieldErrorf("comm", "longer than %d bytes", MaxNameLen)
	}
	if len(s.Frames) == 0 || len(s.Frames) > MaxFrames {
		return signal.FieldErrorf("frames", "%d frames outside [1, %d]", len(s.Frames), MaxFrames)
	}
	for j := range s.Frames {
		fr := &s.Frames[j]
		f := func(name string) string { return fmt.Sprintf("frames[%d].%s", j, name) }
		if !fr.Kind.Valid() {
			return signal.FieldErrorf(f("kind"), "invalid kind %d", uint8(fr.Kind))
		}
		if fr.Kind == Native {
			if fr.Mapping < 0 || int(fr.Mapping) >= mappings {
				if fr.Func == "" {
					return signal.FieldErrorf(f("mapping"), "%d does not index the batch's %d mappings and the frame has no name", fr.Mapping, mappings)
				}
			}
		} else {
			if fr.Mapping != -1 && (fr.Mapping < 0 || int(fr.Mapping) >= mappings) {
				return signal.FieldErrorf(f("mapping"), "%d does not index the batch's %d mappings", fr.Mapping, mappings)
			}
			if fr.Func == "" {
				return signal.FieldErrorf(f("func"), "a %s frame needs a name", fr.Kind)
			}
		}
		if len(fr.Func) > MaxNameLen || len(fr.File) > MaxNameLen {
			return signal.FieldErrorf(f("func"), "longer than %d bytes", MaxNameLen)
		}
		if fr.Line < 0 {
			return signal.FieldErrorf(f("line"), "negative")
		}
	}
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Func is one interned function of a Profile.
type Func struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Module is the file the code lives in (binary or library base name,
	// "kernel", or the Python source file).
	Module string `json:"module,omitempty"`
}

// Stack is one distinct symbolized stack of a Profile.
type Stack struct {
	// Frames index Profile.Funcs, root first (flame-graph order).
	Frames []int32 `json:"frames"`
	Count  int64   `json:"count"`
}

// Profile is the symbolized CPU profile of one rank (or a merge of
// several) over [StartNS, EndNS).
type Profile struct {
	Rank    int     `json:"rank"` // -1 for a merged (group) profile
	StartNS int64   `json:"start_ns"`
	EndNS   int64   `json:"end_ns"`
	Hz      int     `json:"hz"`
	Ratio   float64 `json:"ratio"`
	Funcs   []Func  `json:"funcs"`
	Stacks  []Stack `json:"stacks"`
	// Total is the sum of Stacks' counts: the denominator of a
	// function's CPU fraction (§3.1 waterline).
	Total int64 `json:"total"`
}
