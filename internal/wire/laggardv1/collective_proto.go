package laggardv1

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// UnmarshalProtoCollectives decodes a laggard.v1.CollectiveBatch with the
// same contract as UnmarshalJSONCollectives: record caps before decoding,
// unknown fields rejected, every record validated against world (0: not
// known), errors naming calls[i].field.
func UnmarshalProtoCollectives(b []byte, world int) (*collective.Batch, error) {
	return UnmarshalProtoCollectivesAt(b, fixedWorld(world))
}

// UnmarshalProtoCollectivesAt is UnmarshalProtoCollectives validating the
// batch against the incarnation it names.
func UnmarshalProtoCollectivesAt(b []byte, at WorldAt) (*collective.Batch, error) {
	for _, f := range []struct {
		num   int
		name  string
		limit int
	}{{1, "comms", MaxBatchComms}, {2, "calls", MaxBatchCalls}} {
		n, err := countField(b, protowire.Number(f.num))
		if err != nil {
			return nil, err
		}
		if n > f.limit {
			return nil, fmt.Errorf("%w: more than %d %s in one batch", ErrTooLarge, f.limit, f.name)
		}
	}
	var pbb pb.CollectiveBatch
	if err := proto.Unmarshal(b, &pbb); err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid protobuf: " + clipMsg(err.Error())}
	}
	if u := pbb.ProtoReflect().GetUnknown(); len(u) > 0 {
		return nil, unknownField("", u)
	}
	out := &collective.Batch{Dropped: pbb.GetDropped()}
	if pbb.Incarnation != nil {
		if *pbb.Incarnation > signal.MaxIncarnation {
			return nil, &signal.FieldError{Field: "incarnation", Msg: fmt.Sprintf("must be in [0, %d], got %d", signal.MaxIncarnation, *pbb.Incarnation)}
		}
		n := int(*pbb.Incarnation)
		out.Incarnation = &n
	}
	if len(pbb.Comms) > 0 {
		out.Comms = make([]collective.Comm, len(pbb.Comms))
	}
	for i, pc := range pbb.Comms {
		path := "comms[" + strconv.Itoa(i) + "]"
		if pc == nil {
			return nil, &signal.FieldError{Field: path, Msg: "null communicator"}
		}
		if u := pc.ProtoReflect().GetUnknown(); len(u) > 0 {
			return nil, unknownField(path, u)
		}
		c := &out.Comms[i]
		*c = collective.Comm{ID: pc.GetId(), Size: int(pc.GetSize()), Rank: int(pc.GetRank()), CommRank: int(pc.GetCommRank()),
			Parent: pc.GetParent(), Backend: pc.GetBackend(), Host: pc.GetHost()}
		if len(pc.Ranks) > 0 {
			c.Ranks = make([]int, len(pc.Ranks))
			for j, r := range pc.Ranks {
				c.Ranks[j] = int(r)
			}
		}
	}
	if len(pbb.Calls) > 0 {
		out.Calls = make([]collective.Call, len(pbb.Calls))
	}
	var lastOp string
	var op collective.Op
	for i, pc := range pbb.Calls {
		path := "calls[" + strconv.Itoa(i) + "]"
		if pc == nil {
			return nil, &signal.FieldError{Field: path, Msg: "null call"}
		}
		if u := pc.ProtoReflect().GetUnknown(); len(u) > 0 {
			return nil, unknownField(path, u)
		}
		if s := pc.GetOp(); s != lastOp || i == 0 { // ops come in runs
			var err error
			if op, err = collective.ParseOp(s); err != nil {
				return nil, &signal.FieldError{Field: path + ".op", Msg: err.Error()}
			}
			lastOp = s
		}
		out.Calls[i] = collective.Call{Rank: int(pc.GetRank()), PID: int(pc.GetPid()), Comm: pc.GetComm(), Seq: pc.GetSeq(), Op: op,
			Bytes: pc.GetBytes(), Count: pc.GetCount(), Dtype: pc.GetDtype(), Peer: -1, Root: -1, Stream: pc.GetStream(),
			EnterNS: pc.GetEnterNs(), ReturnNS: pc.GetReturnNs(), DevStartNS: pc.GetDevStartNs(), DevEndNS: pc.GetDevEndNs(),
			Step: -1, Grouped: pc.GetGrouped()}
		if pc.Peer != nil {
			out.Calls[i].Peer = int(pc.GetPeer())
		}
		if pc.Root != nil {
			out.Calls[i].Root = int(pc.GetRoot())
		}
		if pc.Step != nil {
			out.Calls[i].Step = pc.GetStep()
		}
	}
	return validateAt(out, at)
}

// MarshalProtoCollectives is the inverse of UnmarshalProtoCollectives, for
// the agent and tests. Peer, Root and Step of -1 are left absent.
func MarshalProtoCollectives(b *collective.Batch) ([]byte, error) {
	return proto.Marshal(CollectivesToProto(b))
}

// CollectivesToProto converts a batch to its protobuf form.
func CollectivesToProto(b *collective.Batch) *pb.CollectiveBatch {
	out := &pb.CollectiveBatch{Dropped: b.Dropped, Comms: make([]*pb.Comm, len(b.Comms)), Calls: make([]*pb.Call, len(b.Calls))}
	if b.Incarnation != nil && *b.Incarnation >= 0 {
		out.Incarnation = proto.Uint32(uint32(*b.Incarnation))
	}
	for i := range b.Comms {
		c := &b.Comms[i]
		pc := &pb.Comm{Id: c.ID, Size: int32(c.Size), Rank: int32(c.Rank), CommRank: int32(c.CommRank), Parent: c.Parent, Backend: c.Backend, Host: c.Host}
		if len(c.Ranks) > 0 {
			pc.Ranks = make([]int32, len(c.Ranks))
			for j, r := range c.Ranks {
				pc.Ranks[j] = int32(r)
			}
		}
		out.Comms[i] = pc
	}
	for i := range b.Calls {
		c := &b.Calls[i]
		pc := &pb.Call{Rank: int32(c.Rank), Pid: int32(c.PID), Comm: c.Comm, Seq: c.Seq, Op: c.Op.String(), Bytes: c.Bytes, Count: c.Count,
			Dtype: c.Dtype, Stream: c.Stream, EnterNs: c.EnterNS, ReturnNs: c.ReturnNS, DevStartNs: c.DevStartNS, DevEndNs: c.DevEndNS, Grouped: c.Grouped}
		if c.Peer != -1 {
			pc.Peer = proto.Int32(int32(c.Peer))
		}
		if c.Root != -1 {
			pc.Root = proto.Int32(int32(c.Root))
		}
		if c.Step != -1 {
			pc.Step = proto.Int64(c.Step)
		}
		out.Calls[i] = pc
	}
	return out
}
