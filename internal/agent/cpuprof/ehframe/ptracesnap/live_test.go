//go:build linux && amd64

package ptracesnap

import (
	"bufio"
	"debug/elf"
	"errors"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof/ehframe"
	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// chainOf is the known call chain of testdata/chain.c by leaf function.
var chainOf = map[string][]string{
	"d":    {"d", "c", "b", "a", "main"},
	"c":    {"c", "b", "a", "main"},
	"b":    {"b", "a", "main"},
	"a":    {"a", "main"},
	"main": {"main"},
}

type symtab []elf.Symbol

func loadSyms(t *testing.T, path string) symtab {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out symtab
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// name: the symbol whose [Value, Value+Size) holds vaddr, or "".
func (s symtab) name(vaddr uint64) string {
	i := sort.Search(len(s), func(i int) bool { return s[i].Value > vaddr })
	if i > 0 && vaddr < s[i-1].Value+s[i-1].Size {
		return s[i-1].Name
	}
	return ""
}

func startChain(t *testing.T, bin string) *exec.Cmd {
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("%s: %q %v", bin, line, err)
	}
	return cmd
}

// TestLiveChain unwinds real stacks of the -O2 -fomit-frame-pointer chain
// program stopped at random points and scores each mode against the
// known chain (§5.2 on a small scale; eval/sysom/frames is the full run).
func TestLiveChain(t *testing.T) {
	for _, tc := range []struct{ bin string }{
		{"chain"},       // every function omits frame pointers
		{"chain-mixed"}, // a and c keep them
	} {
		t.Run(tc.bin, func(t *testing.T) {
			bin, _ := filepath.Abs(filepath.Join("..", "testdata", tc.bin))
			syms := loadSyms(t, bin)
			ef, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			cmd := startChain(t, bin)
			pid := cmd.Process.Pid
			tables := ehframe.NewTables()
			mem, err := Mem(pid)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			modes := []ehframe.Mode{ehframe.ModeFPOnly, ehframe.ModeHybridPaper, ehframe.ModeHybrid, ehframe.ModeDWARFOnly}
			correct := make([]int, len(modes))
			markers := make([]*ehframe.Markers, len(modes)) // one marker map per mode
			for i := range markers {
				markers[i] = ehframe.NewMarkers()
			}
			total := 0
			for i := 0; i < 40; i++ {
				time.Sleep(time.Duration(3+i%7) * time.Millisecond)
				regs, err := Stop(pid)
				if errors.Is(err, ErrNotPermitted) {
					t.Skipf("needs ptrace: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				maps, err := procmaps.Read(pid)
				if err != nil {
					t.Fatal(err)
				}
				space := tables.Space(maps, mem, "")
				mod, _ := space.Module(regs.PC)
				if m, ok := procmaps.Find(maps, regs.PC); ok {
					if v, err := elfinfo.Normalize(ef, m, regs.PC); err != nil || v != regs.PC-mod.Bias {
						t.Fatalf("Normalize(%#x) = %#x, %v; module bias gives %#x", regs.PC, v, err, regs.PC-mod.Bias)
					}
				}
				leaf := syms.name(regs.PC - mod.Bias)
				want, ok := chainOf[leaf]
				for mi, mode := range modes {
					frames, _ := ehframe.UnwindHybrid(space, regs, mode, markers[mi], 64)
					for k := range want {
						if k >= len(frames) {
							break
						}
						pc := frames[k].PC
						if k > 0 {
							pc--
						}
						m, ok := space.Module(pc)
						if ok && syms.name(pc-m.Bias) == want[k] && m == mod {
							correct[mi]++
						}
					}
				}
				if err := Resume(pid); err != nil {
					t.Fatal(err)
				}
				if ok {
					total += len(want)
				}
			}
			if total == 0 {
				t.Fatal("no sample landed in the chain")
			}
			acc := func(i int) float64 { return float64(correct[i]) / float64(total) }
			t.Logf("%s: %d expected frames; accuracy FP-only %.2f hybrid(§3.3 as stated) %.2f hybrid(CFI-checked markers) %.2f DWARF-only %.2f; markers %d",
				tc.bin, total, acc(0), acc(1), acc(2), acc(3), markers[2].Len())
			if acc(3) != 1 {
				t.Errorf("DWARF-only accuracy %.3f, want 1", acc(3))
			}
			if acc(2) != 1 {
				t.Errorf("hybrid accuracy %.3f, want 1", acc(2))
			}
			if acc(0) >= acc(2) {
				t.Errorf("FP-only %.3f not below hybrid %.3f on an -fomit-frame-pointer build", acc(0), acc(2))
			}
		})
	}
}
