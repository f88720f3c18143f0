package ehframe

import (
	"debug/elf"
	"encoding/binary"
	"reflect"
	"testing"
)

// ehAddr is where the synthetic .eh_frame pretends to be loaded.
const ehAddr = 0x2000

// cieX86 is GCC's x86-64 CIE: "zR", code align 1, data align −8, RA
// register 16, FDE pointers pcrel|sdata4; def_cfa rsp+8; offset r16 at cfa−8.
func cieX86() []byte {
	body := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1}
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// section builds .eh_frame bytes: the CIE then one FDE per (begin, size, ins).
func section(fdes ...struct {
	begin, size uint64
	ins         []byte
}) []byte {
	b := cieX86()
	for _, f := range fdes {
		start := len(b)
		body := binary.LittleEndian.AppendUint32(nil, uint32(start+4)) // CIE pointer: back to offset 0
		pcField := uint64(ehAddr + start + 8)
		body = binary.LittleEndian.AppendUint32(body, uint32(int32(int64(f.begin)-int64(pcField))))
		body = binary.LittleEndian.AppendUint32(body, uint32(f.size))
		body = append(body, 0) // augmentation data length
		body = append(body, f.ins...)
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
		b = append(b, binary.LittleEndian.AppendUint32(nil, uint32(len(body)))...)
		b = append(b, body...)
	}
	return append(b, 0, 0, 0, 0)
}

type fdeSpec = struct {
	begin, size uint64
	ins         []byte
}

func TestInterpreter(t *testing.T) {
	const fs = FlagFuncStart
	und := func(pc uint64) Row { return Row{PC: pc, CFAReg: RegUndefined, Flags: FlagNoCFI} }
	for _, tc := range []struct {
		name string
		fdes []fdeSpec
		want []Row
	}{
		{"leaf", []fdeSpec{{0x1000, 0x10, nil}},
			[]Row{{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs}, und(0x1010)}},
		{"push rbp; mov rbp,rsp", []fdeSpec{{0x1000, 0x40, []byte{
			0x41, 0x0e, 16, 0x86, 2, // advance 1; def_cfa_offset 16; rbp at cfa-16
			0x43, 0x0d, 6, // advance 3; def_cfa_register rbp
			0x40 | 0x3a, 0x0c, 7, 8, // advance 0x3a; def_cfa rsp+8
		}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1001, CFAReg: RegRSP, CFAOff: 16, RBPOff: -16},
			{PC: 0x1004, CFAReg: RegRBP, CFAOff: 16, RBPOff: -16},
			{PC: 0x103e, CFAReg: RegRSP, CFAOff: 8, RBPOff: -16},
			und(0x1040)}},
		{"remember/restore + restore rbp", []fdeSpec{{0x1000, 0x30, []byte{
			0x41, 0x0e, 16, 0x86, 2,
			0x0a,                // remember
			0x42, 0x0e, 8, 0xc6, // advance 2; cfa rsp+8; restore rbp
			0x42, 0x0b, // advance 2; restore_state
		}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1001, CFAReg: RegRSP, CFAOff: 16, RBPOff: -16},
			{PC: 0x1003, CFAReg: RegRSP, CFAOff: 8},
			{PC: 0x1005, CFAReg: RegRSP, CFAOff: 16, RBPOff: -16},
			und(0x1030)}},
		{"expression CFA (PLT) is complex", []fdeSpec{{0x1000, 0x20, []byte{
			0x46, 0x0f, 2, 0x77, 8, // advance 6; def_cfa_expression {breg7 +8}
		}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1006, CFAReg: RegComplex},
			und(0x1020)}},
		{"CFA in r10 is complex", []fdeSpec{{0x1000, 0x20, []byte{0x44, 0x0c, 10, 0}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1004, CFAReg: RegComplex},
			und(0x1020)}},
		{"RA undefined ends the stack", []fdeSpec{{0x1000, 0x20, []byte{0x07, 16}}}, []Row{
			{PC: 0x1000, CFAReg: RegUndefined, Flags: fs},
			und(0x1020)}},
		{"gap and unsorted FDEs", []fdeSpec{{0x3000, 0x10, nil}, {0x1000, 0x10, nil}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs}, und(0x1010),
			{PC: 0x3000, CFAReg: RegRSP, CFAOff: 8, Flags: fs}, und(0x3010)}},
		{"adjacent FDEs keep both starts", []fdeSpec{{0x1000, 0x10, nil}, {0x1010, 0x10, nil}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1010, CFAReg: RegRSP, CFAOff: 8, Flags: fs}, und(0x1020)}},
		{"overlapping FDE dropped", []fdeSpec{{0x1000, 0x20, nil}, {0x1010, 0x20, nil}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs}, und(0x1020)}},
		{"advance past the end is clipped", []fdeSpec{{0x1000, 0x8, []byte{0x41, 0x0e, 16, 0x50, 0x0e, 24}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1001, CFAReg: RegRSP, CFAOff: 16}, und(0x1008)}},
		{"unknown opcode: rest complex", []fdeSpec{{0x1000, 0x20, []byte{0x41, 0x0e, 16, 0x42, 0x3f}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1001, CFAReg: RegRSP, CFAOff: 16},
			{PC: 0x1003, CFAReg: RegComplex}, und(0x1020)}},
		{"rbp saved beyond int16 is complex", []fdeSpec{{0x1000, 0x20, []byte{0x41, 0x0e, 16, 0x05, 6, 0x80, 0x80, 0x04}}}, []Row{
			{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8, Flags: fs},
			{PC: 0x1001, CFAReg: RegComplex}, und(0x1020)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, _, err := compileSection(section(tc.fdes...), ehAddr)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rows, tc.want) {
				t.Fatalf("rows\n got %+v\nwant %+v", rows, tc.want)
			}
			checkRows(t, tc.name, rows)
		})
	}
}

func TestUnwindStep(t *testing.T) {
	rows := []Row{
		{PC: 0x1000, CFAReg: RegRSP, CFAOff: 8},
		{PC: 0x1001, CFAReg: RegRSP, CFAOff: 16, RBPOff: -16},
		{PC: 0x1004, CFAReg: RegRBP, CFAOff: 16, RBPOff: -16},
		{PC: 0x1040, CFAReg: RegComplex},
		{PC: 0x1050, CFAReg: RegUndefined},
	}
	mem := map[uint64]uint64{0x7f08: 0xaaaa, 0x7f00: 0x7f50, 0x7f10: 0xbbbb, 0x7f18: 0xcccc}
	read := func(a uint64) (uint64, bool) { v, ok := mem[a]; return v, ok }
	for _, tc := range []struct {
		name           string
		pc, sp, bp     uint64
		ra, cfa, newBP uint64
		ok             bool
	}{
		{"entry", 0x1000, 0x7f08, 0x1, 0xaaaa, 0x7f10, 0x1, true},
		{"after push", 0x1002, 0x7f00, 0x1, 0xaaaa, 0x7f10, 0x7f50, true},
		{"rbp frame", 0x1020, 0x7e00, 0x7f00, 0xaaaa, 0x7f10, 0x7f50, true},
		{"complex", 0x1040, 0x7f00, 0, 0, 0, 0, false},
		{"undefined", 0x1050, 0x7f00, 0, 0, 0, 0, false},
		{"below table", 0x10, 0x7f00, 0, 0, 0, 0, false},
		{"unreadable", 0x1000, 0x100, 0, 0, 0, 0, false},
	} {
		ra, cfa, bp, ok := Unwind(rows, tc.pc, tc.sp, tc.bp, read)
		if ok != tc.ok || ra != tc.ra || cfa != tc.cfa || bp != tc.newBP {
			t.Errorf("%s: got %#x %#x %#x %v", tc.name, ra, cfa, bp, ok)
		}
	}
}

func TestRowBinary(t *testing.T) {
	b := Row{PC: 0x1122334455667788, CFAOff: -2, RBPOff: -16, CFAReg: RegRBP, Flags: FlagFuncStart}.AppendBinary(nil)
	want := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xfe, 0xff, 0xff, 0xff, 0xf0, 0xff, 1, 1}
	if !reflect.DeepEqual(b, want) || len(b) != RowSize {
		t.Fatalf("%x", b)
	}
}

// FuzzCompileSection: malformed .eh_frame/.debug_frame bytes never
// panic and any accepted table keeps its invariants.
func FuzzCompileSection(f *testing.F) {
	f.Add(section(fdeSpec{0x1000, 0x40, []byte{0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6}}), true)
	f.Add(section(fdeSpec{0x1000, 0x20, []byte{0x0a, 0x0a, 0x0b, 0x0b, 0x0b}}), false)
	if ef, err := elf.Open("testdata/chain"); err == nil {
		if d, err := ef.Section(".eh_frame").Data(); err == nil {
			f.Add(d, true)
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte, eh bool) {
		addr := uint64(0)
		if eh {
			addr = ehAddr
		}
		rows, _, err := compileSection(data, addr)
		if err != nil {
			return
		}
		checkRows(t, "fuzz", rows)
	})
}
