// Package collective is the collective-call signal: one record per rank per
// intercepted communication call (an NCCL top-level call captured by the
// LD_PRELOAD shim, or a torch.distributed call captured by the Python
// client for gloo/CPU jobs), and one record per rank per communicator it
// joined. Greyhound (§4.2 iteration time, §4.3 cross-group comparison),
// SysOM-AI (slow rank by collective entry), KAIR (collective instances
// joining ranks in the step DAG) and Vedrfolnir (algorithm steps) all read
// it.
//
// Identity: a collective *instance* is (Comm, Seq): every member of a
// communicator numbers its calls on it 0, 1, 2, … in issue order, so the
// Seq-th call of each member is the same collective. Timestamps are
// nanoseconds since the Unix epoch on the capturing host's
// CLOCK_REALTIME; cross-host skew is the analysis's problem, not the
// capture's.
package collective

import (
	"fmt"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Op is a collective or point-to-point operation. The zero value is
// invalid so a missing field is caught.
type Op uint8

const (
	OpInvalid Op = iota
	AllReduce
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	Send
	Recv
	Barrier
	numOps
)

var opNames = [numOps]string{"", "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "Send", "Recv", "Barrier"}

// Ops lists the valid operations in code order.
func Ops() []Op {
	out := make([]Op, 0, numOps-1)
	for o := AllReduce; o < numOps; o++ {
		out = append(out, o)
	}
	return out
}

func (o Op) String() string {
	if o < numOps && o != OpInvalid {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is a known operation.
func (o Op) Valid() bool { return o > OpInvalid && o < numOps }

// P2P reports whether o is point-to-point (Send/Recv): Peer names the
// other side and the call has no root.
func (o Op) P2P() bool { return o == Send || o == Recv }

// ParseOp reads an operation name case-insensitively, with or without
// underscores or an "nccl" prefix ("AllReduce", "all_reduce",
// "ncclAllReduce", "allreduce").
func ParseOp(s string) (Op, error) {
	k := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	k = strings.TrimPrefix(k, "nccl")
	for o := AllReduce; o < numOps; o++ {
		if strings.ToLower(opNames[o]) == k {
			return o, nil
		}
	}
	// torch.distributed spellings.
	switch k {
	case "alltoallsingle", "alltoallbase":
		return AllToAll, nil
	case "allgatherbase", "allgatherintotensor":
		return AllGather, nil
	case "reducescattertensor", "reducescatterbase":
		return ReduceScatter, nil
	case "isend":
		return Send, nil
	case "irecv":
		return Recv, nil
	}
	return OpInvalid, fmt.Errorf("unknown collective op %q", signal.Clip(s))
}

func (o Op) MarshalText() ([]byte, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("invalid collective op %d", uint8(o))
	}
	return []byte(opNames[o]), nil
}

func (o *Op) UnmarshalText(b []byte) error {
	v, err := ParseOp(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Comm is one rank's view of a communicator it belongs to, reported once
// when it joins (ncclCommInitRank*, ncclCommSplit, a torch process group).
// The server merges the members' views into the communicator's member
// list (global ranks in communicator-rank order).
type Comm struct {
	// ID is the communicator id, the same on every member: a hash of the
	// ncclUniqueId, or of the parent id and split colour, or the process
	// group's name.
	ID string `json:"id"`
	// Size is the number of members.
	Size int `json:"size"`
	// Rank is the global rank reporting; CommRank its rank inside the
	// communicator.
	Rank     int `json:"rank"`
	CommRank int `json:"comm_rank"`
	// Ranks, when the reporter knows it (torch process groups do), is the
	// full member list in communicator-rank order; otherwise empty and
	// the server assembles it from the members' reports.
	Ranks []int `json:"ranks,omitempty"`
	// Parent is the communicator this one was split from, if any.
	Parent string `json:"parent,omitempty"`
	// Backend is "nccl", "gloo", … (informational).
	Backend string `json:"backend,omitempty"`
	// Host is the reporting rank's host name.
	Host string `json:"host,omitempty"`
}

// Call is one intercepted communication call on one rank.
type Call struct {
	Rank int `json:"rank"`
	PID  int `json:"pid,omitempty"`
	// Comm is the communicator id (Comm.ID).
	Comm string `json:"comm"`
	// Seq numbers this rank's calls on Comm from 0 in issue order; the
	// Seq-th call of every member is the same collective instance.
	Seq int64 `json:"seq"`
	Op  Op    `json:"op"`
	// Bytes is the message size the call moves per rank (count × dtype
	// size; for AllGather the send buffer, for ReduceScatter the receive
	// buffer, as NCCL counts them).
	Bytes int64  `json:"bytes"`
	Count int64  `json:"count,omitempty"`
	Dtype string `json:"dtype,omitempty"`
	// Peer is the other side of a Send/Recv (global rank when known,
	// otherwise communicator rank) and Root the root of a Broadcast or
	// Reduce (communicator rank); -1 when not applicable.
	Peer int `json:"peer"`
	Root int `json:"root"`
	// Stream is an opaque stream handle (0 = default/unknown).
	Stream uint64 `json:"stream,omitempty"`
	// EnterNS / ReturnNS: host timestamps when the call was entered and
	// returned (for NCCL, returned = enqueued; the device work follows).
	EnterNS  int64 `json:"enter_ns"`
	ReturnNS int64 `json:"return_ns"`
	// DevStartNS / DevEndNS: the device execution bracket from CUDA events
	// translated to the host clock, 0 when unknown. For synchronous
	// backends (gloo) the client reports the host bracket here too.
	DevStartNS int64 `json:"dev_start_ns,omitempty"`
	DevEndNS   int64 `json:"dev_end_ns,omitempty"`
	// Step is the training step when the capturer knows it (the Python
	// client does), -1 otherwise; Greyhound never needs it (§4.2 infers
	// iterations from the call sequence), evaluation uses it as truth.
	Step int64 `json:"step"`
	// Grouped is true for calls issued between ncclGroupStart/End.
	Grouped bool `json:"grouped,omitempty"`
}

// Batch is one ingest request for a job: communicator joins and calls,
// plus the drops the capturer counted since its previous batch.
type Batch struct {
	Comms []Comm `json:"comms,omitempty"`
	Calls []Call `json:"calls,omitempty"`
	// Dropped counts calls lost before this batch (full ring, failed
	// ship); any drop marks the analysis telemetry-limited.
	Dropped int64 `json:"dropped,omitempty"`
	// Incarnation is the job incarnation the sending process belongs to
	// (docs/design/roles-and-runs.md); nil: the job's newest. The server
	// stores the batch under it (NamespaceComm).
	Incarnation *int `json:"incarnation,omitempty"`
}

// Bounds on stored values, in the spirit of stagevec's (D1, D5): sums and
// differences over a window must never overflow.
const (
	// MaxBytes bounds a message: 2^44 (16 TiB).
	MaxBytes = int64(1) << 44
	// MaxSeq bounds a sequence number: 2^48.
	MaxSeq = int64(1) << 48
	// MinNS / MaxNS bound timestamps: 2000-01-01 .. 2200-01-01 (the
	// rule every signal shares, signal.CheckTime; ingest also refuses
	// times past its clock's, CheckClock).
	MinNS = signal.MinTimeNS
	MaxNS = signal.MaxTimeNS
	// MaxDurationNS bounds return−enter and dev_end−dev_start: one day.
	MaxDurationNS = int64(86_400) * 1e9
	// MaxIDLen bounds a communicator id and a dtype name.
	MaxIDLen = 128
	// MaxCommSize bounds a communicator's size.
	MaxCommSize = 1 << 20
	// MaxPID bounds a process id (what the store keeps: 2^31−1).
	MaxPID = 1<<31 - 1
)

// Validate checks a call against the job (world may be 0 when the job
// has no declared world size yet) and names the offending field.
func (c *Call) Validate(world int) error {
	if c.Rank < 0 || (world > 0 && c.Rank >= world) || c.Rank >= MaxCommSize {
		return signal.FieldErrorf("rank", "must be in [0, %d), got %d", rankBound(world), c.Rank)
	}
	if c.PID < 0 || c.PID > MaxPID {
		return signal.FieldErrorf("pid", "must be in [0, %d], got %d", MaxPID, c.PID)
	}
	if err := validID("comm", c.Comm, true); err != nil {
		return err
	}
	if c.Seq < 0 || c.Seq > MaxSeq {
		return signal.FieldErrorf("seq", "must be in [0, %d], got %d", MaxSeq, c.Seq)
	}
	if !c.Op.Valid() {
		return signal.FieldErrorf("op", "unknown operation %d", uint8(c.Op))
	}
	if c.Bytes < 0 || c.Bytes > MaxBytes {
		return signal.FieldErrorf("bytes", "must be in [0, %d], got %d", MaxBytes, c.Bytes)
	}
	if c.Count < 0 || c.Count > MaxBytes {
		return signal.FieldErrorf("count", "must be in [0, %d], got %d", MaxBytes, c.Count)
	}
	if err := validID("dtype", c.Dtype, false); err != nil {
		return err
	}
	if c.Peer < -1 || c.Peer >= MaxCommSize {
		return signal.FieldErrorf("peer", "must be -1 or in [0, %d), got %d", MaxCommSize, c.Peer)
	}
	if c.Root < -1 || c.Root >= MaxCommSize {
		return signal.FieldErrorf("root", "must be -1 or in [0, %d), got %d", MaxCommSize, c.Root)
	}
	if err := validBracket("enter_ns", "return_ns", c.EnterNS, c.ReturnNS, true); err != nil {
		return err
	}
	if err := validBracket("dev_start_ns", "dev_end_ns", c.DevStartNS, c.DevEndNS, false); err != nil {
		return err
	}
	if c.Step < -1 || c.Step > MaxSeq {
		return signal.FieldErrorf("step", "must be -1 or in [0, %d], got %d", MaxSeq, c.Step)
	}
	return nil
}

// CheckClock applies the shared time rule's clock bound (signal.CheckTime)
// to every call's timestamps: none may lie more than
// signal.MaxClockSkewNS past nowNS. Validate checks the rest; this is
// separate because it needs the server's clock.
func (b *Batch) CheckClock(nowNS int64) error {
	for i := range b.Calls {
		c := &b.Calls[i]
		for _, f := range []struct {
			name string
			ns   int64
		}{{"enter_ns", c.EnterNS}, {"return_ns", c.ReturnNS}, {"dev_start_ns", c.DevStartNS}, {"dev_end_ns", c.DevEndNS}} {
			if f.ns == 0 && f.name[0] == 'd' {
				continue // no device bracket
			}
			if err := signal.CheckTime(f.name, f.ns, nowNS); err != nil {
				return inRecord("calls", i, err)
			}
		}
	}
	return nil
}

// HasDevice reports whether the call carries a device bracket.
func (c *Call) HasDevice() bool { return c.DevStartNS != 0 && c.DevEndNS != 0 }

// HostNS is the host duration return − enter.
func (c *Call) HostNS() int64 { return c.ReturnNS - c.EnterNS }

// ExecNS is the execution time used by cross-group comparison (Greyhound
// §4.3): the device bracket when known, the host duration otherwise.
func (c *Call) ExecNS() int64 {
	if c.HasDevice() {
		return c.DevEndNS - c.DevStartNS
	}
	return c.HostNS()
}

// Validate checks a communicator report.
func (m *Comm) Validate(world int) error {
	if err := validID("id", m.ID, true); err != nil {
		return err
	}
	if m.Size < 1 || m.Size > MaxCommSize || (world > 0 && m.Size > world) {
		return signal.FieldErrorf("size", "must be in [1, %d], got %d", rankBound(world), m.Size)
	}
	if m.Rank < 0 || (world > 0 && m.Rank >= world) || m.Rank >= MaxCommSize {
		return signal.FieldErrorf("rank", "must be in [0, %d), got %d", rankBound(world), m.Rank)
	}
	if m.CommRank < 0 || m.CommRank >= m.Size {
		return signal.FieldErrorf("comm_rank", "must be in [0, %d), got %d", m.Size, m.CommRank)
	}
	if len(m.Ranks) != 0 {
		if len(m.Ranks) != m.Size {
			return signal.FieldErrorf("ranks", "has %d members but size is %d", len(m.Ranks), m.Size)
		}
		seen := make(map[int]bool, len(m.Ranks))
		for i, r := range m.Ranks {
			if r < 0 || (world > 0 && r >= world) || r >= MaxCommSize {
				return signal.FieldErrorf("ranks", "member %d: rank %d out of range", i, r)
			}
			if seen[r] {
				return signal.FieldErrorf("ranks", "rank %d listed twice", r)
			}
			seen[r] = true
		}
		if m.Ranks[m.CommRank] != m.Rank {
			return signal.FieldErrorf("ranks", "member %d is rank %d, but the reporter is rank %d with comm_rank %d", m.CommRank, m.Ranks[m.CommRank], m.Rank, m.CommRank)
		}
	}
	if err := validID("parent", m.Parent, false); err != nil {
		return err
	}
	if err := validID("backend", m.Backend, false); err != nil {
		return err
	}
	if len(m.Host) > 255 {
		return signal.FieldErrorf("host", "longer than 255 bytes")
	}
	return nil
}

// Validate checks every record of the batch; the error names the record.
func (b *Batch) Validate(world int) error {
	if b.Dropped < 0 || b.Dropped > int64(1)<<40 {
		return signal.FieldErrorf("dropped", "must be in [0, 2^40], got %d", b.Dropped)
	}
	for i := range b.Comms {
		if err := b.Comms[i].Validate(world); err != nil {
			return inRecord("comms", i, err)
		}
	}
	for i := range b.Calls {
		if err := b.Calls[i].Validate(world); err != nil {
			return inRecord("calls", i, err)
		}
	}
	return nil
}

// inRecord puts the record's path in front of a FieldError's field, so the
// field an API error names is the full path ("calls[3].enter_ns").
func inRecord(list string, i int, err error) error {
	if fe, ok := err.(*signal.FieldError); ok {
		return &signal.FieldError{Field: fmt.Sprintf("%s[%d].%s", list, i, fe.Field), Msg: fe.Msg}
	}
	return fmt.Errorf("%s[%d]: %w", list, i, err)
}

// rankBound is the exclusive bound of a rank: the world size when known.
func rankBound(world int) int {
	if world > 0 {
		return min(world, MaxCommSize)
	}
	return MaxCommSize
}

func validID(field, s string, required bool) error {
	if s == "" {
		if required {
			return signal.FieldErrorf(field, "is required")
		}
		return nil
	}
	if len(s) > MaxIDLen {
		return signal.FieldErrorf(field, "longer than %d bytes", MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return signal.FieldErrorf(field, "byte %d is not printable ASCII", i)
		}
	}
	return nil
}

func validBracket(fa, fb string, a, b int64, required bool) error {
	if a == 0 && b == 0 && !required {
		return nil
	}
	if a < MinNS || a > MaxNS {
		return signal.FieldErrorf(fa, "must be a Unix-epoch nanosecond time in [%d, %d], got %d", MinNS, MaxNS, a)
	}
	if b < a || b-a > MaxDurationNS {
		return signal.FieldErrorf(fb, "must be in [%s, %s + 1 day], got %d", fa, fa, b)
	}
	return nil
}
