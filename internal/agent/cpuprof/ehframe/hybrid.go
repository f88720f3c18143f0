package ehframe

import "sync"

// Module is the code a runtime pc falls in, as the unwinder needs it.
type Module struct {
	BuildID string
	// Rows: the module's compiled table (nil: no CFI; DWARF steps fail).
	Rows []Row
	// Bias = runtime address − ELF virtual address for this mapping
	// (elfinfo.Normalize, constant per mapping).
	Bias uint64
}

// Space is the address space being unwound.
type Space struct {
	// Read loads 8 bytes at addr (little-endian).
	Read func(addr uint64) (uint64, bool)
	// Module returns the module of an executable mapping containing pc;
	// ok=false when pc is in no executable mapping (ValidateCallerPC (1)).
	Module func(pc uint64) (*Module, bool)
}

// Method says how a frame's caller was found.
type Method uint8

const (
	MethodNone  Method = iota // the leaf, or the frame the walk stopped at
	MethodFP                  // frame-pointer step
	MethodDWARF               // table step
)

// Marker is the cached per-(Build-ID, offset) unwinding decision (§3.3).
type Marker uint8

const (
	Unmarked Marker = iota
	MarkFP
	MarkDWARF
)

// MarkerKey identifies a pc: the module's Build-ID and the pc's ELF
// virtual address (stable across processes and ASLR).
type MarkerKey struct {
	BuildID string
	Off     uint64
}

// Markers is the marker map. SetIfUnmarked is a compare-and-swap from
// Unmarked, as in the BPF map (§4: concurrent CPUs converge on the same
// value).
type Markers struct {
	mu sync.Mutex
	m  map[MarkerKey]Marker
}

// NewMarkers returns an empty marker map.
func NewMarkers() *Markers { return &Markers{m: map[MarkerKey]Marker{}} }

func (ms *Markers) Get(k MarkerKey) Marker {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m[k]
}

// SetIfUnmarked stores v if k is unmarked and returns the stored value.
func (ms *Markers) SetIfUnmarked(k MarkerKey, v Marker) Marker {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if cur := ms.m[k]; cur != Unmarked {
		return cur
	}
	ms.m[k] = v
	return v
}

// Len is the number of marked pcs.
func (ms *Markers) Len() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.m)
}

// Mode selects the unwinding algorithm (mirrors cpuprof.Mode).
type Mode uint8

const (
	// ModeHybrid is Algorithm 1 with a stricter marker decision: where the
	// module has CFI, an unmarked pc is marked fp only if its row says the
	// function keeps the frame-pointer convention there (CFA = RBP+16,
	// caller's RBP at CFA−16), so the FP step is exact; without CFI it
	// falls back to ValidateCallerPC. Why: measured on real stacks
	// (ptracesnap.TestLiveChain), ValidateCallerPC alone accepts FP steps
	// from frame-pointer-less leaves whose RBP still holds an ancestor's
	// frame (or a VLA frame): the caller pc is executable and SP grows,
	// yet whole frames are skipped, and the wrong marker is then cached.
	ModeHybrid    Mode = iota
	ModeFPOnly         // frame pointers only (§5.2 baseline)
	ModeDWARFOnly      // tables only
	// ModeHybridPaper is Algorithm 1 exactly as §3.3 states it
	// (ValidateCallerPC only), kept for the evaluation.
	ModeHybridPaper
)

// FrameRow reports whether row r is the frame-pointer convention:
// the FP step from a pc with this row equals the table step.
func FrameRow(r Row) bool { return r.CFAReg == RegRBP && r.CFAOff == 16 && r.RBPOff == -16 }

// Regs are the leaf frame's registers.
type Regs struct{ PC, SP, BP uint64 }

// Frame is one unwound frame: PC is the runtime pc (the leaf's pc, or a
// return address for callers); Method is how this frame was reached from
// its callee (MethodNone for the leaf).
type Frame struct {
	PC     uint64
	Method Method
}

// WalkStats counts the steps of one walk.
type WalkStats struct {
	FP, DWARF   int // caller frames found by each method
	FPRejected  int // FP results ValidateCallerPC rejected
	DWARFFailed int // DWARF steps with no usable row (complex, none)
	Truncated   bool
}

// UnwindFP is the frame-pointer step: the caller's return address at
// [FP+8], its FP at [FP], its SP = FP+16.
func UnwindFP(r Regs, read func(uint64) (uint64, bool)) (Regs, bool) {
	if r.BP == 0 || r.BP&7 != 0 {
		return Regs{}, false
	}
	ra, ok1 := read(r.BP + 8)
	bp, ok2 := read(r.BP)
	if !ok1 || !ok2 {
		return Regs{}, false
	}
	return Regs{PC: ra, SP: r.BP + 16, BP: bp}, true
}

// ValidateCallerPC is §3.3's check: the caller pc lies in an executable
// mapping and the stack pointer strictly increased.
func ValidateCallerPC(sp Space, caller Regs, calleeSP uint64) bool {
	if caller.SP <= calleeSP || caller.PC == 0 {
		return false
	}
	_, ok := sp.Module(caller.PC)
	return ok
}

// unwindDWARF is the table step at runtime pc (adjusted by the caller).
func unwindDWARF(s Space, r Regs, lookupPC uint64) (Regs, bool) {
	m, ok := s.Module(r.PC)
	if !ok || m.Rows == nil {
		return Regs{}, false
	}
	ra, cfa, bp, ok := Unwind(m.Rows, lookupPC-m.Bias, r.SP, r.BP, s.Read)
	if !ok || cfa <= r.SP {
		return Regs{}, false
	}
	return Regs{PC: ra, SP: cfa, BP: bp}, true
}

// UnwindHybrid walks the stack from the leaf registers with Algorithm 1
// of §3.3 (mode ModeHybrid): per pc, a cached marker picks FP or DWARF;
// an unmarked pc tries FP, keeps it if ValidateCallerPC accepts,
// otherwise unwinds with DWARF and marks the pc dwarf. ModeFPOnly and
// ModeDWARFOnly are the evaluation's baselines. markers may be nil
// (ModeFPOnly/ModeDWARFOnly ignore it). At most maxDepth frames.
func UnwindHybrid(s Space, leaf Regs, mode Mode, markers *Markers, maxDepth int) ([]Frame, WalkStats) {
	var st WalkStats
	frames := []Frame{{PC: leaf.PC}}
	cur := leaf
	for len(frames) < maxDepth {
		m, ok := s.Module(cur.PC)
		if !ok { // Algorithm 1 line 2: pc outside every executable mapping
			break
		}
		lookup := cur.PC
		if len(frames) > 1 { // a return address: look up the call instruction
			lookup--
		}
		var next Regs
		var method Method
		switch mode {
		case ModeFPOnly:
			// No validation: the baseline walks the FP chain as FP-only
			// profilers do; the loop stops at a pc outside the mappings.
			next, ok = UnwindFP(cur, s.Read)
			method = MethodFP
		case ModeDWARFOnly:
			next, ok = unwindDWARF(s, cur, lookup)
			method = MethodDWARF
			if !ok {
				st.DWARFFailed++
			}
		default:
			key := MarkerKey{BuildID: m.BuildID, Off: lookup - m.Bias}
			mk := Unmarked
			if markers != nil {
				mk = markers.Get(key)
			}
			switch mk {
			case MarkFP:
				next, ok = UnwindFP(cur, s.Read)
				method = MethodFP
			case MarkDWARF:
				next, ok = unwindDWARF(s, cur, lookup)
				method = MethodDWARF
				if !ok {
					st.DWARFFailed++
				}
			default:
				next, ok = UnwindFP(cur, s.Read)
				valid := ok && ValidateCallerPC(s, next, cur.SP)
				if mode == ModeHybrid && m.Rows != nil {
					if r, found := Lookup(m.Rows, lookup-m.Bias); found && r.CFAReg != RegUndefined {
						valid = ok && FrameRow(r)
					}
				}
				if valid {
					method = MethodFP
					if markers != nil {
						markers.SetIfUnmarked(key, MarkFP)
					}
				} else {
					st.FPRejected++
					next, ok = unwindDWARF(s, cur, lookup)
					method = MethodDWARF
					if !ok {
						st.DWARFFailed++
					}
					if markers != nil {
						markers.SetIfUnmarked(key, MarkDWARF)
					}
				}
			}
		}
		if !ok || next.SP <= cur.SP || next.PC == 0 {
			break
		}
		if method == MethodFP {
			st.FP++
		} else {
			st.DWARF++
		}
		frames = append(frames, Frame{PC: next.PC, Method: method})
		cur = next
	}
	if len(frames) >= maxDepth {
		st.Truncated = true
	}
	return frames, st
}
