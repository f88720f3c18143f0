package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// The KAIR operator-trace keyspace (docs/format/optrace.md): each rank's
// uploaded trace of one capture, in the compact laggard.v1.OpTrace
// encoding, split into parts so no value is larger than MaxOpTracePart.
//
//	t/<job>\x00<capture id, 13 bytes><rank u32><part u16> → part 0: header; 1..n: encoding bytes
//
// A rank's trace is written (and overwritten) in one batch that first
// deletes the rank's old parts, so readers see one whole version.
const (
	prefixOpTrace = "t/"

	// MaxOpTraceBytes bounds one rank's encoded trace.
	MaxOpTraceBytes = 64 << 20
	// MaxOpTracePart bounds one stored value: Pebble keeps a value whole
	// in memory and in one block, so a 64 MiB trace is cut into parts.
	MaxOpTracePart = 8 << 20
	// MaxOpHeartbeats bounds the clock samples stored with a trace.
	MaxOpHeartbeats = 64

	opTraceSuffixLen = 4 + 2
	opTraceVersion   = 1
)

// ErrTraceTooLarge is wrapped by PutOpTrace when a rank's encoded trace
// is over MaxOpTraceBytes. The HTTP API answers 413.
var ErrTraceTooLarge = errors.New("store: trace too large")

// OpHeartbeat is one client↔server clock exchange stored with a rank's
// trace (ns; the client times on the rank's trace clock), the same fields
// as kair.Heartbeat (KAIR Feature 4: clock alignment).
type OpHeartbeat struct{ ClientSendNS, ServerRecvNS, ServerSendNS, ClientRecvNS int64 }

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// opTracePrefix is "t/<job>\x00<capture>", the prefix of one capture's
// traces.
func opTracePrefix(job, capture string) []byte {
	return append(jobRange(prefixOpTrace, job, captureIDLen+opTraceSuffixLen), capture...)
}

// opTraceEnd is the exclusive end of one capture's traces: every key is
// the prefix and 6 bytes, so the prefix and 7 × 0xff is above them all.
func opTraceEnd(job, capture string) []byte {
	return append(opTracePrefix(job, capture), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
}

func opTraceKey(job, capture string, rank int, part uint16) []byte {
	k := binary.BigEndian.AppendUint32(opTracePrefix(job, capture), uint32(rank))
	return binary.BigEndian.AppendUint16(k, part)
}

// opTraceHeader is part 0 of a stored trace.
type opTraceHeader struct {
	size   uint64 // encoded bytes
	parts  uint64 // parts 1..parts hold them
	crc    uint32 // CRC-32C of the encoding
	events uint64
	hb     []OpHeartbeat
}

func appendOpTraceHeader(dst []byte, h *opTraceHeader) []byte {
	dst = append(dst, opTraceVersion)
	dst = binary.AppendUvarint(dst, h.size)
	dst = binary.AppendUvarint(dst, h.parts)
	dst = binary.BigEndian.AppendUint32(dst, h.crc)
	dst = binary.AppendUvarint(dst, h.events)
	dst = binary.AppendUvarint(dst, uint64(len(h.hb)))
	for _, b := range h.hb {
		for _, v := range [4]int64{b.ClientSendNS, b.ServerRecvNS, b.ServerSendNS, b.ClientRecvNS} {
			dst = binary.AppendVarint(dst, v)
		}
	}
	return dst
}

func decodeOpTraceHeader(v []byte) (*opTraceHeader, error) {
	if len(v) < 1 || v[0] != opTraceVersion {
		return nil, corrupt("trace header: unknown version")
	}
	r := &byteReader{b: v[1:]}
	h := &opTraceHeader{}
	h.size = r.uvarint(MaxOpTraceBytes)
	h.parts = r.uvarint(MaxOpTraceBytes/MaxOpTracePart + 1)
	if c := r.bytes(4); c != nil {
		h.crc = binary.BigEndian.Uint32(c)
	}
	h.events = r.uvarint(laggardv1.MaxOpTraceEvents)
	n := r.uvarint(MaxOpHeartbeats)
	for i := uint64(0); i < n && r.err == nil; i++ {
		h.hb = append(h.hb, OpHeartbeat{r.varintFull(), r.varintFull(), r.varintFull(), r.varintFull()})
	}
	switch {
	case r.err != nil:
		return nil, corrupt("trace header: %v", r.err)
	case len(r.b) != 0:
		return nil, corrupt("trace header: %d trailing bytes", len(r.b))
	case h.parts != (h.size+MaxOpTracePart-1)/MaxOpTracePart:
		return nil, corrupt("trace header: %d parts for %d bytes", h.parts, h.size)
	}
	return h, nil
}

// PutOpTrace stores rank t.Rank's trace of capture (which must exist)
// with its clock samples, replacing what that rank stored before, in one
// durable write. Traces over MaxOpTraceBytes encoded fail with an error
// wrapping ErrTraceTooLarge.
func (s *Store) PutOpTrace(job, capture string, t *optrace.Trace, hb []OpHeartbeat) error {
	if err := checkJobID(job); err != nil {
		return err
	}
	if err := checkCaptureID(capture); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if t == nil {
		return signal.FieldErrorf("trace", "nil")
	}
	if t.Rank < 0 || t.Rank >= maxRank {
		return fmt.Errorf("store: %w", signal.FieldErrorf("rank", "%d out of range", t.Rank))
	}
	if len(hb) > MaxOpHeartbeats {
		return fmt.Errorf("store: %w", signal.FieldErrorf("heartbeats", "%d clock samples, more than %d", len(hb), MaxOpHeartbeats))
	}
	enc, err := laggardv1.EncodeOpTrace(t)
	if err != nil {
		if errors.Is(err, laggardv1.ErrTooLarge) {
			return fmt.Errorf("%w: rank %d: %v", ErrTraceTooLarge, t.Rank, err)
		}
		return fmt.Errorf("store: rank %d trace: %w", t.Rank, err)
	}
	if len(enc) > MaxOpTraceBytes {
		return fmt.Errorf("%w: rank %d's trace is %d bytes encoded (%d events), over the %d-byte (64 MiB) per-rank limit; capture fewer steps",
			ErrTraceTooLarge, t.Rank, len(enc), len(t.Events), MaxOpTraceBytes)
	}
	h := &opTraceHeader{size: uint64(len(enc)), parts: uint64((len(enc) + MaxOpTracePart - 1) / MaxOpTracePart),
		crc: crc32.Checksum(enc, crcTable), events: uint64(len(t.Events)), hb: hb}
	return s.captureWrite(job, int64(len(enc))+64, func() error {
		_, closer, err := s.db.Get(captureKey(job, capture))
		if errors.Is(err, pebble.ErrNotFound) {
			return fmt.Errorf("store: job %q has no capture %q: %w", job, capture, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: read capture %s of job %q: %w", capture, job, err)
		}
		closer.Close()
		b := s.db.NewBatch()
		defer b.Close()
		lo := opTraceKey(job, capture, t.Rank, 0)
		err = b.DeleteRange(lo, rangeEndRank(job, capture, t.Rank), nil)
		if err == nil {
			err = b.Set(lo, appendOpTraceHeader(nil, h), nil)
		}
		for p := 0; err == nil && p < int(h.parts); p++ {
			part := enc[p*MaxOpTracePart : min((p+1)*MaxOpTracePart, len(enc))]
			err = b.Set(opTraceKey(job, capture, t.Rank, uint16(p+1)), part, nil)
		}
		if err == nil {
			err = s.guard(func() error { return b.Commit(s.wo) })
		}
		if err != nil {
			return fmt.Errorf("store: put rank %d trace of capture %s of job %q: %w", t.Rank, capture, job, err)
		}
		return nil
	})
}

// OpTraceEvents returns the stored event count of each of ranks' traces
// of capture, read from the trace headers only (a report's memory is
// bounded by the sum; the KAIR adapter checks it before storing another
// rank). Ranks without a stored trace, or whose header does not decode,
// are absent.
func (s *Store) OpTraceEvents(job, capture string, ranks []int) (map[int]int64, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	if !ValidCaptureID(capture) {
		return nil, fmt.Errorf("store: job %q has no capture %q: %w", job, signal.Clip(capture), ErrNotFound)
	}
	out := make(map[int]int64, len(ranks))
	for _, r := range ranks {
		if r < 0 || r >= maxRank {
			continue
		}
		key := opTraceKey(job, capture, r, 0)
		v, closer, err := s.db.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: read rank %d trace header of capture %s of job %q: %w", r, capture, job, err)
		}
		h, err := decodeOpTraceHeader(v)
		closer.Close()
		if err != nil {
			s.skip(key, err, nil)
			continue
		}
		out[r] = int64(h.events)
	}
	return out, nil
}

// rangeEndRank is the exclusive end of one rank's parts.
func rangeEndRank(job, capture string, rank int) []byte {
	return binary.BigEndian.AppendUint32(opTracePrefix(job, capture), uint32(rank)+1)
}

// OpTraces returns every stored rank trace of capture, in rank order, with
// each rank's clock samples. A rank whose stored trace does not decode
// (missing part, checksum, decoder error) is skipped: logged with its
// key, counted in SkippedRecords; the others are returned.
func (s *Store) OpTraces(job, capture string) ([]optrace.Trace, map[int][]OpHeartbeat, error) {
	return s.OpTracesSkipping(job, capture, nil)
}

// OpTracesSkipping is OpTraces that also tells onSkip (when not nil) of
// each skipped rank: the key and why.
func (s *Store) OpTracesSkipping(job, capture string, onSkip func(key string, err error)) ([]optrace.Trace, map[int][]OpHeartbeat, error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, nil, notFound(job)
	}
	if !ValidCaptureID(capture) {
		return nil, nil, fmt.Errorf("store: job %q has no capture %q: %w", job, signal.Clip(capture), ErrNotFound)
	}
	_, closer, err := s.db.Get(captureKey(job, capture))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, fmt.Errorf("store: job %q has no capture %q: %w", job, capture, ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: read capture %s of job %q: %w", capture, job, err)
	}
	closer.Close()
	prefix := opTracePrefix(job, capture)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: opTraceEnd(job, capture)})
	if err != nil {
		return nil, nil, fmt.Errorf("store: iterate traces of capture %s of job %q: %w", capture, job, err)
	}
	defer it.Close()
	var traces []optrace.Trace
	hbs := map[int][]OpHeartbeat{}
	ok := it.First()
	for ok {
		key := bytes.Clone(it.Key())
		if len(key) != len(prefix)+opTraceSuffixLen {
			s.skip(key, corrupt("malformed trace key"), onSkip)
			ok = it.Next()
			continue
		}
		rank := int(binary.BigEndian.Uint32(key[len(prefix):]))
		part := binary.BigEndian.Uint16(key[len(prefix)+4:])
		next := func() bool { return it.SeekGE(rangeEndRank(job, capture, rank)) }
		if rank > maxRank-1 {
			next = func() bool { return false }
		}
		if part != 0 {
			s.skip(key, corrupt("rank %d: trace part %d without a header", rank, part), onSkip)
			ok = next()
			continue
		}
		t, hb, err := s.readOpTrace(it, key, rank)
		if err != nil {
			s.skip(key, err, onSkip)
		} else {
			traces = append(traces, *t)
			hbs[rank] = hb
		}
		ok = next()
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("store: iterate traces of capture %s of job %q: %w", capture, job, err)
	}
	return traces, hbs, nil
}

// readOpTrace reads the rank's header (the iterator is on it) and parts.
func (s *Store) readOpTrace(it *pebble.Iterator, key []byte, rank int) (*optrace.Trace, []OpHeartbeat, error) {
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, nil, err
	}
	h, err := decodeOpTraceHeader(v)
	if err != nil {
		return nil, nil, err
	}
	enc := make([]byte, 0, h.size)
	for p := uint64(1); p <= h.parts; p++ {
		if !it.Next() {
			return nil, nil, corrupt("rank %d: trace part %d of %d missing", rank, p, h.parts)
		}
		k := it.Key()
		if len(k) != len(key) || !bytes.Equal(k[:len(k)-2], key[:len(key)-2]) || uint64(binary.BigEndian.Uint16(k[len(k)-2:])) != p {
			return nil, nil, corrupt("rank %d: trace part %d of %d missing", rank, p, h.parts)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, err
		}
		if uint64(len(enc)+len(v)) > h.size {
			return nil, nil, corrupt("rank %d: trace parts longer than the %d bytes the header says", rank, h.size)
		}
		enc = append(enc, v...)
	}
	if uint64(len(enc)) != h.size {
		return nil, nil, corrupt("rank %d: trace parts hold %d bytes, the header says %d", rank, len(enc), h.size)
	}
	if crc32.Checksum(enc, crcTable) != h.crc {
		return nil, nil, corrupt("rank %d: trace checksum mismatch", rank)
	}
	t, err := laggardv1.DecodeOpTrace(enc)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: rank %d: %v", ErrCorrupt, rank, err)
	}
	if t.Rank != rank || uint64(len(t.Events)) != h.events {
		return nil, nil, corrupt("rank %d: stored trace says rank %d with %d events (header: %d)", rank, t.Rank, len(t.Events), h.events)
	}
	return t, h.hb, nil
}
