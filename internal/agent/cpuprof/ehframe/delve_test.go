package ehframe

import (
	"encoding/binary"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// TestAgainstDelve checks the linear row interpreter against Delve's
// per-pc EstablishFrame at the first and last pc of every row.
func TestAgainstDelve(t *testing.T) {
	for _, path := range []string{libc, "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		f := openELF(t, path)
		s := f.Section(".eh_frame")
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		fdes, err := frame.Parse(data, binary.LittleEndian, 0, 8, s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		fdes = frame.FrameDescriptionEntries(nil).Append(fdes) // sorts
		rows, err := Compile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked, mism := 0, 0
		for i, r := range rows {
			if r.CFAReg != RegRSP && r.CFAReg != RegRBP {
				continue
			}
			for _, pc := range []uint64{r.PC, rows[i+1].PC - 1} {
				fde, err := fdes.FDEForPC(pc)
				if err != nil {
					t.Fatalf("%s: row %+v: delve has no FDE: %v", path, r, err)
				}
				fc, err := fde.EstablishFrame(pc)
				if err != nil {
					t.Fatalf("%s: pc %#x: delve: %v", path, pc, err)
				}
				checked++
				wantReg := map[uint8]uint64{RegRSP: 7, RegRBP: 6}[r.CFAReg]
				ok := fc.CFA.Rule == frame.RuleCFA && fc.CFA.Reg == wantReg && fc.CFA.Offset == int64(r.CFAOff)
				if ra := fc.Regs[16]; ra.Rule != frame.RuleOffset || ra.Offset != -8 {
					ok = false
				}
				bp, has := fc.Regs[6]
				if r.RBPOff != 0 {
					ok = ok && has && bp.Rule == frame.RuleOffset && bp.Offset == int64(r.RBPOff)
				} else if has && bp.Rule == frame.RuleOffset {
					ok = false
				}
				if !ok {
					mism++
					if mism < 5 {
						t.Errorf("%s pc %#x: row %+v, delve cfa %+v rbp %+v ra %+v", path, pc, r, fc.CFA, fc.Regs[6], fc.Regs[16])
					}
				}
			}
		}
		t.Logf("%s: %d pcs checked, %d mismatches", path, checked, mism)
	}
}
