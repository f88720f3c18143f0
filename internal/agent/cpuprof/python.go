package cpuprof

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// CPython 3.11 x86-64 layouts (Include/internal/pycore_runtime.h,
// pycore_interp.h, cpython/pystate.h, pycore_frame.h, cpython/code.h,
// cpython/unicodeobject.h at v3.11.x). TestPythonOffsets verifies each
// against a live /usr/bin/python3 (ids are addresses in CPython).
type pyOffsets struct {
	rtInterpHead      uint32 // _PyRuntimeState.interpreters.head
	interpThreadsHead uint32 // PyInterpreterState.threads.head
	tsNext            uint32 // PyThreadState.next
	tsNativeTID       uint32 // PyThreadState.native_thread_id
	tsCframe          uint32 // PyThreadState.cframe
	cframeCurrent     uint32 // _PyCFrame.current_frame
	frameCode         uint32 // _PyInterpreterFrame.f_code
	framePrevious     uint32 // _PyInterpreterFrame.previous
	frameIsEntry      uint32 // _PyInterpreterFrame.is_entry
	codeFirstLine     uint32 // PyCodeObject.co_firstlineno
	codeFilename      uint32 // PyCodeObject.co_filename
	codeName          uint32 // PyCodeObject.co_name
	codeQualname      uint32 // PyCodeObject.co_qualname
}

var py311 = pyOffsets{
	rtInterpHead:      40,
	interpThreadsHead: 16,
	tsNext:            8,
	tsNativeTID:       160,
	tsCframe:          56,
	cframeCurrent:     8,
	frameCode:         32,
	framePrevious:     48,
	frameIsEntry:      68,
	codeFirstLine:     72,
	codeFilename:      112,
	codeName:          120,
	codeQualname:      128,
}

// pyFile: a python3.11 executable or libpython3.11 with its runtime.
type pyFile struct {
	runtime        uint64 // ELF vaddr of _PyRuntime
	evalLo, evalHi uint64 // ELF vaddr range of _PyEval_EvalFrameDefault
	version        uint32 // Py_Version (0x030b02f0 for 3.11.2)
}

// pyProc: a process running such a file.
type pyProc struct {
	file    *fileInfo
	bias    uint64
	runtime uint64 // runtime address of _PyRuntime
	// The process's pid namespace when it is not the agent's: CPython's
	// native_thread_id is the namespace-local tid (containers).
	nsDev, nsIno uint64
}

func newPyProc(pid int, f *fileInfo, bias uint64) *pyProc {
	pp := &pyProc{file: f, bias: bias, runtime: f.py.runtime + bias}
	pp.nsDev, pp.nsIno = foreignPidNS(pid)
	return pp
}

// foreignPidNS returns the nsfs (dev, inode) of pid's pid namespace, or
// zeros when it is the agent's own (or unreadable: host tids are tried).
func foreignPidNS(pid int) (dev, ino uint64) {
	var self, st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &self) != nil || unix.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid), &st) != nil {
		return 0, 0
	}
	if st.Dev == self.Dev && st.Ino == self.Ino {
		return 0, 0
	}
	return st.Dev, st.Ino
}

func (pp *pyProc) bpfValue() *cpuprofPyproc {
	o := py311
	return &cpuprofPyproc{Runtime: pp.runtime, RtInterpHead: o.rtInterpHead, InterpThreadsHead: o.interpThreadsHead,
		TsNext: o.tsNext, TsNativeTid: o.tsNativeTID, TsCframe: o.tsCframe, CframeCurrent: o.cframeCurrent,
		FrameCode: o.frameCode, FramePrevious: o.framePrevious, FrameIsEntry: o.frameIsEntry,
		NsDev: pp.nsDev, NsIno: pp.nsIno}
}

// detectPython finds CPython 3.11's _PyRuntime and eval loop in f's
// dynamic (else static) symbols; nil when f is not CPython 3.11.
func detectPython(f *elf.File) *pyFile {
	syms, _ := f.DynamicSymbols()
	if s2, err := f.Symbols(); err == nil {
		syms = append(syms, s2...)
	}
	var pf pyFile
	var haveRT, haveEval, haveVer bool
	for _, s := range syms {
		switch s.Name {
		case "_PyRuntime":
			pf.runtime, haveRT = s.Value, true
		case "_PyEval_EvalFrameDefault":
			if s.Size > 0 {
				pf.evalLo, pf.evalHi, haveEval = s.Value, s.Value+s.Size, true
			}
		case "Py_Version":
			if b := readVaddr(f, s.Value, 4); b != nil {
				pf.version, haveVer = binary.LittleEndian.Uint32(b), true
			}
		}
	}
	if !haveRT || !haveEval || !haveVer || pf.version>>16 != 0x030b {
		return nil
	}
	return &pf
}

func readVaddr(f *elf.File, vaddr uint64, n int) []byte {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err == nil {
				return b
			}
		}
	}
	return nil
}

// pyName is a code object's identity for a frame.
type pyName struct {
	fn, file string
	line     int32
}

// procMem reads a process's memory through /proc/pid/mem.
type procMem struct{ f *os.File }

func openMem(pid int) (*procMem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	return &procMem{f}, nil
}

func (m *procMem) read(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := m.f.ReadAt(b, int64(addr)); err != nil {
		return nil, err
	}
	return b, nil
}

func (m *procMem) close() { m.f.Close() }

// readCode names a code object: co_qualname (else co_name), co_filename,
// co_firstlineno.
func readCode(m *procMem, code uint64) (pyName, error) {
	o := py311
	b, err := m.read(code, int(o.codeQualname)+8)
	if err != nil {
		return pyName{}, err
	}
	le := binary.LittleEndian
	var n pyName
	n.line = int32(le.Uint32(b[o.codeFirstLine:]))
	if n.line < 0 {
		n.line = 0
	}
	n.fn, err = readUnicode(m, le.Uint64(b[o.codeQualname:]))
	if err != nil || n.fn == "" {
		if n.fn, err = readUnicode(m, le.Uint64(b[o.codeName:])); err != nil {
			return pyName{}, fmt.Errorf("code %#x: name: %w", code, err)
		}
	}
	n.file, _ = readUnicode(m, le.Uint64(b[o.codeFilename:]))
	if n.fn == "" {
		return pyName{}, fmt.Errorf("code %#x: empty name", code)
	}
	return n, nil
}

// readUnicode decodes a compact str (3.11 PEP 393 layout: PyASCIIObject is
// 48 bytes, PyCompactUnicodeObject 72; state bits: interned 0-1, kind 2-4,
// compact 5, ascii 6).
func readUnicode(m *procMem, addr uint64) (string, error) {
	if addr == 0 {
		return "", fmt.Errorf("null str")
	}
	h, err := m.read(addr, 48)
	if err != nil {
		return "", err
	}
	le := binary.LittleEndian
	length := le.Uint64(h[16:])
	state := le.Uint32(h[32:])
	kind, compact, ascii := (state>>2)&7, state>>5&1 == 1, state>>6&1 == 1
	if !compact {
		return "", fmt.Errorf("str at %#x is not compact", addr)
	}
	if length > 1024 {
		length = 1024 // names longer than this are clipped
	}
	if ascii {
		b, err := m.read(addr+48, int(length))
		return string(b), err
	}
	if kind != 1 && kind != 2 && kind != 4 {
		return "", fmt.Errorf("str at %#x: kind %d", addr, kind)
	}
	b, err := m.read(addr+72, int(length)*int(kind))
	if err != nil {
		return "", err
	}
	var sb []byte
	for i := 0; i < int(length); i++ {
		var r rune
		switch kind {
		case 1:
			r = rune(b[i])
		case 2:
			r = rune(le.Uint16(b[2*i:]))
		case 4:
			r = rune(le.Uint32(b[4*i:]))
		}
		if utf16.IsSurrogate(r) || !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		sb = utf8.AppendRune(sb, r)
	}
	return string(sb), nil
}
