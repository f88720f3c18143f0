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
	for _, f := range []struct {
		num   protowire.Number
		name  string
		limit int
	}{{4, "strings", MaxBatchStrings}, {5, "points", osstat.MaxPoints}, {6, "absent", MaxBatchAbsent}} {
		n, err := countField(b, f.num)
		if err != nil {
			return nil, err
		}
		if n > f.limit {
			return nil, fmt.Errorf("%w: more than %d %s in one batch", ErrTooLarge, f.limit, f.name)
		}
	}
	var pbb pb.OSStatBatch
	if err := proto.Unmarshal(b, &pbb); err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + clipMsg(err.Error())}
	}
	if u := pbb.ProtoReflect().GetUnknown(); len(u) > 0 {
		return nil, unknownField("", u)
	}
	strs := pbb.GetStrings()
	if len(strs) > 0 && strs[0] != "" {
		return nil, &signal.FieldError{Field: "strings[0]", Msg: "must be the empty string"}
	}
	str := func(i uint32, field string) (string, error) {
		if i == 0 {
			return "", nil
		}
		if int64(i) >= int64(len(strs)) {
			return "", &signal.FieldError{Field: field, Msg: fmt.Sprintf("string index %d outside the table of %d", i, len(strs))}
		}
		return strs[i], nil
	}
	out := &osstat.Batch{Node: pbb.GetNode(), StartNS: pbb.GetStartNs(), EndNS: pbb.GetEndNs()}
	if len(pbb.Points) > 0 {
		out.Points = make([]osstat.Point, len(pbb.Points))
	}
	var err error
	for i, pp := range pbb.Points {
		path := "points[" + strconv.Itoa(i) + "]"
		if pp == nil {
			return nil, &signal.FieldError{Field: path, Msg: "null point"}
		}
		if u := pp.ProtoReflect().GetUnknown(); len(u) > 0 {
			return nil, unknownField(path, u)
		}
		p := &out.Points[i]
		p.Rank, p.CPU, p.Value = int(pp.GetRank()), int(pp.GetCpu()), pp.GetValue()
		if p.Name, err = str(pp.GetName(), path+".name"); err != nil {
			return nil, err
		}
		if p.Device, err = str(pp.GetDevice(), path+".device"); err != nil {
			return nil, err
		}
	}
	if len(pbb.Absent) > 0 {
		out.Absent = make([]osstat.Absence, len(pbb.Absent))
	}
	for i, pa := range pbb.Absent {
		path := "absent[" + strconv.Itoa(i) + "]"
		if pa == nil {
			return nil, &signal.FieldError{Field: path, Msg: "null absence"}
		}
		if u := pa.ProtoReflect().GetUnknown(); len(u) > 0 {
			return nil, unknownField(path, u)
		}
		out.Absent[i] = osstat.Absence{Source: pa.GetSource(), Reason: pa.GetReason()}
	}
	if err := out.Validate(); err != nil {
		return nil, prefix("", err)
	}
	return out, nil
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
