package laggardv1

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// UnmarshalProtoOSStats decodes a laggard.v1.OSStatBatch with the
// contract of UnmarshalJSONOSStats: record caps before proto.Unmarshal
// allocates, unknown fields rejected, string indexes checked, the batch
// validated, errors naming points[i].field.
func UnmarshalProtoOSStats(b []byte) (*osstat.Batch, error) {
	out, _, err := unmarshalProtoOSStats(b, nil)
	return out, err
}

// UnmarshalProtoOSStatsPartial is UnmarshalProtoOSStats keeping every
// valid point and absence: one that fails (a device name that is not
// UTF-8, a bad value) is left out and named in the refusals; only an
// error of the batch itself refuses it whole.
func UnmarshalProtoOSStatsPartial(b []byte, rules Rules) (*osstat.Batch, []Refusal, error) {
	return unmarshalProtoOSStats(b, &rules)
}

// OSStatBatch field numbers (api/laggard/v1/osstat.proto).
const (
	osFieldNode    = 1
	osFieldStrings = 4
	osFieldPoints  = 5
	osFieldAbsent  = 6
)

func unmarshalProtoOSStats(b []byte, rules *Rules) (*osstat.Batch, []Refusal, error) {
	partial := rules != nil
	for _, f := range []struct {
		num   protowire.Number
		name  string
		limit int
	}{{osFieldStrings, "strings", MaxBatchStrings}, {osFieldPoints, "points", osstat.MaxPoints}, {osFieldAbsent, "absent", MaxBatchAbsent}} {
		n, err := countField(b, f.num)
		if err != nil {
			return nil, nil, err
		}
		if n > f.limit {
			return nil, nil, fmt.Errorf("%w: more than %d %s in one batch", ErrTooLarge, f.limit, f.name)
		}
	}
	var badStr, badAbsent map[uint32]bool
	if partial {
		var err error
		b, badStr, badAbsent, err = patchInvalidStrings(b, utf8Patch{table: osFieldStrings, header: map[protowire.Number]string{osFieldNode: "node"}, nested: osFieldAbsent})
		if err != nil {
			return nil, nil, err
		}
	}
	var pbb pb.OSStatBatch
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
	str := func(i uint32, field string) (string, error) {
		if i == 0 {
			return "", nil
		}
		if int64(i) >= int64(len(strs)) {
			return "", &signal.FieldError{Field: field, Msg: fmt.Sprintf("string index %d outside the table of %d", i, len(strs))}
		}
		if badStr[i] {
			return "", &signal.FieldError{Field: field, Msg: fmt.Sprintf("strings[%d] is not valid UTF-8", i)}
		}
		return strs[i], nil
	}
	out := &osstat.Batch{Node: pbb.GetNode(), StartNS: pbb.GetStartNs(), EndNS: pbb.GetEndNs()}
	var sv sifter
	if rules != nil {
		sv.rules = *rules
	}
	fail := func(kind string, i int, err error) error {
		if !partial {
			return err
		}
		sv.refuse(kind, i, err)
		return nil
	}
	if len(pbb.Points) > 0 {
		out.Points = make([]osstat.Point, len(pbb.Points))
	}
	for i, pp := range pbb.Points {
		if err := decodeProtoPoint(pp, &out.Points[i], i, str); err != nil {
			if err := fail("points", i, err); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(pbb.Absent) > 0 {
		out.Absent = make([]osstat.Absence, len(pbb.Absent))
	}
	for i, pa := range pbb.Absent {
		path := "absent[" + strconv.Itoa(i) + "]"
		var err error
		switch {
		case pa == nil:
			err = &signal.FieldError{Field: path, Msg: "null absence"}
		case len(pa.ProtoReflect().GetUnknown()) > 0:
			err = unknownField(path, pa.ProtoReflect().GetUnknown())
		case badAbsent[uint32(i)]:
			err = &signal.FieldError{Field: path + ".source", Msg: "not valid UTF-8"}
		default:
			out.Absent[i] = osstat.Absence{Source: pa.GetSource(), Reason: pa.GetReason()}
		}
		if err != nil {
			if err := fail("absent", i, err); err != nil {
				return nil, nil, err
			}
		}
	}
	if !partial {
		if err := out.Validate(); err != nil {
			return nil, nil, prefix("", err)
		}
		return out, nil, nil
	}
	if err := sv.siftOS(out); err != nil {
		return nil, nil, err
	}
	return out, sv.refused, nil
}

// decodeProtoPoint fills p from pp; errors name points[i].field.
func decodeProtoPoint(pp *pb.OSStatPoint, p *osstat.Point, i int, str func(uint32, string) (string, error)) error {
	path := "points[" + strconv.Itoa(i) + "]"
	if pp == nil {
		return &signal.FieldError{Field: path, Msg: "null point"}
	}
	if u := pp.ProtoReflect().GetUnknown(); len(u) > 0 {
		return unknownField(path, u)
	}
	p.Rank, p.CPU, p.Value = int(pp.GetRank()), int(pp.GetCpu()), pp.GetValue()
	var err error
	if p.Name, err = str(pp.GetName(), path+".name"); err != nil {
		return err
	}
	if p.Device, err = str(pp.GetDevice(), path+".device"); err != nil {
		return err
	}
	return nil
}

// MarshalProtoOSStats is the inverse of UnmarshalProtoOSStats.
func MarshalProtoOSStats(b *osstat.Batch) ([]byte, error) {
	return proto.Marshal(OSStatsToProto(b))
}

// OSStatsToProto converts a batch to its protobuf form, interning metric
// and device names.
func OSStatsToProto(b *osstat.Batch) *pb.OSStatBatch {
	st := newStringTable()
	out := &pb.OSStatBatch{Node: b.Node, StartNs: b.StartNS, EndNs: b.EndNS, Points: make([]*pb.OSStatPoint, len(b.Points)), Absent: make([]*pb.OSStatAbsence, len(b.Absent))}
	for i := range b.Points {
		p := &b.Points[i]
		out.Points[i] = &pb.OSStatPoint{Name: st.id(p.Name), Rank: int32(p.Rank), Cpu: int32(p.CPU), Device: st.id(p.Device), Value: p.Value}
	}
	for i := range b.Absent {
		out.Absent[i] = &pb.OSStatAbsence{Source: b.Absent[i].Source, Reason: b.Absent[i].Reason}
	}
	out.Strings = st.strs
	return out
}
