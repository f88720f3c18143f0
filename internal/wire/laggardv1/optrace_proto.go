package laggardv1

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// MaxOpTraceEvents bounds the events of one decoded laggard.v1.OpTrace:
// twice the server's default per-rank upload limit, so a stored trace
// always decodes. An event costs ~150 bytes decoded, so 4M is ~600 MB.
const MaxOpTraceEvents = 4_000_000

// MaxOpTraceArgs bounds the arguments of one trace (arg_key entries):
// KAIR needs none; kept ones are for display.
const MaxOpTraceArgs = 4_000_000

// Field numbers of laggard.v1.OpTrace (api/laggard/v1/optrace.proto).
const (
	opFieldStrings  = 3
	opFieldCat      = 4
	opFieldArgCount = 18
	opFieldArgKey   = 19
	opFieldArgValue = 20
)

// opColumnNames names the per-event columns by field number (4..20) for
// errors.
var opColumnNames = map[protowire.Number]string{
	4: "cat", 5: "name", 6: "start_delta", 7: "dur_ns", 8: "pid", 9: "tid", 10: "stream", 11: "device",
	12: "step_delta", 13: "corr", 14: "ext", 15: "flow", 16: "comm", 17: "seq", 18: "arg_count",
	19: "arg_key", 20: "arg_value",
}

// opRequired are the columns every non-empty trace has.
var opRequired = map[protowire.Number]bool{4: true, 5: true, 6: true, 7: true}

// countOpColumns counts the elements of every repeated field of an encoded
// OpTrace (packed or not) without decoding them, so the event cap and the
// column lengths are checked before proto.Unmarshal allocates.
func countOpColumns(b []byte) (map[protowire.Number]int, error) {
	counts := map[protowire.Number]int{}
	bad := func(l int) error {
		return &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + protowire.ParseError(l).Error()}
	}
	for len(b) > 0 {
		f, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, bad(l)
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(f, typ, b)
		if l < 0 {
			return nil, bad(l)
		}
		v := b[:l]
		b = b[l:]
		switch {
		case f == opFieldStrings:
			counts[f]++
		case f >= opFieldCat && f <= opFieldArgValue && typ == protowire.BytesType:
			// Packed: count the varints in the payload.
			p, _ := protowire.ConsumeBytes(v)
			for len(p) > 0 {
				_, n := protowire.ConsumeVarint(p)
				if n < 0 {
					return nil, &signal.FieldError{Field: opColumnNames[f], Msg: "invalid packed varint"}
				}
				p = p[n:]
				counts[f]++
			}
		case f >= opFieldCat && f <= opFieldArgValue:
			counts[f]++
		}
	}
	return counts, nil
}

// checkOpColumns applies the caps and the column-length rules to counts.
func checkOpColumns(counts map[protowire.Number]int) error {
	if counts[opFieldStrings] > MaxBatchStrings {
		return fmt.Errorf("%w: more than %d strings in one trace", ErrTooLarge, MaxBatchStrings)
	}
	n := counts[opFieldCat]
	if n > MaxOpTraceEvents {
		return fmt.Errorf("%w: %d events in one trace, more than %d", ErrTooLarge, n, MaxOpTraceEvents)
	}
	if a := counts[opFieldArgKey]; a > MaxOpTraceArgs {
		return fmt.Errorf("%w: %d args in one trace, more than %d", ErrTooLarge, a, MaxOpTraceArgs)
	}
	for f := protowire.Number(opFieldCat + 1); f <= opFieldArgCount; f++ {
		c := counts[f]
		if c == n || (c == 0 && !opRequired[f]) {
			continue
		}
		return &signal.FieldError{Field: opColumnNames[f], Msg: fmt.Sprintf("%d entries for %d events (cat): send one per event%s", c, n,
			map[bool]string{true: "", false: " or none"}[opRequired[f]])}
	}
	if counts[opFieldArgKey] != counts[opFieldArgValue] {
		return &signal.FieldError{Field: "arg_value", Msg: fmt.Sprintf("%d entries for %d arg_key entries", counts[opFieldArgValue], counts[opFieldArgKey])}
	}
	return nil
}

// DecodeOpTrace decodes one rank's laggard.v1.OpTrace with the contract of
// the other protobuf decoders: caps (events, args, strings) and column
// lengths checked on the encoded bytes before proto.Unmarshal allocates,
// unknown fields rejected, string indexes checked, the trace validated
// (optrace.Trace.Validate), errors naming the column or events[i].field.
func DecodeOpTrace(b []byte) (*optrace.Trace, error) {
	counts, err := countOpColumns(b)
	if err != nil {
		return nil, err
	}
	if err := checkOpColumns(counts); err != nil {
		return nil, err
	}
	var m pb.OpTrace
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + clipMsg(err.Error())}
	}
	if u := m.ProtoReflect().GetUnknown(); len(u) > 0 {
		return nil, unknownField("", u)
	}
	strs := m.GetStrings()
	if len(strs) > 0 && strs[0] != "" {
		return nil, &signal.FieldError{Field: "strings[0]", Msg: "must be the empty string"}
	}
	str := func(idx uint32, i int, field string) (string, error) {
		if idx == 0 {
			return "", nil
		}
		if int64(idx) >= int64(len(strs)) {
			return "", &signal.FieldError{Field: field + "[" + strconv.Itoa(i) + "]", Msg: fmt.Sprintf("string index %d outside the table of %d", idx, len(strs))}
		}
		return strs[idx], nil
	}
	n := len(m.Cat)
	t := &optrace.Trace{Rank: int(m.GetRank()), ClockOffsetNS: m.GetClockOffsetNs()}
	if n > 0 {
		t.Events = make([]optrace.Event, n)
	}
	var argTotal uint64
	for _, c := range m.ArgCount {
		if c > optrace.MaxArgs {
			return nil, &signal.FieldError{Field: "arg_count", Msg: fmt.Sprintf("an event with %d args, more than %d", c, optrace.MaxArgs)}
		}
		argTotal += uint64(c)
	}
	if argTotal != uint64(len(m.ArgKey)) {
		return nil, &signal.FieldError{Field: "arg_key", Msg: fmt.Sprintf("%d entries, but arg_count sums to %d", len(m.ArgKey), argTotal)}
	}
	var start uint64
	step := uint64(1<<64 - 1) // −1
	arg := 0
	for i := range t.Events {
		e := &t.Events[i]
		if c := m.Cat[i]; c <= 255 {
			e.Cat = optrace.Category(c) // an unknown code: Validate names it
		}
		if e.Name, err = str(m.Name[i], i, "name"); err != nil {
			return nil, err
		}
		start += uint64(m.StartDelta[i]) // wrapping: Validate bounds the result
		e.StartNS = int64(start)
		if m.DurNs[i] > uint64(optrace.MaxDurNS) {
			return nil, &signal.FieldError{Field: "events[" + strconv.Itoa(i) + "].dur_ns", Msg: fmt.Sprintf("%d out of range [0,%d]", m.DurNs[i], optrace.MaxDurNS)}
		}
		e.DurNS = int64(m.DurNs[i])
		e.Device, e.Step, e.Seq = -1, -1, -1
		if m.Pid != nil {
			e.PID = m.Pid[i]
		}
		if m.Tid != nil {
			e.TID = m.Tid[i]
		}
		if m.Stream != nil {
			e.Stream = m.Stream[i]
		}
		if m.Device != nil {
			e.Device = int(m.Device[i]) - 1
		}
		if m.StepDelta != nil {
			step += uint64(m.StepDelta[i])
			e.Step = int64(step)
		}
		if m.Corr != nil {
			e.Correlation = m.Corr[i]
		}
		if m.Ext != nil {
			e.ExternalID = m.Ext[i]
		}
		if m.Flow != nil {
			e.FlowID = m.Flow[i]
		}
		if m.Comm != nil {
			if e.Comm, err = str(m.Comm[i], i, "comm"); err != nil {
				return nil, err
			}
		}
		if m.Seq != nil {
			e.Seq = int64(m.Seq[i] - 1)
		}
		if m.ArgCount != nil && m.ArgCount[i] > 0 {
			k := int(m.ArgCount[i])
			e.Args = make([]optrace.Arg, k)
			for j := range e.Args {
				if e.Args[j].Key, err = str(m.ArgKey[arg], arg, "arg_key"); err != nil {
					return nil, err
				}
				if e.Args[j].Value, err = str(m.ArgValue[arg], arg, "arg_value"); err != nil {
					return nil, err
				}
				arg++
			}
		}
	}
	if err := t.Validate(); err != nil {
		return nil, prefix("", err)
	}
	return t, nil
}

// EncodeOpTrace encodes t as a laggard.v1.OpTrace after validating it
// (the decoder would refuse anything Validate refuses). Optional columns
// whose every entry is the default are left empty.
func EncodeOpTrace(t *optrace.Trace) ([]byte, error) {
	if t == nil {
		return nil, &signal.FieldError{Field: "body", Msg: "nil trace"}
	}
	if len(t.Events) > MaxOpTraceEvents {
		return nil, fmt.Errorf("%w: %d events in one trace, more than %d", ErrTooLarge, len(t.Events), MaxOpTraceEvents)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	m, err := OpTraceToProto(t)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// OpTraceToProto converts a validated trace to its protobuf form.
func OpTraceToProto(t *optrace.Trace) (*pb.OpTrace, error) {
	n := len(t.Events)
	st := newStringTable()
	m := &pb.OpTrace{Rank: int32(t.Rank), ClockOffsetNs: t.ClockOffsetNS}
	if int64(t.Rank) != int64(m.Rank) {
		return nil, &signal.FieldError{Field: "rank", Msg: fmt.Sprintf("%d does not fit in 32 bits", t.Rank)}
	}
	m.Cat, m.Name = make([]uint32, n), make([]uint32, n)
	m.StartDelta, m.DurNs = make([]int64, n), make([]uint64, n)
	// Optional columns are built lazily: the first non-default entry
	// allocates the column and back-fills the defaults before it.
	col64 := func(c *[]int64, i int, v, def int64) {
		if *c == nil && v == def {
			return
		}
		if *c == nil {
			*c = make([]int64, n)
			if def != 0 {
				for j := 0; j < i; j++ {
					(*c)[j] = def
				}
			}
		}
		(*c)[i] = v
	}
	colU32 := func(c *[]uint32, i int, v uint32) {
		if *c == nil && v == 0 {
			return
		}
		if *c == nil {
			*c = make([]uint32, n)
		}
		(*c)[i] = v
	}
	var prevStart, prevStep uint64 = 0, 1<<64 - 1
	var stepDelta []int64
	var stepSet bool
	for i := range t.Events {
		e := &t.Events[i]
		m.Cat[i] = uint32(e.Cat)
		m.Name[i] = st.id(e.Name)
		m.StartDelta[i] = int64(uint64(e.StartNS) - prevStart)
		prevStart = uint64(e.StartNS)
		m.DurNs[i] = uint64(e.DurNS)
		col64(&m.Pid, i, e.PID, 0)
		col64(&m.Tid, i, e.TID, 0)
		col64(&m.Stream, i, e.Stream, 0)
		colU32(&m.Device, i, uint32(e.Device+1))
		// step_delta is 0 for an event repeating the previous step, so
		// "every step unknown" is the all-zero column.
		d := int64(uint64(e.Step) - prevStep)
		prevStep = uint64(e.Step)
		if d != 0 || stepSet {
			if !stepSet {
				stepDelta, stepSet = make([]int64, n), true
			}
			stepDelta[i] = d
		}
		col64(&m.Corr, i, e.Correlation, 0)
		col64(&m.Ext, i, e.ExternalID, 0)
		col64(&m.Flow, i, e.FlowID, 0)
		colU32(&m.Comm, i, st.id(e.Comm))
		if m.Seq != nil || e.Seq != -1 {
			if m.Seq == nil {
				m.Seq = make([]uint64, n)
			}
			m.Seq[i] = uint64(e.Seq + 1)
		}
		if len(e.Args) > 0 {
			colU32(&m.ArgCount, i, uint32(len(e.Args)))
			for _, a := range e.Args {
				m.ArgKey = append(m.ArgKey, st.id(a.Key))
				m.ArgValue = append(m.ArgValue, st.id(a.Value))
			}
		}
	}
	m.StepDelta = stepDelta
	if len(st.strs) > MaxBatchStrings {
		return nil, fmt.Errorf("%w: %d distinct strings in one trace, more than %d", ErrTooLarge, len(st.strs), MaxBatchStrings)
	}
	if len(m.ArgKey) > MaxOpTraceArgs {
		return nil, fmt.Errorf("%w: %d args in one trace, more than %d", ErrTooLarge, len(m.ArgKey), MaxOpTraceArgs)
	}
	m.Strings = st.strs
	return m, nil
}
