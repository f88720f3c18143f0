package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"testing"
)

// FuzzOpenIndex: any bytes either fail OpenIndex with an error or give an
// Index whose lookups and Verify return without panicking.
func FuzzOpenIndex(f *testing.F) {
	f.Add(encode(f, "ab", nil))
	f.Add(encode(f, "abcdef", synthetic(3, 1)))
	f.Add(encode(f, "0102030405060708090a0b0c0d0e0f1011121314", synthetic(2*fenceStride+3, 2)))
	good := encode(f, "ab", synthetic(40, 3))
	f.Add(good[:headerSize])
	f.Add(good[:len(good)-5])
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := OpenIndex(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		probes := []uint64{0, 0x1000, 0x1001, 0x2000, ^uint64(0)}
		for i := 0; i+8 <= len(data) && i < 512; i += 8 {
			probes = append(probes, binary.LittleEndian.Uint64(data[i:]))
		}
		for _, a := range probes {
			s, ok, err := ix.Find(a)
			if ok && (err != nil || a < s.Start || a-s.Start >= s.Size || len(s.Name) > MaxName) {
				t.Fatalf("Find(%#x) = %+v %v %v", a, s, ok, err)
			}
		}
		if ix.Verify() == nil {
			// A file that verifies must answer like its own entries say.
			for _, a := range probes {
				if _, _, err := ix.Find(a); err != nil {
					t.Fatalf("verified file: Find(%#x): %v", a, err)
				}
			}
		}
	})
}

// FuzzBuildIndex: corrupt ELF bytes never panic the builder (uploads come
// from every node in the fleet).
func FuzzBuildIndex(f *testing.F) {
	for _, p := range []string{"/bin/true", "/usr/lib/x86_64-linux-gnu/libm.so.6"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
			break
		}
	}
	f.Add(minimalELF())
	if _, err := exec.LookPath("gcc"); err == nil {
		// A binary with .symtab and DWARF, so mutations reach those parsers.
		l := buildSparseLib(f)
		if b, err := os.ReadFile(l.full); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := Build(&buf, ef); err != nil {
			return
		}
		ix, err := OpenIndex(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatalf("Build wrote a file OpenIndex rejects: %v", err)
		}
		if err := ix.Verify(); err != nil {
			t.Fatalf("Build wrote a file Verify rejects: %v", err)
		}
	})
}

// minimalELF is a 64-bit little-endian ELF header with no sections.
func minimalELF() []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], 1)
	le.PutUint16(b[52:], 64) // ehsize
	le.PutUint16(b[58:], 64) // shentsize
	return b
}
