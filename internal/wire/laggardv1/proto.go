package laggardv1

import (
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// DecodeProtoBatch decodes a laggard.v1.VectorBatch from r with the same
// contract as DecodeJSONBatch: at most limit bytes, every vector validated
// against job, errors naming vectors[i].field.
//
// Unknown fields are rejected, as in JSON: a newer client's measurement
// silently dropped here would skew the analysis without anyone noticing.
func DecodeProtoBatch(r io.Reader, job *signal.Job, limit int64) ([]stagevec.Vector, error) {
	return decodeBatch(r, job, limit, UnmarshalProtoBatch)
}

// UnmarshalProtoBatch is DecodeProtoBatch over an in-memory body; a
// batch naming an incarnation is read against job as well (the API uses
// UnmarshalProtoBatchAt).
func UnmarshalProtoBatch(b []byte, job *signal.Job) ([]stagevec.Vector, error) {
	bt, err := UnmarshalProtoBatchAt(b, func(int) (*signal.Job, error) { return job, nil })
	return bt.Vectors, err
}

// UnmarshalProtoBatchAt decodes a laggard.v1.VectorBatch and validates
// every vector against the job as the incarnation it names saw it (see
// UnmarshalJSONBatchAt).
func UnmarshalProtoBatchAt(b []byte, at JobAt) (Batch, error) {
	bt := Batch{Incarnation: -1}
	n, err := countField(b, 1)
	if err != nil {
		return bt, err
	}
	if n > MaxBatchVectors {
		return bt, fmt.Errorf("%w: more than %d vectors in one batch", ErrTooLarge, MaxBatchVectors)
	}
	var batch pb.VectorBatch
	if err := proto.Unmarshal(b, &batch); err != nil {
		return bt, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + clipMsg(err.Error())}
	}
	if u := batch.ProtoReflect().GetUnknown(); len(u) > 0 {
		return bt, unknownField("", u)
	}
	if batch.Incarnation != nil {
		if *batch.Incarnation > signal.MaxIncarnation {
			return bt, &signal.FieldError{Field: "incarnation", Msg: fmt.Sprintf("must be in [0, %d], got %d", signal.MaxIncarnation, *batch.Incarnation)}
		}
		bt.Incarnation = int(*batch.Incarnation)
	}
	job, err := at(bt.Incarnation)
	if err != nil {
		return bt, err
	}
	out := make([]stagevec.Vector, len(batch.Vectors))
	for i, pv := range batch.Vectors {
		path := "vectors[" + strconv.Itoa(i) + "]"
		if err := fromProto(pv, &out[i], path); err != nil {
			return Batch{Incarnation: bt.Incarnation}, err
		}
		if err := out[i].Validate(job); err != nil {
			return Batch{Incarnation: bt.Incarnation}, prefix(path, err)
		}
	}
	bt.Vectors = out
	return bt, nil
}

// countField counts top-level records of field num without decoding them,
// so a batch's record cap holds before proto.Unmarshal allocates one
// message each.
func countField(b []byte, num protowire.Number) (int, error) {
	n := 0
	for len(b) > 0 {
		f, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + protowire.ParseError(l).Error()}
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(f, typ, b)
		if l < 0 {
			return 0, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + protowire.ParseError(l).Error()}
		}
		b = b[l:]
		if f == num {
			n++
		}
	}
	return n, nil
}

// fromProto copies pv into v. The durations slice is shared, not copied:
// the decoded message is never used again.
func fromProto(pv *pb.Vector, v *stagevec.Vector, path string) error {
	if pv == nil {
		return &signal.FieldError{Field: path, Msg: "null vector"}
	}
	if u := pv.ProtoReflect().GetUnknown(); len(u) > 0 {
		return unknownField(path, u)
	}
	*v = stagevec.Vector{
		Step:      pv.GetStep(),
		Rank:      int(pv.GetRank()),
		Micro:     int(pv.GetMicro()),
		Durations: pv.GetDurationsMs(),
		WallMS:    pv.GetWallMs(),
		DataLead:  int(pv.GetDataLead()),
		Dropped:   pv.GetDropped(),
		Nested:    int(pv.GetNested()),
		OrderHash: pv.GetOrderHash(),
	}
	if len(pv.Probes) > 0 {
		v.Probes = make(map[string]stagevec.Probe, len(pv.Probes))
		for name, p := range pv.Probes {
			if p == nil {
				p = &pb.Probe{}
			}
			if u := p.ProtoReflect().GetUnknown(); len(u) > 0 {
				return unknownField(path+".probes["+strconv.Quote(signal.Clip(name))+"]", u)
			}
			v.Probes[name] = stagevec.Probe{Value: p.GetValueMs(), Ready: p.GetReady()}
		}
	}
	return nil
}

func unknownField(path string, raw []byte) error {
	num, _, _ := protowire.ConsumeTag(raw)
	return prefix(path, &signal.FieldError{Msg: fmt.Sprintf("unknown protobuf field number %d", num)})
}

// EncodeProtoBatch is the inverse of DecodeProtoBatch, for clients and
// tests.
func EncodeProtoBatch(vs []stagevec.Vector) ([]byte, error) {
	batch := &pb.VectorBatch{Vectors: make([]*pb.Vector, len(vs))}
	for i := range vs {
		batch.Vectors[i] = ToProto(&vs[i])
	}
	return proto.Marshal(batch)
}

// ToProto converts one vector to its protobuf form.
func ToProto(v *stagevec.Vector) *pb.Vector {
	pv := &pb.Vector{
		Step:        v.Step,
		Rank:        int32(v.Rank),
		Micro:       int32(v.Micro),
		DurationsMs: v.Durations,
		WallMs:      v.WallMS,
		DataLead:    int32(v.DataLead),
		Dropped:     v.Dropped,
		Nested:      int32(v.Nested),
		OrderHash:   v.OrderHash,
	}
	if len(v.Probes) > 0 {
		pv.Probes = make(map[string]*pb.Probe, len(v.Probes))
		for name, p := range v.Probes {
			pv.Probes[name] = &pb.Probe{ValueMs: p.Value, Ready: p.Ready}
		}
	}
	return pv
}
