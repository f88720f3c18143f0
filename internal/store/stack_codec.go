package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Value codecs of the stack and OS-stat keyspaces; the byte layouts are
// specified in docs/format/stack.md and docs/format/osstat.md. A record
// is one rank's stacks from one node's window: names are interned once
// per record (a hot function's name, a library's path and Build-ID are
// stored once however many samples hold them), native addresses are
// zig-zag deltas from the previous frame's (frames of one binary are
// close), and every optional frame field costs one header bit when
// absent. Pebble's block compression (Snappy) works on top of that.

const (
	stackVersion  = 1
	osstatVersion = 1

	stackFlagMeta = 1 << 0 // the record carries the batch's dropped count and unwind stats

	sampleForeign   = 1 << 0
	sampleTruncated = 1 << 1

	frameKindMask = 0x07
	frameAddr     = 1 << 3
	frameMapping  = 1 << 4
	frameFunc     = 1 << 5
	frameFile     = 1 << 6
	frameLine     = 1 << 7

	// maxRecordStrings bounds a decoded record's string table (a record
	// holds at most MaxSamples samples of MaxFrames frames, but a table
	// that large is corrupt long before).
	maxRecordStrings = 1 << 24
	// MaxStackSpanNS bounds a decoded window's length (records written
	// before MaxWindowNS existed may span up to a day).
	MaxStackSpanNS = int64(24 * 3600 * 1e9)
	// MaxWindowNS bounds a window written now: scans look back the
	// job's longest stored window for records overlapping their start,
	// so one long import would make every scan walk that far (agent
	// windows are 5 s; an imported profile is cut into ≤ 1 h windows).
	MaxWindowNS = signal.MaxWindowNS
)

// stackEnc is the reusable state of encoding one batch's records.
type stackEnc struct {
	strs    map[string]uint64
	order   []string
	maps    map[int32]uint64 // batch mapping index → record index
	mapList []int32
	body    []byte
}

func (e *stackEnc) str(s string) uint64 {
	if s == "" {
		return 0
	}
	if i, ok := e.strs[s]; ok {
		return i
	}
	e.order = append(e.order, s)
	i := uint64(len(e.order)) // 1-based: 0 is ""
	e.strs[s] = i
	return i
}

// appendStackRecord encodes the samples idx of b (one rank's) as a
// record value. meta puts the batch's dropped count and unwind stats on
// this record (one record per batch carries them).
func (e *stackEnc) appendStackRecord(dst []byte, b *stack.Batch, idx []int32, meta bool) []byte {
	if e.strs == nil {
		e.strs, e.maps = map[string]uint64{}, map[int32]uint64{}
	}
	clear(e.strs)
	clear(e.maps)
	e.order, e.mapList, e.body = e.order[:0], e.mapList[:0], e.body[:0]
	// The record's own mapping table: only the mappings its frames use.
	for _, i := range idx {
		for _, f := range b.Samples[i].Frames {
			if f.Mapping >= 0 && int(f.Mapping) < len(b.Mappings) {
				if _, ok := e.maps[f.Mapping]; !ok {
					e.maps[f.Mapping] = uint64(len(e.mapList))
					e.mapList = append(e.mapList, f.Mapping)
				}
			}
		}
	}
	for _, m := range e.mapList {
		e.str(b.Mappings[m].BuildID)
		e.str(b.Mappings[m].Path)
	}
	body := binary.AppendUvarint(e.body, uint64(len(idx)))
	for _, i := range idx {
		s := &b.Samples[i]
		var fl byte
		if s.Foreign {
			fl |= sampleForeign
		}
		if s.Truncated {
			fl |= sampleTruncated
		}
		body = append(body, fl)
		body = binary.AppendUvarint(body, uint64(s.PID))
		body = binary.AppendUvarint(body, uint64(s.TID))
		body = binary.AppendUvarint(body, e.str(s.Comm))
		body = binary.AppendUvarint(body, e.str(s.Thread))
		body = binary.AppendUvarint(body, uint64(s.Count))
		body = binary.AppendUvarint(body, uint64(len(s.Frames)))
		var prev uint64
		for j := range s.Frames {
			f := &s.Frames[j]
			h := byte(f.Kind) & frameKindMask
			mi, hasMap := e.maps[f.Mapping]
			hasMap = hasMap && f.Mapping >= 0
			if f.Addr != 0 {
				h |= frameAddr
			}
			if hasMap {
				h |= frameMapping
			}
			if f.Func != "" {
				h |= frameFunc
			}
			if f.File != "" {
				h |= frameFile
			}
			if f.Line != 0 {
				h |= frameLine
			}
			body = append(body, h)
			if f.Addr != 0 {
				body = binary.AppendVarint(body, int64(f.Addr-prev))
				prev = f.Addr
			}
			if hasMap {
				body = binary.AppendUvarint(body, mi)
			}
			if f.Func != "" {
				body = binary.AppendUvarint(body, e.str(f.Func))
			}
			if f.File != "" {
				body = binary.AppendUvarint(body, e.str(f.File))
			}
			if f.Line != 0 {
				body = binary.AppendUvarint(body, uint64(f.Line))
			}
		}
	}
	e.body = body
	var fl byte
	if meta {
		fl |= stackFlagMeta
	}
	dst = append(dst, stackVersion, fl)
	dst = binary.AppendUvarint(dst, uint64(b.EndNS-b.StartNS))
	dst = binary.AppendUvarint(dst, uint64(b.Hz))
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.Ratio))
	dst = appendStr(dst, b.Node)
	if meta {
		u := b.Unwind
		for _, v := range []int64{b.Dropped, u.FPFrames, u.DWARFFrames, u.FallbackFrames, u.PythonFrames, u.Truncated} {
			dst = binary.AppendVarint(dst, v)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.order)))
	for _, s := range e.order {
		dst = appendStr(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.mapList)))
	for _, mi := range e.mapList {
		m := &b.Mappings[mi]
		dst = binary.AppendUvarint(dst, m.Start)
		dst = binary.AppendUvarint(dst, m.Limit-m.Start)
		dst = binary.AppendUvarint(dst, m.Offset)
		dst = binary.AppendUvarint(dst, e.strs[m.BuildID])
		dst = binary.AppendUvarint(dst, e.strs[m.Path])
	}
	return append(dst, e.body...)
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func (r *byteReader) str(limit int) string {
	n := r.uvarint(uint64(limit))
	return string(r.bytes(int(n)))
}

// decodeStackRecord decodes a record value into out (Rank, StartNS from
// the key). It never panics: malformed input is an error wrapping
// ErrCorrupt, and whatever it accepts passes stack.Batch.Validate.
// varintFull reads a zigzag varint of the full int64 range.
func (r *byteReader) varintFull() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func decodeStackRecord(v []byte, startNS int64, rank int, out *stack.Batch) error {
	r := byteReader{b: v}
	ver, fl := r.byte(), r.byte()
	if r.err != nil {
		return corrupt("stack record is %d bytes", len(v))
	}
	if ver != stackVersion {
		return corrupt("stack record version %d, want %d", ver, stackVersion)
	}
	if fl&^stackFlagMeta != 0 {
		return corrupt("unknown stack record flags %#x", fl)
	}
	*out = stack.Batch{StartNS: startNS}
	out.EndNS = startNS + int64(r.uvarint(uint64(MaxStackSpanNS)))
	out.Hz = int(r.uvarint(stack.MaxHz))
	if rb := r.bytes(8); rb != nil {
		out.Ratio = math.Float64frombits(binary.BigEndian.Uint64(rb))
	}
	out.Node = r.str(stack.MaxNameLen)
	if fl&stackFlagMeta != 0 {
		u := &out.Unwind
		for _, p := range []*int64{&out.Dropped, &u.FPFrames, &u.DWARFFrames, &u.FallbackFrames, &u.PythonFrames, &u.Truncated} {
			*p = r.varintFull()
		}
	}
	nstr := r.uvarint(maxRecordStrings)
	if r.err == nil && nstr > uint64(len(r.b)) { // each string costs at least its length byte
		return corrupt("stack record: %d strings in %d bytes", nstr, len(r.b))
	}
	strs := make([]string, nstr+1)
	for i := 1; i < len(strs) && r.err == nil; i++ {
		strs[i] = r.str(stack.MaxNameLen)
	}
	str := func() string {
		i := r.uvarint(nstr)
		return strs[i]
	}
	nmap := r.uvarint(stack.MaxMappings)
	if r.err == nil && nmap > uint64(len(r.b))/5 {
		return corrupt("stack record: %d mappings in %d bytes", nmap, len(r.b))
	}
	if nmap > 0 && r.err == nil {
		out.Mappings = make([]stack.Mapping, nmap)
	}
	for i := range out.Mappings {
		m := &out.Mappings[i]
		m.Start = r.uvarint(math.MaxUint64)
		m.Limit = m.Start + r.uvarint(math.MaxUint64-m.Start)
		m.Offset = r.uvarint(math.MaxUint64)
		m.BuildID, m.Path = str(), str()
	}
	ns := r.uvarint(stack.MaxSamples)
	if r.err == nil && ns > uint64(len(r.b))/8 { // a sample is at least 8 bytes
		return corrupt("stack record: %d samples in %d bytes", ns, len(r.b))
	}
	if r.err == nil {
		out.Samples = make([]stack.Sample, ns)
	}
	for i := range out.Samples {
		if r.err != nil {
			break
		}
		s := &out.Samples[i]
		sfl := r.byte()
		if sfl&^(sampleForeign|sampleTruncated) != 0 {
			return corrupt("unknown sample flags %#x", sfl)
		}
		s.Rank, s.Foreign, s.Truncated = rank, sfl&sampleForeign != 0, sfl&sampleTruncated != 0
		s.PID = int(r.uvarint(stack.MaxPID))
		s.TID = int(r.uvarint(stack.MaxPID))
		s.Comm, s.Thread = str(), str()
		s.Count = int64(r.uvarint(uint64(stack.MaxCount)))
		nf := r.uvarint(stack.MaxFrames)
		if r.err != nil || nf > uint64(len(r.b)) {
			r.fail("frames truncated")
			break
		}
		s.Frames = make([]stack.Frame, nf)
		var prev uint64
		for j := range s.Frames {
			f := &s.Frames[j]
			h := r.byte()
			f.Kind, f.Mapping = stack.Kind(h&frameKindMask), -1
			if h&frameAddr != 0 {
				// A delta is any int64 (the encoder wraps the subtraction):
				// Addr=1<<63 after 0 is -2^63, which must read back.
				prev += uint64(r.varintFull())
				f.Addr = prev
			}
			if h&frameMapping != 0 {
				if nmap == 0 {
					r.fail("frame mapping without mappings")
				}
				f.Mapping = int32(r.uvarint(max(nmap, 1) - 1))
			}
			if h&frameFunc != 0 {
				f.Func = str()
			}
			if h&frameFile != 0 {
				f.File = str()
			}
			if h&frameLine != 0 {
				f.Line = int32(r.uvarint(math.MaxInt32))
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: stack record: %v", ErrCorrupt, r.err)
	}
	if len(r.b) != 0 {
		return corrupt("%d trailing bytes after the stack record", len(r.b))
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("%w: stack record: %v", ErrCorrupt, err)
	}
	return nil
}

// appendOSStatRecord encodes one OS batch's value (start in the key).
func appendOSStatRecord(dst []byte, e *stackEnc, b *osstat.Batch) []byte {
	if e.strs == nil {
		e.strs, e.maps = map[string]uint64{}, map[int32]uint64{}
	}
	clear(e.strs)
	e.order = e.order[:0]
	for i := range b.Points {
		e.str(b.Points[i].Name)
		e.str(b.Points[i].Device)
	}
	dst = append(dst, osstatVersion)
	dst = binary.AppendUvarint(dst, uint64(b.EndNS-b.StartNS))
	dst = appendStr(dst, b.Node)
	dst = binary.AppendUvarint(dst, uint64(len(e.order)))
	for _, s := range e.order {
		dst = appendStr(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Points)))
	for i := range b.Points {
		p := &b.Points[i]
		dst = binary.AppendUvarint(dst, e.strs[p.Name])
		dst = binary.AppendUvarint(dst, uint64(p.Rank+1))
		dst = binary.AppendUvarint(dst, uint64(p.CPU+1))
		dst = binary.AppendUvarint(dst, e.strs[p.Device])
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(p.Value))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Absent)))
	for _, a := range b.Absent {
		dst = appendStr(appendStr(dst, a.Source), a.Reason)
	}
	return dst
}

// maxOSAbsent bounds a decoded record's absences.
const maxOSAbsent = 1 << 10

// decodeOSStatRecord decodes an OS record value (StartNS from the key);
// whatever it accepts passes osstat.Batch.Validate.
func decodeOSStatRecord(v []byte, startNS int64, out *osstat.Batch) error {
	r := byteReader{b: v}
	if ver := r.byte(); r.err == nil && ver != osstatVersion {
		return corrupt("os record version %d, want %d", ver, osstatVersion)
	}
	*out = osstat.Batch{StartNS: startNS}
	out.EndNS = startNS + int64(r.uvarint(uint64(MaxStackSpanNS)))
	out.Node = r.str(osstat.MaxNameLen)
	nstr := r.uvarint(2 * osstat.MaxPoints)
	if r.err == nil && nstr > uint64(len(r.b)) {
		return corrupt("os record: %d strings in %d bytes", nstr, len(r.b))
	}
	strs := make([]string, nstr+1)
	for i := 1; i < len(strs) && r.err == nil; i++ {
		strs[i] = r.str(osstat.MaxNameLen)
	}
	np := r.uvarint(osstat.MaxPoints)
	if r.err == nil && np > uint64(len(r.b))/12 { // a point is at least 12 bytes
		return corrupt("os record: %d points in %d bytes", np, len(r.b))
	}
	if np > 0 && r.err == nil {
		out.Points = make([]osstat.Point, np)
	}
	for i := range out.Points {
		p := &out.Points[i]
		p.Name = strs[r.uvarint(nstr)]
		p.Rank = int(r.uvarint(osstat.MaxRank+1)) - 1
		p.CPU = int(r.uvarint(osstat.MaxCPU+1)) - 1
		p.Device = strs[r.uvarint(nstr)]
		if b := r.bytes(8); b != nil {
			p.Value = math.Float64frombits(binary.BigEndian.Uint64(b))
		}
	}
	na := r.uvarint(maxOSAbsent)
	if r.err == nil && na > uint64(len(r.b))/2 {
		return corrupt("os record: %d absences in %d bytes", na, len(r.b))
	}
	if na > 0 && r.err == nil {
		out.Absent = make([]osstat.Absence, na)
	}
	for i := range out.Absent {
		out.Absent[i] = osstat.Absence{Source: r.str(osstat.MaxNameLen), Reason: r.str(osstat.MaxNameLen)}
	}
	if r.err != nil {
		return fmt.Errorf("%w: os record: %v", ErrCorrupt, r.err)
	}
	if len(r.b) != 0 {
		return corrupt("%d trailing bytes after the os record", len(r.b))
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("%w: os record: %v", ErrCorrupt, err)
	}
	return nil
}
