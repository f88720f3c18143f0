package cpuprof

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// TestPythonOffsets checks every CPython 3.11 offset the BPF walker and
// the namer use against a live /usr/bin/python3: in CPython id() is the
// object's address, so the script prints the code objects' addresses and
// the test must reach them from _PyRuntime through the thread state and
// the interpreter-frame chain. Needs only /proc/pid/mem of a child.
func TestPythonOffsets(t *testing.T) {
	needPython311(t)
	cmd := exec.Command(python3, "testdata/offsets.py")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var info struct {
		TID   uint64   `json:"tid"`
		Codes []uint64 `json:"codes"`
		Names []string `json:"names"`
		Files []string `json:"files"`
		Lines []int32  `json:"lines"`
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(line, &info); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	pid := cmd.Process.Pid

	maps, err := procmaps.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	var runtime uint64
	var pf *pyFile
	for _, m := range maps {
		if !m.Exec() || !m.File() {
			continue
		}
		ef, fh, err := openMapped(pid, m)
		if err != nil {
			continue
		}
		if p := detectPython(ef); p != nil {
			v, err := elfinfo.Normalize(ef, m, m.Start)
			if err != nil {
				t.Fatal(err)
			}
			pf, runtime = p, p.runtime+(m.Start-v)
		}
		fh.Close()
		if pf != nil {
			break
		}
	}
	if pf == nil {
		t.Fatal("no mapping of the python process exports _PyRuntime with Py_Version 3.11")
	}
	mem, err := openMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.close()
	u64 := func(addr uint64) uint64 {
		b, err := mem.read(addr, 8)
		if err != nil {
			t.Fatalf("reading %#x: %v", addr, err)
		}
		return binary.LittleEndian.Uint64(b)
	}
	o := py311
	interp := u64(runtime + uint64(o.rtInterpHead))
	if interp == 0 {
		t.Fatal("_PyRuntime.interpreters.head is null")
	}
	ts := u64(interp + uint64(o.interpThreadsHead))
	found := false
	for i := 0; i < 64 && ts != 0; i++ {
		if u64(ts+uint64(o.tsNativeTID)) == info.TID {
			found = true
			break
		}
		ts = u64(ts + uint64(o.tsNext))
	}
	if !found {
		t.Fatalf("no PyThreadState with native_thread_id %d (offsets runtime %d, threads %d, next %d, tid %d wrong?)",
			info.TID, o.rtInterpHead, o.interpThreadsHead, o.tsNext, o.tsNativeTID)
	}
	frame := u64(u64(ts+uint64(o.tsCframe)) + uint64(o.cframeCurrent))
	for i, want := range info.Codes {
		if frame == 0 {
			t.Fatalf("frame chain ends after %d frames", i)
		}
		code := u64(frame + uint64(o.frameCode))
		if code != want {
			t.Fatalf("frame %d: f_code %#x, want id %#x (frame offsets wrong?)", i, code, want)
		}
		b, err := mem.read(frame+uint64(o.frameIsEntry), 1)
		if err != nil {
			t.Fatal(err)
		}
		// Python-to-Python calls run in the same C eval call in 3.11:
		// only the outermost (<module>) frame is an entry frame.
		if wantEntry := i == len(info.Codes)-1; (b[0] == 1) != wantEntry {
			t.Errorf("frame %d (%s): is_entry %d", i, info.Names[i], b[0])
		}
		n, err := readCode(mem, code)
		if err != nil {
			t.Fatal(err)
		}
		if n.fn != info.Names[i] || n.file != info.Files[i] || n.line != info.Lines[i] {
			t.Errorf("frame %d: read %+v, want %s %s:%d", i, n, info.Names[i], info.Files[i], info.Lines[i])
		}
		frame = u64(frame + uint64(o.framePrevious))
	}
}
