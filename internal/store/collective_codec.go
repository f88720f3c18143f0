package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Value codecs of the collective keyspace; the byte layout is specified in
// docs/format/collective.md. The key holds (rank, enter_ns, comm, seq), so
// a call value is only what varies per call, as varints relative to
// enter_ns: ~12 bytes for a typical host-only AllReduce. Hand-rolled for
// the same reason as the vector codec (codec.go): ingest targets a million
// calls a second and a scan decodes every call of a window.

const (
	callVersion = 1
	commVersion = 2 // header only; members are keys of their own

	flagGrouped = 1 << 0
	flagDevice  = 1 << 1
	flagCount   = 1 << 2
	flagDtype   = 1 << 3
	flagPID     = 1 << 4
	flagStream  = 1 << 5
	flagsKnown  = 1<<6 - 1

	maxDtypeLen = collective.MaxIDLen
	maxPID      = collective.MaxPID
)

// checkCall reports what the key layout or the codec cannot represent,
// naming the field as the HTTP API does. It is the store's own guard: the
// wire decoders run collective.Call.Validate, which is stricter.
func checkCall(c *collective.Call) error {
	switch {
	case c.Rank < 0 || c.Rank > maxRank:
		return signal.FieldErrorf("rank", "must be in [0, %d], got %d", int64(maxRank), c.Rank)
	case c.Comm == "" || len(c.Comm) > collective.MaxIDLen:
		return signal.FieldErrorf("comm", "must be 1..%d bytes", collective.MaxIDLen)
	case c.Seq < 0 || c.Seq > collective.MaxSeq:
		return signal.FieldErrorf("seq", "must be in [0, %d], got %d", collective.MaxSeq, c.Seq)
	case !c.Op.Valid():
		return signal.FieldErrorf("op", "unknown operation %d", uint8(c.Op))
	case c.Bytes < 0 || c.Bytes > collective.MaxBytes:
		return signal.FieldErrorf("bytes", "must be in [0, %d], got %d", collective.MaxBytes, c.Bytes)
	case c.Count < 0 || c.Count > collective.MaxBytes:
		return signal.FieldErrorf("count", "must be in [0, %d], got %d", collective.MaxBytes, c.Count)
	case len(c.Dtype) > maxDtypeLen:
		return signal.FieldErrorf("dtype", "longer than %d bytes", maxDtypeLen)
	case c.PID < 0 || c.PID > maxPID:
		return signal.FieldErrorf("pid", "must be in [0, %d], got %d", maxPID, c.PID)
	case c.Peer < -1 || c.Peer >= collective.MaxCommSize:
		return signal.FieldErrorf("peer", "must be -1 or in [0, %d), got %d", collective.MaxCommSize, c.Peer)
	case c.Root < -1 || c.Root >= collective.MaxCommSize:
		return signal.FieldErrorf("root", "must be -1 or in [0, %d), got %d", collective.MaxCommSize, c.Root)
	case c.Step < -1 || c.Step > collective.MaxSeq:
		return signal.FieldErrorf("step", "must be -1 or in [0, %d], got %d", collective.MaxSeq, c.Step)
	case c.EnterNS < collective.MinNS || c.EnterNS > collective.MaxNS:
		return signal.FieldErrorf("enter_ns", "must be in [%d, %d], got %d", collective.MinNS, collective.MaxNS, c.EnterNS)
	case c.ReturnNS < c.EnterNS || c.ReturnNS-c.EnterNS > collective.MaxDurationNS:
		return signal.FieldErrorf("return_ns", "must be in [enter_ns, enter_ns + 1 day], got %d", c.ReturnNS)
	}
	if c.DevStartNS != 0 || c.DevEndNS != 0 {
		if c.DevStartNS < collective.MinNS || c.DevStartNS > collective.MaxNS {
			return signal.FieldErrorf("dev_start_ns", "must be 0 or in [%d, %d], got %d", collective.MinNS, collective.MaxNS, c.DevStartNS)
		}
		if c.DevEndNS < c.DevStartNS || c.DevEndNS-c.DevStartNS > collective.MaxDurationNS {
			return signal.FieldErrorf("dev_end_ns", "must be in [dev_start_ns, dev_start_ns + 1 day], got %d", c.DevEndNS)
		}
	}
	return nil
}

// appendCall encodes the value of c (already checked by checkCall).
func appendCall(dst []byte, c *collective.Call) []byte {
	var flags byte
	if c.Grouped {
		flags |= flagGrouped
	}
	if c.DevStartNS != 0 || c.DevEndNS != 0 {
		flags |= flagDevice
	}
	if c.Count != 0 {
		flags |= flagCount
	}
	if c.Dtype != "" {
		flags |= flagDtype
	}
	if c.PID != 0 {
		flags |= flagPID
	}
	if c.Stream != 0 {
		flags |= flagStream
	}
	dst = append(dst, callVersion, flags, byte(c.Op))
	dst = binary.AppendUvarint(dst, uint64(c.ReturnNS-c.EnterNS))
	dst = binary.AppendUvarint(dst, uint64(c.Bytes))
	dst = binary.AppendUvarint(dst, uint64(c.Peer+1))
	dst = binary.AppendUvarint(dst, uint64(c.Root+1))
	dst = binary.AppendUvarint(dst, uint64(c.Step+1))
	if flags&flagCount != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.Count))
	}
	if flags&flagDtype != 0 {
		dst = append(dst, byte(len(c.Dtype)))
		dst = append(dst, c.Dtype...)
	}
	if flags&flagPID != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.PID))
	}
	if flags&flagStream != 0 {
		dst = binary.AppendUvarint(dst, c.Stream)
	}
	if flags&flagDevice != 0 {
		dst = binary.AppendVarint(dst, c.DevStartNS-c.EnterNS)
		dst = binary.AppendUvarint(dst, uint64(c.DevEndNS-c.DevStartNS))
	}
	return dst
}

// callReader reads a call value. dtypes interns dtype names so a scan
// does not allocate a string per call. Not safe for concurrent use.
type callReader struct {
	dtypes map[string]string
}

// decode fills c's payload fields from b; the key's fields (Rank,
// EnterNS, Comm, Seq) must already be set, since times are relative to
// EnterNS. It never panics: malformed or out-of-range input is an error
// wrapping ErrCorrupt, and whatever it accepts passes checkCall.
func (d *callReader) decode(b []byte, c *collective.Call) error {
	if c.EnterNS < collective.MinNS || c.EnterNS > collective.MaxNS {
		return corrupt("call key enter_ns %d out of range", c.EnterNS)
	}
	r := byteReader{b: b}
	ver, flags, op := r.byte(), r.byte(), r.byte()
	if r.err != nil {
		return corrupt("call value is %d bytes", len(b))
	}
	if ver != callVersion {
		return corrupt("call value version %d, want %d", ver, callVersion)
	}
	if flags&^flagsKnown != 0 {
		return corrupt("unknown call flags %#x", flags)
	}
	c.Op = collective.Op(op)
	c.Grouped = flags&flagGrouped != 0
	c.ReturnNS = c.EnterNS + int64(r.uvarint(uint64(collective.MaxDurationNS)))
	c.Bytes = int64(r.uvarint(uint64(collective.MaxBytes)))
	c.Peer = int(r.uvarint(collective.MaxCommSize)) - 1
	c.Root = int(r.uvarint(collective.MaxCommSize)) - 1
	c.Step = int64(r.uvarint(uint64(collective.MaxSeq)+1)) - 1
	c.Count, c.Dtype, c.PID, c.Stream, c.DevStartNS, c.DevEndNS = 0, "", 0, 0, 0, 0
	if flags&flagCount != 0 {
		c.Count = int64(r.uvarint(uint64(collective.MaxBytes)))
	}
	if flags&flagDtype != 0 {
		n := int(r.byte())
		if n == 0 && r.err == nil { // the flag marks a non-empty dtype
			return corrupt("dtype flag with an empty dtype")
		}
		c.Dtype = d.intern(r.bytes(n))
	}
	if flags&flagPID != 0 {
		c.PID = int(r.uvarint(maxPID))
	}
	if flags&flagStream != 0 {
		c.Stream = r.uvarint(math.MaxUint64)
	}
	if flags&flagDevice != 0 {
		// Bounded so the sum cannot overflow; checkCall then bounds the
		// result.
		off := r.varint(collective.MaxNS - collective.MinNS)
		c.DevStartNS = c.EnterNS + off
		c.DevEndNS = c.DevStartNS + int64(r.uvarint(uint64(collective.MaxDurationNS)))
	}
	if r.err != nil {
		return fmt.Errorf("%w: call value: %v", ErrCorrupt, r.err)
	}
	if len(r.b) != 0 {
		return corrupt("%d trailing bytes after the call value", len(r.b))
	}
	if err := checkCall(c); err != nil {
		return fmt.Errorf("%w: call value: %v", ErrCorrupt, err)
	}
	return nil
}

func (d *callReader) intern(b []byte) string {
	if s, ok := d.dtypes[string(b)]; ok { // no allocation: map lookup by []byte conversion
		return s
	}
	s := string(b)
	if d.dtypes == nil {
		d.dtypes = map[string]string{}
	}
	if len(d.dtypes) < 256 { // bounded: stored data is outside input
		d.dtypes[s] = s
	}
	return s
}

// commRec is one communicator: its header as stored under
// m/<job>\x00<comm u32> and the members known so far, each stored under
// m/<job>\x00<comm u32><comm_rank u32>. Members are held sparsely (two
// maps) while some are unknown, so a reported size costs nothing until
// its members report; once all are known they are kept densely, in
// communicator-rank order, and the maps dropped.
type commRec struct {
	ID      string
	Size    int
	Parent  string
	Backend string

	members map[int32]int32 // comm_rank → global rank, while incomplete
	at      map[int32]int32 // global rank → comm_rank, while incomplete
	dense   []int32         // every member, once complete
}

// reported is false for a communicator only seen in calls so far.
func (m *commRec) reported() bool { return m.Size > 0 }

// header is m without its members.
func (m *commRec) header() commRec {
	return commRec{ID: m.ID, Size: m.Size, Parent: m.Parent, Backend: m.Backend}
}

// setHeader replaces m's header fields, keeping its members.
func (m *commRec) setHeader(h commRec) {
	m.ID, m.Size, m.Parent, m.Backend = h.ID, h.Size, h.Parent, h.Backend
}

// rankAt is the global rank at communicator rank cr, if known.
func (m *commRec) rankAt(cr int32) (int32, bool) {
	if m.dense != nil {
		if cr >= 0 && int(cr) < len(m.dense) {
			return m.dense[cr], true
		}
		return 0, false
	}
	r, ok := m.members[cr]
	return r, ok
}

// commRankOf is the communicator rank of global rank r, if known.
func (m *commRec) commRankOf(r int32) (int32, bool) {
	if m.dense != nil {
		i := slices.Index(m.dense, r)
		return int32(i), i >= 0
	}
	cr, ok := m.at[r]
	return cr, ok
}

// add records rank at cr (both unknown so far); the last member makes
// the list dense.
func (m *commRec) add(cr, rank int32) {
	if m.members == nil {
		m.members, m.at = map[int32]int32{}, map[int32]int32{}
	}
	m.members[cr], m.at[rank] = rank, cr
	if len(m.members) == m.Size {
		m.dense = make([]int32, m.Size)
		for c, r := range m.members {
			m.dense[c] = r
		}
		m.members, m.at = nil, nil
	}
}

// appendComm encodes m's header.
func appendComm(dst []byte, m *commRec) []byte {
	dst = append(dst, commVersion)
	for _, s := range []string{m.ID, m.Parent, m.Backend} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return binary.AppendUvarint(dst, uint64(m.Size))
}

// decodeComm decodes a communicator header; errors wrap ErrCorrupt.
func decodeComm(b []byte) (commRec, error) {
	r := byteReader{b: b}
	var m commRec
	if v := r.byte(); r.err == nil && v != commVersion {
		return m, corrupt("communicator value version %d, want %d", v, commVersion)
	}
	var strs [3]string
	for i := range strs {
		strs[i] = string(r.bytes(int(r.uvarint(collective.MaxIDLen))))
	}
	m.ID, m.Parent, m.Backend = strs[0], strs[1], strs[2]
	m.Size = int(r.uvarint(collective.MaxCommSize))
	switch {
	case r.err != nil:
		return commRec{}, fmt.Errorf("%w: communicator value: %v", ErrCorrupt, r.err)
	case len(r.b) != 0:
		return commRec{}, corrupt("%d trailing bytes after the communicator value", len(r.b))
	case m.ID == "":
		return commRec{}, corrupt("communicator without an id")
	}
	return m, nil
}

// appendMember encodes a member value: the global rank.
func appendMember(dst []byte, rank int32) []byte { return binary.AppendUvarint(dst, uint64(rank)) }

// decodeMember decodes a member value: a global rank below
// collective.MaxCommSize (what a report may carry), never negative.
func decodeMember(b []byte) (int32, error) {
	r := byteReader{b: b}
	v := r.uvarint(collective.MaxCommSize - 1)
	switch {
	case r.err != nil:
		return 0, fmt.Errorf("%w: member value: %v", ErrCorrupt, r.err)
	case len(r.b) != 0:
		return 0, corrupt("%d trailing bytes after the member value", len(r.b))
	}
	return int32(v), nil
}

// CollectiveStats summarizes one job's stored collective calls.
type CollectiveStats struct {
	// Calls counts distinct stored calls; Dropped sums the drops the
	// capturers reported (any drop marks the analysis telemetry-limited).
	Calls, Dropped int64
	// FirstNS and LastNS are the smallest and largest stored enter_ns,
	// 0 with no calls.
	FirstNS, LastNS int64
	// Ranks is the number of ranks with stored calls.
	Ranks int
}

func encodeCollStats(st CollectiveStats) []byte {
	b := make([]byte, 0, 32)
	for _, v := range []int64{st.Calls, st.Dropped, st.FirstNS, st.LastNS} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func decodeCollStats(b []byte) (CollectiveStats, error) {
	if len(b) != 32 {
		return CollectiveStats{}, corrupt("collective stats value is %d bytes, want 32", len(b))
	}
	st := CollectiveStats{
		Calls: int64(binary.BigEndian.Uint64(b)), Dropped: int64(binary.BigEndian.Uint64(b[8:])),
		FirstNS: int64(binary.BigEndian.Uint64(b[16:])), LastNS: int64(binary.BigEndian.Uint64(b[24:])),
	}
	if st.Calls < 0 || st.Dropped < 0 || st.FirstNS > st.LastNS || (st.Calls > 0 && st.FirstNS <= 0) {
		return CollectiveStats{}, corrupt("collective stats %+v inconsistent", st)
	}
	return st, nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// byteReader reads varints with bounds; the first failure sticks.
type byteReader struct {
	b   []byte
	err error
}

func (r *byteReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *byteReader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	if v > limit {
		r.fail(fmt.Sprintf("value %d above %d", v, limit))
		return 0
	}
	return v
}

func (r *byteReader) varint(limit int64) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	if v > limit || v < -limit {
		r.fail(fmt.Sprintf("value %d outside ±%d", v, limit))
		return 0
	}
	return v
}

func (r *byteReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *byteReader) fail(msg string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s", msg)
	}
}
