package laggardv1

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Partial decoding (issue 16 item 8a): an agent's batch carries thousands
// of independent records (stack samples, OS points), one of which may hold
// a bad string (a process named with invalid UTF-8) or field. The
// *Partial decoders keep every valid record and name each one they left
// out; only an error of the batch itself (caps, framing, window, node)
// refuses the whole batch.

// Refusal is one record a partial decode left out of its batch.
type Refusal struct {
	// Record is the record as the sender numbered it: "samples[3]",
	// "mappings[0]", "points[12]", "absent[1]".
	Record string `json:"record"`
	// Field and Error say what is wrong with it.
	Field string `json:"field,omitempty"`
	Error string `json:"error"`
}

func refusal(record string, err error) Refusal {
	r := Refusal{Record: record, Error: err.Error()}
	if fe, ok := errors.AsType[*signal.FieldError](err); ok {
		r.Field = fe.Field
	}
	return r
}

// Rules are the receiver's own per-record rules of a partial decode.
type Rules struct {
	// World > 0 refuses a sample or point whose rank is not below it
	// (the job's world size).
	World int
}

// sifter collects refused records while a batch is decoded.
type sifter struct {
	rules   Rules
	refused []Refusal
	bad     map[string]map[int]bool // record kind → refused indexes
}

// outsideWorld is the World rule for a record's rank; field is its path.
func (s *sifter) outsideWorld(field string, rank int) error {
	if s.rules.World > 0 && rank >= s.rules.World {
		return signal.FieldErrorf(field, "%d outside the job's world of %d", rank, s.rules.World)
	}
	return nil
}

func (s *sifter) refuse(kind string, i int, err error) {
	if s.bad == nil {
		s.bad = map[string]map[int]bool{}
	}
	if s.bad[kind] == nil {
		s.bad[kind] = map[int]bool{}
	}
	if s.bad[kind][i] {
		return
	}
	s.bad[kind][i] = true
	s.refused = append(s.refused, refusal(kind+"["+strconv.Itoa(i)+"]", err))
}

func (s *sifter) isBad(kind string, i int) bool { return s.bad[kind][i] }

func (s *sifter) refuseMapping(i int, err error) { s.refuse("mappings", i, err) }
func (s *sifter) refuseSample(i int, err error)  { s.refuse("samples", i, err) }

// sorted returns the refusals in batch order (mappings, samples, points,
// absent; by index).
func (s *sifter) sorted() []Refusal {
	kind := func(r Refusal) (string, int) {
		k, rest, _ := strings.Cut(r.Record, "[")
		n, _ := strconv.Atoi(strings.TrimSuffix(rest, "]"))
		return k, n
	}
	slices.SortStableFunc(s.refused, func(a, b Refusal) int {
		ka, ia := kind(a)
		kb, ib := kind(b)
		return cmp.Or(cmp.Compare(ka, kb), cmp.Compare(ia, ib))
	})
	return s.refused
}

// siftStacks validates b's header (an error refuses the batch), then each
// mapping and sample not refused yet, and removes the refused ones:
// samples whose frames use a refused mapping go with it, and the kept
// mappings are renumbered.
func (s *sifter) siftStacks(b *stack.Batch) error {
	if err := b.ValidateHeader(); err != nil {
		return prefix("", err)
	}
	for i := range b.Mappings {
		if !s.isBad("mappings", i) {
			if err := b.ValidateMapping(i); err != nil {
				s.refuseMapping(i, err)
			}
		}
	}
	for i := range b.Samples {
		if s.isBad("samples", i) {
			continue
		}
		if err := sampleMappings(b, i, s); err != nil {
			s.refuseSample(i, err)
			continue
		}
		if err := b.ValidateSample(i); err != nil {
			s.refuseSample(i, err)
			continue
		}
		if err := s.outsideWorld(fmt.Sprintf("samples[%d].rank", i), b.Samples[i].Rank); err != nil {
			s.refuseSample(i, err)
		}
	}
	if len(s.refused) == 0 {
		return nil
	}
	remap := make([]int32, len(b.Mappings))
	kept := b.Mappings[:0]
	for i := range b.Mappings {
		remap[i] = -1
		if !s.isBad("mappings", i) {
			remap[i] = int32(len(kept))
			kept = append(kept, b.Mappings[i])
		}
	}
	b.Mappings = kept
	samples := b.Samples[:0]
	for i := range b.Samples {
		if s.isBad("samples", i) {
			continue
		}
		smp := b.Samples[i]
		for j := range smp.Frames {
			if m := smp.Frames[j].Mapping; m >= 0 {
				smp.Frames[j].Mapping = remap[m]
			}
		}
		samples = append(samples, smp)
	}
	clear(b.Samples[len(samples):])
	b.Samples = samples
	if len(b.Mappings) == 0 {
		b.Mappings = nil
	}
	s.refused = s.sorted()
	return nil
}

// sampleMappings refuses a frame mapping outside [-1, len(mappings)) (the
// rule checkFrameMappings applies to a whole JSON batch) or one that was
// refused.
func sampleMappings(b *stack.Batch, i int, s *sifter) error {
	for j, f := range b.Samples[i].Frames {
		switch {
		case f.Mapping < -1 || int(f.Mapping) >= len(b.Mappings):
			return signal.FieldErrorf(fmt.Sprintf("samples[%d].frames[%d].mapping", i, j), "%d does not index the batch's %d mappings", f.Mapping, len(b.Mappings))
		case f.Mapping >= 0 && s.isBad("mappings", int(f.Mapping)):
			return signal.FieldErrorf(fmt.Sprintf("samples[%d].frames[%d].mapping", i, j), "mappings[%d] was refused", f.Mapping)
		}
	}
	return nil
}

// siftOS validates b's header, then each point and absence not refused
// yet, and removes the refused ones.
func (s *sifter) siftOS(b *osstat.Batch) error {
	if err := b.ValidateHeader(); err != nil {
		return prefix("", err)
	}
	for i := range b.Points {
		if !s.isBad("points", i) {
			err := b.ValidatePoint(i)
			if err == nil {
				err = s.outsideWorld(fmt.Sprintf("points[%d].rank", i), b.Points[i].Rank)
			}
			if err != nil {
				s.refuse("points", i, err)
			}
		}
	}
	for i := range b.Absent {
		if !s.isBad("absent", i) {
			if err := b.ValidateAbsence(i); err != nil {
				s.refuse("absent", i, err)
			}
		}
	}
	if len(s.refused) == 0 {
		return nil
	}
	b.Points = keepUnrefused(b.Points, s, "points")
	b.Absent = keepUnrefused(b.Absent, s, "absent")
	s.refused = s.sorted()
	return nil
}

func keepUnrefused[T any](xs []T, s *sifter, kind string) []T {
	out := xs[:0]
	for i := range xs {
		if !s.isBad(kind, i) {
			out = append(out, xs[i])
		}
	}
	clear(xs[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}

// utf8Patch says where a protobuf batch holds strings: proto3 refuses a
// whole message for one string that is not UTF-8, so the partial
// decoders find those strings first, overwrite them (same length, so the
// framing holds) and refuse only the records that use them.
type utf8Patch struct {
	table  protowire.Number            // the repeated string table: bad entries by index
	header map[protowire.Number]string // top-level strings: a bad one refuses the batch
	nested protowire.Number            // a repeated message of strings: bad entries by index (0: none)
}

// patchInvalidStrings returns b (a copy when it patched anything) with
// every string of p that is not valid UTF-8 overwritten by '?', and the
// indexes of the bad table and nested entries. Framing errors are left
// to proto.Unmarshal.
func patchInvalidStrings(b []byte, p utf8Patch) (out []byte, badTable, badNested map[uint32]bool, err error) {
	var spans [][2]int
	var nTable, nNested uint32
	for off := 0; off < len(b); {
		num, typ, l := protowire.ConsumeTag(b[off:])
		if l < 0 {
			return b, nil, nil, nil
		}
		off += l
		n := protowire.ConsumeFieldValue(num, typ, b[off:])
		if n < 0 {
			return b, nil, nil, nil
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[off : off+n])
			start := off + n - len(v)
			switch {
			case num == p.table:
				if !utf8.Valid(v) {
					if badTable == nil {
						badTable = map[uint32]bool{}
					}
					badTable[nTable] = true
					spans = append(spans, [2]int{start, off + n})
				}
				nTable++
			case num == p.nested && p.nested != 0:
				found := false
				_ = walkFields(v, func(_ protowire.Number, typ protowire.Type, sv []byte) error {
					if typ == protowire.BytesType && !utf8.Valid(sv) {
						found = true
						// sv is a subslice of v: it starts cap(v)−cap(sv) bytes in.
						s := start + cap(v) - cap(sv)
						spans = append(spans, [2]int{s, s + len(sv)})
					}
					return nil
				})
				if found {
					if badNested == nil {
						badNested = map[uint32]bool{}
					}
					badNested[nNested] = true
				}
				nNested++
			default:
				if name, ok := p.header[num]; ok && !utf8.Valid(v) {
					return nil, nil, nil, &signal.FieldError{Field: name, Msg: "not valid UTF-8"}
				}
			}
		}
		off += n
	}
	if len(spans) == 0 {
		return b, badTable, badNested, nil
	}
	out = slices.Clone(b)
	for _, sp := range spans {
		for i := sp[0]; i < sp[1]; i++ {
			out[i] = '?'
		}
	}
	return out, badTable, badNested, nil
}
