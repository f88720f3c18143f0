package nccl

import (
	"fmt"
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// dtypeNames are NCCL's ncclDataType_t values in order (nccl_abi.h).
var dtypeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"}

// DtypeName names an ncclDataType_t value ("" for none, "dtypeN" for one
// this agent does not know).
func DtypeName(d uint8) string {
	switch {
	case int(d) < len(dtypeNames):
		return dtypeNames[d]
	case d == 255:
		return ""
	}
	return fmt.Sprintf("dtype%d", d)
}

// Origin is what the ring header says about the producer: it completes
// each record into a collective.Call.
type Origin struct {
	PID  int
	Rank int // global rank; -1: take the communicator rank
	Host string
}

// IsCall reports whether the record is an intercepted call (not a
// communicator lifecycle record).
func (r *Record) IsCall() bool { return r.Op >= 1 && r.Op <= 8 }

// IsComm reports whether the record announces a communicator.
func (r *Record) IsComm() bool {
	return r.Op == OpCommInit || r.Op == OpCommInitAll || r.Op == OpCommSplit
}

func (o Origin) rank(commRank int32) int {
	if o.Rank >= 0 {
		return o.Rank
	}
	// One process driving several devices (ncclCommInitAll) has no $RANK:
	// its ranks are the communicator's.
	return int(commRank)
}

// Call translates a call record; the error names the field that is
// unusable (the record is then skipped and counted, never shipped).
func (o Origin) Call(r *Record) (collective.Call, error) {
	if !r.IsCall() {
		return collective.Call{}, fmt.Errorf("op: %d is not a call", r.Op)
	}
	if r.CommID == 0 || r.Seq < 0 {
		return collective.Call{}, fmt.Errorf("comm: the shim could not number calls on this communicator (table full)")
	}
	c := collective.Call{
		Rank:     o.rank(r.CommRank),
		PID:      o.PID,
		Comm:     CommID(r.CommID),
		Seq:      r.Seq,
		Op:       collective.Op(r.Op),
		Bytes:    int64(min(r.Bytes, 1<<62)),
		Count:    int64(min(r.Count, 1<<62)),
		Dtype:    DtypeName(r.Dtype),
		Peer:     int(r.Peer),
		Root:     int(r.Root),
		Stream:   r.Stream,
		EnterNS:  r.EnterNS,
		ReturnNS: r.ReturnNS,
		Step:     -1,
		Grouped:  r.Flags&FlagGrouped != 0,
	}
	if r.Flags&FlagDevice != 0 {
		c.DevStartNS, c.DevEndNS = r.DevStartNS, r.DevEndNS
	}
	if c.Peer < -1 {
		c.Peer = -1
	}
	if r.Op == uint16(collective.Send) || r.Op == uint16(collective.Recv) {
		// Send/Recv are numbered per directed pair (record.h seq), so
		// their instance is (pair comm, seq): send k from A to B on A is
		// recv k from A on B (docs/format/ncclshim-ring.md).
		src, dst, err := p2pEnds(r)
		if err != nil {
			return collective.Call{}, err
		}
		c.Comm = PairID(r.CommID, src, dst)
	}
	if c.Root < -1 {
		c.Root = -1
	}
	if err := c.Validate(0); err != nil {
		return collective.Call{}, err
	}
	return c, nil
}

// Comm translates a communicator record.
func (o Origin) Comm(r *Record) (collective.Comm, error) {
	if !r.IsComm() {
		return collective.Comm{}, fmt.Errorf("op: %d does not announce a communicator", r.Op)
	}
	m := collective.Comm{
		ID:       CommID(r.CommID),
		Size:     int(r.NRanks),
		Rank:     o.rank(r.CommRank),
		CommRank: int(r.CommRank),
		Backend:  "nccl",
		Host:     o.Host,
	}
	if r.Op == OpCommSplit && r.Aux != 0 {
		m.Parent = CommID(r.Aux)
	}
	if err := m.Validate(0); err != nil {
		return collective.Comm{}, err
	}
	return m, nil
}

// PairID is the comm id of the directed point-to-point pair src→dst
// (communicator ranks) under parent: "<parent>-p2p-<src>-<dst>", the
// scheme the Python client uses too (contracts §0), so Send/Recv never
// shift the numbering of the parent's collectives.
func PairID(parent uint64, src, dst int) string {
	return CommID(parent) + "-p2p-" + strconv.Itoa(src) + "-" + strconv.Itoa(dst)
}

// p2pEnds returns a Send/Recv record's (src, dst) in communicator ranks.
func p2pEnds(r *Record) (src, dst int, err error) {
	if r.CommRank < 0 || r.Peer < 0 {
		return 0, 0, fmt.Errorf("peer: a Send/Recv needs its own and its peer's communicator rank (comm_rank %d, peer %d)", r.CommRank, r.Peer)
	}
	if r.Op == uint16(collective.Send) {
		return int(r.CommRank), int(r.Peer), nil
	}
	return int(r.Peer), int(r.CommRank), nil
}

// PairComm is the two-member communicator record of a Send/Recv record's
// directed pair: comm rank 0 is the sender, 1 the receiver.
func (o Origin) PairComm(r *Record) (collective.Comm, error) {
	src, dst, err := p2pEnds(r)
	if err != nil {
		return collective.Comm{}, err
	}
	m := collective.Comm{
		ID:       PairID(r.CommID, src, dst),
		Size:     2,
		Rank:     o.rank(r.CommRank),
		Backend:  "nccl",
		Host:     o.Host,
		Parent:   CommID(r.CommID),
		CommRank: 0,
	}
	if r.Op == uint16(collective.Recv) {
		m.CommRank = 1
	}
	if err := m.Validate(0); err != nil {
		return collective.Comm{}, err
	}
	return m, nil
}
