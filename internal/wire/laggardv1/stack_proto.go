package laggardv1

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// MaxBatchStrings bounds the string table of one protobuf stack or OS
// batch: each entry is a Go string header (16 bytes) decoded from as
// little as 2 bytes.
const MaxBatchStrings = 1 << 20

// Field numbers of laggard.v1.StackBatch and StackSample the pre-decode
// caps read (api/laggard/v1/stack.proto).
const (
	stackFieldNode     = 1
	stackFieldStrings  = 6
	stackFieldMappings = 7
	stackFieldSamples  = 8
	sampleFieldKind    = 9
	sampleFieldLine    = 14
)

// UnmarshalProtoStacks decodes a laggard.v1.StackBatch with the contract
// of UnmarshalJSONStacks: record caps (strings, mappings, samples, frames
// per sample and per batch) checked on the encoded bytes before
// proto.Unmarshal allocates, unknown fields rejected, string indexes
// checked, the batch validated, errors naming samples[i].frames[j].field.
func UnmarshalProtoStacks(b []byte) (*stack.Batch, error) {
	out, _, err := unmarshalProtoStacks(b, nil)
	return out, err
}

// UnmarshalProtoStacksPartial is UnmarshalProtoStacks keeping every valid
// sample: a sample (or mapping) that fails — invalid UTF-8 in one of its
// strings, a bad field — is left out and named in the refusals; only an
// error of the batch itself (caps, window, rate, node, framing) refuses
// the whole batch. Samples using a refused mapping are refused with it.
func UnmarshalProtoStacksPartial(b []byte, rules Rules) (*stack.Batch, []Refusal, error) {
	return unmarshalProtoStacks(b, &rules)
}

func unmarshalProtoStacks(b []byte, rules *Rules) (*stack.Batch, []Refusal, error) {
	partial := rules != nil
	if err := capStackBatch(b); err != nil {
		return nil, nil, err
	}
	var badStr map[uint32]bool
	if partial {
		var err error
		if b, badStr, _, err = patchInvalidStrings(b, utf8Patch{table: stackFieldStrings, header: map[protowire.Number]string{stackFieldNode: "node"}}); err != nil {
			return nil, nil, err
		}
	}
	var pbb pb.StackBatch
	if err := proto.Unmarshal(b, &pbb); err != nil {
		return nil, nil, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + clipMsg(err.Error())}
	}
	if u := pbb.ProtoReflect().GetUnknown(); len(u) > 0 {
		return nil, nil, unknownField("", u)
	}
	strs := pbb.GetStrings()
	if len(strs) > 0 && strs[0] != "" {
		return nil, nil, &signal.FieldError{Field: "strings[0]", Msg: "must be the empty string"}
	}
	str := func(i uint32, path func() string, field string) (string, error) {
		if i == 0 {
			return "", nil
		}
		if int64(i) >= int64(len(strs)) {
			return "", &signal.FieldError{Field: path() + field, Msg: fmt.Sprintf("string index %d outside the table of %d", i, len(strs))}
		}
		if badStr[i] {
			return "", &signal.FieldError{Field: path() + field, Msg: fmt.Sprintf("strings[%d] is not valid UTF-8", i)}
		}
		return strs[i], nil
	}
	out := &stack.Batch{Node: pbb.GetNode(), StartNS: pbb.GetStartNs(), EndNS: pbb.GetEndNs(), Hz: int(pbb.GetHz()), Ratio: pbb.GetRatio(), Dropped: pbb.GetDropped()}
	if u := pbb.GetUnwind(); u != nil {
		if unk := u.ProtoReflect().GetUnknown(); len(unk) > 0 {
			return nil, nil, unknownField("unwind", unk)
		}
		out.Unwind = stack.UnwindStats{FPFrames: u.GetFpFrames(), DWARFFrames: u.GetDwarfFrames(), FallbackFrames: u.GetFallbackFrames(),
			PythonFrames: u.GetPythonFrames(), Truncated: u.GetTruncated()}
	}
	var sv sifter
	if rules != nil {
		sv.rules = *rules
	}
	if len(pbb.Mappings) > 0 {
		out.Mappings = make([]stack.Mapping, len(pbb.Mappings))
	}
	for i, pm := range pbb.Mappings {
		if err := decodeProtoMapping(pm, &out.Mappings[i], i, str); err != nil {
			if !partial {
				return nil, nil, err
			}
			sv.refuseMapping(i, err)
		}
	}
	if len(pbb.Samples) > 0 {
		out.Samples = make([]stack.Sample, len(pbb.Samples))
	}
	for i, ps := range pbb.Samples {
		if err := decodeProtoSample(ps, &out.Samples[i], i, len(out.Mappings), str); err != nil {
			if !partial {
				return nil, nil, err
			}
			sv.refuseSample(i, err)
		}
	}
	if !partial {
		if err := out.Validate(); err != nil {
			return nil, nil, prefix("", err)
		}
		return out, nil, nil
	}
	if err := sv.siftStacks(out); err != nil {
		return nil, nil, err
	}
	return out, sv.refused, nil
}

// decodeProtoMapping fills m from pm; errors name mappings[i].field.
func decodeProtoMapping(pm *pb.StackMapping, m *stack.Mapping, i int, str func(uint32, func() string, string) (string, error)) error {
	path := "mappings[" + strconv.Itoa(i) + "]"
	if pm == nil {
		return &signal.FieldError{Field: path, Msg: "null mapping"}
	}
	if u := pm.ProtoReflect().GetUnknown(); len(u) > 0 {
		return unknownField(path, u)
	}
	m.Start, m.Limit, m.Offset = pm.GetStart(), pm.GetLimit(), pm.GetOffset()
	mp := func() string { return path }
	var err error
	if m.BuildID, err = str(pm.GetBuildId(), mp, ".build_id"); err != nil {
		return err
	}
	if m.Path, err = str(pm.GetPath(), mp, ".path"); err != nil {
		return err
	}
	return nil
}

// decodeProtoSample fills s from ps; errors name samples[i].field.
func decodeProtoSample(ps *pb.StackSample, s *stack.Sample, i, mappings int, str func(uint32, func() string, string) (string, error)) error {
	// Paths are built only for errors: a batch has ~10^5 frames.
	path := func() string { return "samples[" + strconv.Itoa(i) + "]" }
	if ps == nil {
		return &signal.FieldError{Field: path(), Msg: "null sample"}
	}
	if u := ps.ProtoReflect().GetUnknown(); len(u) > 0 {
		return unknownField(path(), u)
	}
	*s = stack.Sample{Rank: int(ps.GetRank()), PID: int(ps.GetPid()), TID: int(ps.GetTid()), Foreign: ps.GetForeign(), Count: ps.GetCount(), Truncated: ps.GetTruncated()}
	var err error
	if s.Comm, err = str(ps.GetComm(), path, ".comm"); err != nil {
		return err
	}
	if s.Thread, err = str(ps.GetThread(), path, ".thread"); err != nil {
		return err
	}
	n := len(ps.Kind)
	for _, f := range []struct {
		name string
		l    int
	}{{"addr", len(ps.Addr)}, {"mapping", len(ps.Mapping)}, {"func", len(ps.Func)}, {"file", len(ps.File)}, {"line", len(ps.Line)}} {
		if f.l != 0 && f.l != n {
			return &signal.FieldError{Field: path() + "." + f.name, Msg: fmt.Sprintf("%d entries for %d frames: send none or one per frame", f.l, n)}
		}
	}
	if n == 0 {
		return nil // Validate names the empty stack
	}
	s.Frames = make([]stack.Frame, n)
	for j := range s.Frames {
		fr := &s.Frames[j]
		fp := func() string { return path() + ".frames[" + strconv.Itoa(j) + "]" }
		k := ps.Kind[j]
		if k > 255 {
			return &signal.FieldError{Field: fp() + ".kind", Msg: fmt.Sprintf("invalid kind %d", k)}
		}
		fr.Kind, fr.Mapping = stack.Kind(k), -1
		if len(ps.Addr) > 0 {
			fr.Addr = ps.Addr[j]
		}
		if len(ps.Mapping) > 0 {
			m := ps.Mapping[j]
			if m > uint32(mappings) {
				return &signal.FieldError{Field: fp() + ".mapping", Msg: fmt.Sprintf("%d does not index the batch's %d mappings", int64(m)-1, mappings)}
			}
			fr.Mapping = int32(m) - 1
		}
		if len(ps.Func) > 0 {
			if fr.Func, err = str(ps.Func[j], fp, ".func"); err != nil {
				return err
			}
		}
		if len(ps.File) > 0 {
			if fr.File, err = str(ps.File[j], fp, ".file"); err != nil {
				return err
			}
		}
		if len(ps.Line) > 0 {
			if ps.Line[j] > 1<<31-1 {
				return &signal.FieldError{Field: fp() + ".line", Msg: "above 2^31-1"}
			}
			fr.Line = int32(ps.Line[j])
		}
	}
	return nil
}

// capStackBatch checks the record caps on the encoded batch.
func capStackBatch(b []byte) error {
	var nStrings, nMappings, nSamples int
	var perField [sampleFieldLine - sampleFieldKind + 1]int
	err := walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case stackFieldStrings:
			nStrings++
		case stackFieldMappings:
			nMappings++
		case stackFieldSamples:
			nSamples++
			if typ != protowire.BytesType {
				return nil // proto.Unmarshal names the wire-type error
			}
			var inSample [len(perField)]int
			err := walkFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num < sampleFieldKind || num > sampleFieldLine {
					return nil
				}
				n := 1
				if typ == protowire.BytesType { // packed: one varint ends at each byte below 0x80
					n = 0
					for _, c := range v {
						if c < 0x80 {
							n++
						}
					}
				}
				inSample[num-sampleFieldKind] += n
				return nil
			})
			if err != nil {
				return err
			}
			for i, n := range inSample {
				if n > stack.MaxFrames {
					return &signal.FieldError{Field: "samples[" + strconv.Itoa(nSamples-1) + "].frames", Msg: fmt.Sprintf("more than %d frames", stack.MaxFrames)}
				}
				perField[i] += n
				if perField[i] > MaxBatchFrames {
					return fmt.Errorf("%w: more than %d frames in one batch", ErrTooLarge, MaxBatchFrames)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range []struct {
		n, limit int
		name     string
	}{{nStrings, MaxBatchStrings, "strings"}, {nMappings, stack.MaxMappings, "mappings"}, {nSamples, stack.MaxSamples, "samples"}} {
		if c.n > c.limit {
			return fmt.Errorf("%w: more than %d %s in one batch", ErrTooLarge, c.limit, c.name)
		}
	}
	return nil
}

// walkFields calls fn for every top-level field of the encoded message b
// with its value bytes (for a length-delimited field, the contents).
func walkFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + protowire.ParseError(l).Error()}
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + protowire.ParseError(l).Error()}
		}
		v := b[:l]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[l:]
	}
	return nil
}

// MarshalProtoStacks is the inverse of UnmarshalProtoStacks, for the agent
// and tests.
func MarshalProtoStacks(b *stack.Batch) ([]byte, error) {
	return proto.Marshal(StacksToProto(b))
}

// stringTable interns strings for a protobuf batch; index 0 is "".
type stringTable struct {
	idx  map[string]uint32
	strs []string
}

func newStringTable() *stringTable {
	return &stringTable{idx: map[string]uint32{"": 0}, strs: []string{""}}
}

func (t *stringTable) id(s string) uint32 {
	if i, ok := t.idx[s]; ok {
		return i
	}
	i := uint32(len(t.strs))
	t.idx[s] = i
	t.strs = append(t.strs, s)
	return i
}

// StacksToProto converts a batch to its protobuf form, interning every
// name. Optional per-frame arrays that would be all zero are left empty.
func StacksToProto(b *stack.Batch) *pb.StackBatch {
	st := newStringTable()
	out := &pb.StackBatch{Node: b.Node, StartNs: b.StartNS, EndNs: b.EndNS, Hz: int32(b.Hz), Ratio: b.Ratio, Dropped: b.Dropped,
		Mappings: make([]*pb.StackMapping, len(b.Mappings)), Samples: make([]*pb.StackSample, len(b.Samples))}
	if u := b.Unwind; u != (stack.UnwindStats{}) {
		out.Unwind = &pb.UnwindStats{FpFrames: u.FPFrames, DwarfFrames: u.DWARFFrames, FallbackFrames: u.FallbackFrames, PythonFrames: u.PythonFrames, Truncated: u.Truncated}
	}
	for i := range b.Mappings {
		m := &b.Mappings[i]
		out.Mappings[i] = &pb.StackMapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, BuildId: st.id(m.BuildID), Path: st.id(m.Path)}
	}
	for i := range b.Samples {
		s := &b.Samples[i]
		ps := &pb.StackSample{Rank: int32(s.Rank), Pid: int32(s.PID), Tid: int32(s.TID), Comm: st.id(s.Comm), Thread: st.id(s.Thread),
			Foreign: s.Foreign, Count: s.Count, Truncated: s.Truncated, Kind: make([]uint32, len(s.Frames))}
		var hasAddr, hasMap, hasFunc, hasFile, hasLine bool
		for j := range s.Frames {
			f := &s.Frames[j]
			ps.Kind[j] = uint32(f.Kind)
			hasAddr, hasMap, hasFunc, hasFile, hasLine = hasAddr || f.Addr != 0, hasMap || f.Mapping != -1, hasFunc || f.Func != "", hasFile || f.File != "", hasLine || f.Line != 0
		}
		n := len(s.Frames)
		if hasAddr {
			ps.Addr = make([]uint64, n)
		}
		if hasMap {
			ps.Mapping = make([]uint32, n)
		}
		if hasFunc {
			ps.Func = make([]uint32, n)
		}
		if hasFile {
			ps.File = make([]uint32, n)
		}
		if hasLine {
			ps.Line = make([]uint32, n)
		}
		for j := range s.Frames {
			f := &s.Frames[j]
			if hasAddr {
				ps.Addr[j] = f.Addr
			}
			if hasMap {
				ps.Mapping[j] = uint32(f.Mapping + 1)
			}
			if hasFunc {
				ps.Func[j] = st.id(f.Func)
			}
			if hasFile {
				ps.File[j] = st.id(f.File)
			}
			if hasLine {
				ps.Line[j] = uint32(f.Line)
			}
		}
		out.Samples[i] = ps
	}
	out.Strings = st.strs
	return out
}
