package ehframe

import (
	"reflect"
	"testing"
)

// synthetic process: f1 (leaf, no frame pointer) ← f2 (keeps FP) ← f3 (no
// FP) ← f4 (returns to 0: end). At the leaf RBP still holds f2's frame, the
// case where §3.3's ValidateCallerPC accepts an FP step that skips f2.
func synthetic() (Space, Regs, []uint64) {
	exe := &Module{BuildID: "b1", Rows: []Row{
		{PC: 0x1000, CFAReg: RegRSP, CFAOff: 16, Flags: FlagFuncStart},
		{PC: 0x1100, CFAReg: RegRBP, CFAOff: 16, RBPOff: -16, Flags: FlagFuncStart},
		{PC: 0x1200, CFAReg: RegRSP, CFAOff: 32, Flags: FlagFuncStart},
		{PC: 0x1300, CFAReg: RegRSP, CFAOff: 8, Flags: FlagFuncStart},
		{PC: 0x1400, CFAReg: RegUndefined},
	}}
	mem := map[uint64]uint64{
		0x7008: 0x1150, // f1's return into f2
		0x7020: 0x5,    // f2's saved RBP (f3 uses RBP as a general register)
		0x7028: 0x1250, // f2's return into f3
		0x7048: 0x1350, // f3's return into f4
		0x7050: 0,      // f4's return address: none
	}
	s := Space{
		Read: func(a uint64) (uint64, bool) { v, ok := mem[a]; return v, ok },
		Module: func(pc uint64) (*Module, bool) {
			if pc >= 0x1000 && pc < 0x1400 {
				return exe, true
			}
			return nil, false
		},
	}
	return s, Regs{PC: 0x1010, SP: 0x7000, BP: 0x7020}, []uint64{0x1010, 0x1150, 0x1250, 0x1350}
}

func pcs(fs []Frame) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.PC)
	}
	return out
}

func TestUnwindHybridModes(t *testing.T) {
	s, leaf, truth := synthetic()
	for _, tc := range []struct {
		mode Mode
		want []uint64
	}{
		{ModeDWARFOnly, truth},
		{ModeHybrid, truth},
		{ModeHybridPaper, []uint64{0x1010, 0x1250, 0x1350}}, // skips f2, as measured on real stacks
		{ModeFPOnly, []uint64{0x1010, 0x1250}},              // then RBP = 5: no chain
	} {
		ms := NewMarkers()
		for round := 0; round < 2; round++ { // the second walk runs on cached markers
			fr, st := UnwindHybrid(s, leaf, tc.mode, ms, 64)
			if got := pcs(fr); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mode %d round %d: %#x want %#x (stats %+v)", tc.mode, round, got, tc.want, st)
			}
		}
	}
	ms := NewMarkers()
	UnwindHybrid(s, leaf, ModeHybrid, ms, 64)
	for _, c := range []struct {
		off  uint64
		want Marker
	}{{0x1010, MarkDWARF}, {0x1150 - 1, MarkFP}, {0x1250 - 1, MarkDWARF}} {
		if got := ms.Get(MarkerKey{"b1", c.off}); got != c.want {
			t.Errorf("marker at %#x = %d want %d", c.off, got, c.want)
		}
	}
	if fr, st := UnwindHybrid(s, leaf, ModeHybrid, ms, 2); len(fr) != 2 || !st.Truncated {
		t.Errorf("depth limit: %d frames, %+v", len(fr), st)
	}
}

func TestMarkersCAS(t *testing.T) {
	ms := NewMarkers()
	k := MarkerKey{"x", 1}
	if ms.SetIfUnmarked(k, MarkFP) != MarkFP || ms.SetIfUnmarked(k, MarkDWARF) != MarkFP || ms.Get(k) != MarkFP {
		t.Fatal("compare-and-swap from unmarked")
	}
}

func BenchmarkUnwindHybrid(b *testing.B) {
	s, leaf, _ := synthetic()
	ms := NewMarkers()
	for b.Loop() {
		UnwindHybrid(s, leaf, ModeHybrid, ms, 64)
	}
}
