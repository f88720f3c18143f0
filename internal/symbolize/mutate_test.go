package symbolize

import (
	"bytes"
	"debug/elf"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestBuildMutatedELF is a deterministic companion of FuzzBuildIndex:
// byte-flipped copies of a real library (with .symtab and DWARF) must
// build or fail promptly. It caught debug/dwarf returning null entries
// forever on a corrupt unit.
func TestBuildMutatedELF(t *testing.T) {
	l := buildSparseLib(t)
	seed, err := os.ReadFile(l.full)
	if err != nil {
		t.Fatal(err)
	}
	n := 1500
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		b := bytes.Clone(seed)
		for range 1 + rng.IntN(6) {
			pos := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b[pos] = byte(rng.Uint32())
			case 1:
				b[pos] = 0xff
			default:
				b[pos] ^= 0x80
			}
		}
		done := make(chan error, 1)
		go func() {
			ef, err := elf.NewFile(bytes.NewReader(b))
			if err != nil {
				done <- nil
				return
			}
			var out bytes.Buffer
			if _, err := Build(&out, ef); err != nil {
				done <- nil
				return
			}
			ix, err := OpenIndex(bytes.NewReader(out.Bytes()), int64(out.Len()))
			if err == nil {
				err = ix.Verify()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("mutation %d: Build wrote an invalid file: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("mutation %d: Build still running after 20 s:\n%s", i, buf[:runtime.Stack(buf, true)])
		}
	}
}
