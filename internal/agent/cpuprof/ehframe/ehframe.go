// Package ehframe compiles an x86-64 ELF's call-frame information
// (.eh_frame, else .debug_frame) into the flat, sorted unwind table the
// BPF unwinder binary-searches (SysOM-AI §4 "DWARF pre-processing":
// Phase 1 in user space, Phase 2 one lookup and one load per frame in
// BPF), and holds the Go reference unwinder: the slow-path twin of the
// BPF step, the user-space fallback, and the evaluation's capture path
// (§5.2).
//
// CIE/FDE parsing (augmentations, pointer encodings, LSDA skipping) is
// Delve's maintained pkg/dwarf/frame. Its CFA interpreter only answers
// "the state at one pc" (EstablishFrame re-runs the FDE program from the
// start per pc, allocates a register map per call and does not expose
// where rows begin), so enumerating every row would be quadratic per FDE;
// the row interpreter below is a single linear pass instead. Tests check
// it against Delve's EstablishFrame at sampled pcs of real libraries.
package ehframe

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// CFA base registers of a Row (contracts §1b; the BPF side mirrors them).
const (
	RegRSP       = 0 // CFA = RSP + CFAOff
	RegRBP       = 1 // CFA = RBP + CFAOff
	RegUndefined = 2 // no caller: outermost frame, or a pc no FDE covers
	RegComplex   = 3 // a DWARF expression or an unusual rule: user-space fallback
)

// Row flags.
const (
	// FlagFuncStart marks the first row of an FDE (a function entry).
	FlagFuncStart = 1 << 0
	// FlagNoCFI marks a RegUndefined row that no FDE covers (a gap
	// between FDEs, or past the last one: hand-written asm, JIT stubs),
	// as opposed to an outermost frame whose CFI says "no caller". The
	// unwinder takes a validated FP step there instead of ending the
	// stack (§3.3 Algorithm 1: FP is the fallback where DWARF is absent).
	FlagNoCFI = 1 << 1
)

// Row is one unwind rule holding from PC until the next row's PC.
// The BPF twin is struct unwind_row { u64 pc; s32 cfa_off; s16 rbp_off;
// u8 cfa_reg; u8 flags; } (16 bytes, little-endian).
type Row struct {
	PC     uint64 // ELF virtual address
	CFAReg uint8  // RegRSP, RegRBP, RegUndefined, RegComplex
	CFAOff int32
	// RBPOff: the caller's RBP is saved at CFA+RBPOff; 0 = RBP unchanged.
	// Always fits int16 (else the row is RegComplex).
	RBPOff int32
	Flags  uint8
}

// RowSize is the encoded size of a Row (AppendBinary).
const RowSize = 16

// AppendBinary appends the 16-byte little-endian BPF layout of r.
func (r Row) AppendBinary(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.PC)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.CFAOff))
	b = binary.LittleEndian.AppendUint16(b, uint16(int16(r.RBPOff)))
	return append(b, r.CFAReg, r.Flags)
}

// DWARF register numbers on x86-64 (System V psABI, Figure 3.36).
const (
	dwRBP = 6
	dwRSP = 7
	dwRA  = 16
)

// ErrNoCFI: the file has neither .eh_frame nor .debug_frame.
var ErrNoCFI = errors.New("ehframe: no .eh_frame or .debug_frame section")

// Stats describes one compilation.
type Stats struct {
	FDEs        int // FDEs compiled
	Skipped     int // FDEs dropped: empty, overlapping a previous one, or undecodable
	Rows        int
	ComplexRows int
}

// Compile returns f's unwind rows sorted by PC (strictly increasing);
// gaps between FDEs and the end of the last one are RegUndefined rows.
func Compile(f *elf.File) ([]Row, error) {
	rows, _, err := CompileStats(f)
	return rows, err
}

// CompileStats is Compile that also reports counts.
func CompileStats(f *elf.File) (rows []Row, st Stats, err error) {
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, st, fmt.Errorf("ehframe: %v/%v: only x86-64 is supported", f.Machine, f.Class)
	}
	var data []byte
	var ehAddr uint64
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		if s.Addr == 0 {
			return nil, st, errors.New("ehframe: .eh_frame has no load address (relocatable object?)")
		}
		if data, err = s.Data(); err != nil {
			return nil, st, fmt.Errorf("ehframe: reading .eh_frame: %w", err)
		}
		ehAddr = s.Addr
	} else if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		if data, err = s.Data(); err != nil {
			return nil, st, fmt.Errorf("ehframe: reading .debug_frame: %w", err)
		}
	} else {
		return nil, st, ErrNoCFI
	}
	return compileSection(data, ehAddr)
}

// compileSection parses a .eh_frame (ehAddr ≠ 0: its load address) or a
// .debug_frame (ehAddr = 0) section and compiles its rows.
func compileSection(data []byte, ehAddr uint64) (rows []Row, st Stats, err error) {
	fdes, err := parseFDEs(data, ehAddr)
	if err != nil {
		return nil, st, err
	}
	sort.SliceStable(fdes, func(i, j int) bool { return fdes[i].Begin() < fdes[j].Begin() })
	// GCC output averages 6–8 rows per FDE (libc 7.6, libtorch_cpu 6.6):
	// sizing up front avoids repeated growth copies of a 1 M-row table.
	rows = make([]Row, 0, len(fdes)*8+2)
	var prevEnd uint64
	var c compiler
	for _, fde := range fdes {
		b, e := fde.Begin(), fde.End()
		if e <= b || b < prevEnd || fde.CIE == nil {
			st.Skipped++
			continue
		}
		if len(rows) > 0 && b > prevEnd {
			rows = append(rows, Row{PC: prevEnd, CFAReg: RegUndefined, Flags: FlagNoCFI})
		}
		n := len(rows)
		rows = c.compileFDE(rows, fde)
		if len(rows) == n { // nothing emitted: cannot happen for b < e, keep the invariant explicit
			st.Skipped++
			continue
		}
		st.FDEs++
		prevEnd = e
	}
	if len(rows) > 0 {
		rows = append(rows, Row{PC: prevEnd, CFAReg: RegUndefined, Flags: FlagNoCFI})
	}
	for _, r := range rows {
		if r.CFAReg == RegComplex {
			st.ComplexRows++
		}
	}
	st.Rows = len(rows)
	if cap(rows) > 2*len(rows)+64 {
		rows = append([]Row(nil), rows...)
	}
	return rows, st, nil
}

// parseFDEs runs Delve's parser, converting a panic on malformed input
// (its reader helpers panic on some truncations) into an error: section
// bytes come from arbitrary files on the node.
func parseFDEs(data []byte, ehAddr uint64) (fdes frame.FrameDescriptionEntries, err error) {
	defer func() {
		if p := recover(); p != nil {
			fdes, err = nil, fmt.Errorf("ehframe: malformed CFI: %v", p)
		}
	}()
	fdes, err = frame.Parse(data, binary.LittleEndian, 0, 8, ehAddr)
	if err != nil {
		return nil, fmt.Errorf("ehframe: %w", err)
	}
	return fdes, nil
}

// rule kinds for the registers the table tracks (RBP and the return address).
const (
	ruleSame   = iota // unchanged / undefined-at-entry: not saved by this frame
	ruleOffset        // saved at CFA + off
	ruleOther         // register, expression, val_*: not representable
	ruleUndef         // DW_CFA_undefined: no value (RA undefined = outermost frame)
)

type regRule struct {
	kind uint8
	off  int64
}

type state struct {
	cfaReg  uint64
	cfaOff  int64
	cfaExpr bool
	rbp, ra regRule
}

// maxStateDepth bounds remember_state nesting (GCC emits depth ≤ 2).
const maxStateDepth = 32

type compiler struct {
	stack []state
}

func (s *state) row(pc uint64) Row {
	r := Row{PC: pc}
	switch {
	case s.ra.kind == ruleUndef:
		r.CFAReg = RegUndefined
		return r
	case s.cfaExpr, s.ra.kind != ruleOffset, s.ra.off != -8, s.rbp.kind == ruleOther, s.rbp.kind == ruleUndef:
		r.CFAReg = RegComplex
		return r
	case s.cfaReg == dwRSP:
		r.CFAReg = RegRSP
	case s.cfaReg == dwRBP:
		r.CFAReg = RegRBP
	default: // e.g. r10 during stack realignment in main
		r.CFAReg = RegComplex
		return r
	}
	if s.cfaOff < -1<<31 || s.cfaOff >= 1<<31 {
		return Row{PC: pc, CFAReg: RegComplex}
	}
	r.CFAOff = int32(s.cfaOff)
	if s.rbp.kind == ruleOffset {
		if s.rbp.off == 0 || s.rbp.off < -1<<15 || s.rbp.off >= 1<<15 {
			return Row{PC: pc, CFAReg: RegComplex}
		}
		r.RBPOff = int32(s.rbp.off)
	}
	return r
}

func sameRule(a, b Row) bool {
	return a.CFAReg == b.CFAReg && a.CFAOff == b.CFAOff && a.RBPOff == b.RBPOff
}

// compileFDE appends the rows of one FDE: the CIE's initial instructions
// then the FDE's, emitting a row whenever the location advances past a
// state change. An instruction it cannot decode turns the rest of the FDE
// into one RegComplex row (the user-space fallback decides).
func (c *compiler) compileFDE(rows []Row, fde *frame.FrameDescriptionEntry) []Row {
	cie := fde.CIE
	begin, end := fde.Begin(), fde.End()
	var st state
	st.rbp.kind, st.ra.kind = ruleSame, ruleSame
	c.stack = c.stack[:0]
	ip := interp{caf: cie.CodeAlignmentFactor, daf: cie.DataAlignmentFactor, raReg: cie.ReturnAddressRegister}
	if ok := ip.run(&st, nil, cie.InitialInstructions, 0, nil, c); !ok {
		return append(rows, Row{PC: begin, CFAReg: RegComplex, Flags: FlagFuncStart})
	}
	initial := st
	first := len(rows)
	emit := func(pc uint64, s *state) {
		if pc >= end {
			return
		}
		r := s.row(pc)
		if len(rows) > first {
			last := &rows[len(rows)-1]
			if last.PC == pc { // advance by 0, or a later change at the same pc wins
				*last = Row{PC: pc, CFAReg: r.CFAReg, CFAOff: r.CFAOff, RBPOff: r.RBPOff, Flags: last.Flags}
				if len(rows) > first+1 && sameRule(rows[len(rows)-2], *last) && last.Flags == 0 {
					rows = rows[:len(rows)-1]
				}
				return
			}
			if sameRule(*last, r) {
				return
			}
		} else {
			r.Flags = FlagFuncStart
		}
		rows = append(rows, r)
	}
	loc := begin
	if ok := ip.run(&st, &initial, fde.Instructions, loc, func(newLoc uint64) bool {
		emit(loc, &st)
		loc = newLoc
		return loc < end
	}, c); !ok {
		emit(loc, &st)
		if loc < end {
			if rows[len(rows)-1].PC == loc {
				rows[len(rows)-1] = Row{PC: loc, CFAReg: RegComplex, Flags: rows[len(rows)-1].Flags}
			} else {
				rows = append(rows, Row{PC: loc, CFAReg: RegComplex})
			}
		}
		return rows
	}
	emit(loc, &st)
	return rows
}

// interp executes DWARF call-frame instructions (DWARF 5 §6.4.2) for the
// registers the table needs, skipping the operands of the others.
type interp struct {
	caf   uint64
	daf   int64
	raReg uint64
}

// run executes ins on st. advance is called with each new location (nil
// for CIE initial instructions); it returns false to stop early. run
// returns false on an instruction it cannot decode.
func (ip *interp) run(st *state, initial *state, ins []byte, loc uint64, advance func(uint64) bool, c *compiler) bool {
	r := reader{b: ins}
	setRule := func(reg uint64, rr regRule) {
		switch reg {
		case dwRBP:
			st.rbp = rr
		case ip.raReg:
			st.ra = rr
		}
	}
	restore := func(reg uint64) {
		if initial == nil {
			setRule(reg, regRule{kind: ruleSame})
			return
		}
		switch reg {
		case dwRBP:
			st.rbp = initial.rbp
		case ip.raReg:
			st.ra = initial.ra
		}
	}
	adv := func(delta uint64) bool {
		if advance == nil {
			return true // advance in CIE initial instructions: ignored
		}
		loc += delta * ip.caf
		return advance(loc)
	}
	for !r.done() {
		op := r.u8()
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			if !adv(uint64(op & 0x3f)) {
				return true
			}
			continue
		case 2: // DW_CFA_offset
			off := r.uleb()
			setRule(uint64(op&0x3f), regRule{kind: ruleOffset, off: int64(off) * ip.daf})
			continue
		case 3: // DW_CFA_restore
			restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case 0x00: // nop
		case 0x02: // advance_loc1
			if !adv(uint64(r.u8())) {
				return true
			}
		case 0x03: // advance_loc2
			if !adv(uint64(r.u16())) {
				return true
			}
		case 0x04: // advance_loc4
			if !adv(uint64(r.u32())) {
				return true
			}
		case 0x05: // offset_extended
			reg, off := r.uleb(), r.uleb()
			setRule(reg, regRule{kind: ruleOffset, off: int64(off) * ip.daf})
		case 0x11: // offset_extended_sf
			reg, off := r.uleb(), r.sleb()
			setRule(reg, regRule{kind: ruleOffset, off: off * ip.daf})
		case 0x2f: // GNU_negative_offset_extended
			reg, off := r.uleb(), r.uleb()
			setRule(reg, regRule{kind: ruleOffset, off: -int64(off) * ip.daf})
		case 0x06: // restore_extended
			restore(r.uleb())
		case 0x07: // undefined
			setRule(r.uleb(), regRule{kind: ruleUndef})
		case 0x08: // same_value
			setRule(r.uleb(), regRule{kind: ruleSame})
		case 0x09: // register
			reg, _ := r.uleb(), r.uleb()
			setRule(reg, regRule{kind: ruleOther})
		case 0x0a: // remember_state
			if len(c.stack) >= maxStateDepth {
				return false
			}
			c.stack = append(c.stack, *st)
		case 0x0b: // restore_state
			if len(c.stack) == 0 {
				return false
			}
			*st = c.stack[len(c.stack)-1]
			c.stack = c.stack[:len(c.stack)-1]
		case 0x0c: // def_cfa
			st.cfaReg, st.cfaOff, st.cfaExpr = r.uleb(), int64(r.uleb()), false
		case 0x12: // def_cfa_sf
			st.cfaReg, st.cfaOff, st.cfaExpr = r.uleb(), r.sleb()*ip.daf, false
		case 0x0d: // def_cfa_register
			st.cfaReg = r.uleb()
		case 0x0e: // def_cfa_offset
			st.cfaOff = int64(r.uleb())
		case 0x13: // def_cfa_offset_sf
			st.cfaOff = r.sleb() * ip.daf
		case 0x0f: // def_cfa_expression
			r.block()
			st.cfaExpr = true
		case 0x10, 0x16: // expression, val_expression
			reg := r.uleb()
			r.block()
			setRule(reg, regRule{kind: ruleOther})
		case 0x14: // val_offset
			reg, _ := r.uleb(), r.uleb()
			setRule(reg, regRule{kind: ruleOther})
		case 0x15: // val_offset_sf
			reg, _ := r.uleb(), r.sleb()
			setRule(reg, regRule{kind: ruleOther})
		case 0x2e: // GNU_args_size: only matters for exception landing pads
			r.uleb()
		default: // set_loc (encoding lives in the CIE augmentation) and vendor ops
			return false
		}
		if r.bad {
			return false
		}
	}
	return !r.bad
}

// reader decodes instruction operands; running past the end sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) done() bool { return len(r.b) == 0 || r.bad }

func (r *reader) u8() byte {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if len(r.b) < 2 {
		r.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if len(r.b) == 0 || shift > 63 {
			r.bad = true
			return 0
		}
		c := r.b[0]
		r.b = r.b[1:]
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		if len(r.b) == 0 || shift > 63 {
			r.bad = true
			return 0
		}
		c := r.b[0]
		r.b = r.b[1:]
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) block() {
	n := r.uleb()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return
	}
	r.b = r.b[n:]
}

// Lookup returns the row holding at pc (binary search) and whether one
// does (pc below the first row: no).
func Lookup(rows []Row, pc uint64) (Row, bool) {
	i := sort.Search(len(rows), func(i int) bool { return rows[i].PC > pc })
	if i == 0 {
		return Row{}, false
	}
	return rows[i-1], true
}

// Unwind is the reference DWARF step (the BPF unwinder's slow-path twin):
// pc is the ELF virtual address to look up (the leaf's pc, or a caller's
// return address − 1 so the lookup lands in the call instruction); sp, bp
// are the frame's registers; read loads 8 bytes of the target's memory.
// It returns the caller's return address (raw, not −1), the CFA (the
// caller's SP) and the caller's RBP. ok=false: no row, end of stack, a
// complex row, or an unreadable slot.
func Unwind(rows []Row, pc, sp, bp uint64, read func(addr uint64) (uint64, bool)) (ra, cfa, newBP uint64, ok bool) {
	r, found := Lookup(rows, pc)
	if !found {
		return 0, 0, 0, false
	}
	switch r.CFAReg {
	case RegRSP:
		cfa = sp + uint64(int64(r.CFAOff))
	case RegRBP:
		cfa = bp + uint64(int64(r.CFAOff))
	default:
		return 0, 0, 0, false
	}
	if ra, ok = read(cfa - 8); !ok {
		return 0, 0, 0, false
	}
	newBP = bp
	if r.RBPOff != 0 {
		if newBP, ok = read(cfa + uint64(int64(r.RBPOff))); !ok {
			return 0, 0, 0, false
		}
	}
	return ra, cfa, newBP, true
}
