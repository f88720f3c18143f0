package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Key prefixes; see doc.go for the layout.
const (
	prefixJob    = "j/"
	prefixStats  = "s/"
	prefixVector = "v/"

	// Collective-call keyspace (collective.go, docs/format/collective.md).
	prefixCall      = "c/" // c/<job>\x00<rank u32><enter_ns u64><comm u32><seq u64>
	prefixComm      = "m/" // m/<job>\x00<comm u32>: the job's interned communicators
	prefixHighWater = "h/" // h/<job>\x00<rank u32><comm u32>: highest stored seq
	prefixCollStats = "x/" // x/<job>: CollectiveStats

	// KAIR capture and operator-trace keyspaces (capture.go, optrace.go,
	// docs/format/optrace.md): prefixCapture "a/" (a/<job>\x00<capture
	// id>) and prefixOpTrace "t/" (t/<job>\x00<capture id><rank u32><part u16>).

	// Incident keyspaces (incident.go, docs/format/incident.md):
	// prefixIncident "i/", prefixIncidentIndex "n/", prefixEvidence "e/",
	// prefixAudit "u/".

	// callSuffixLen is rank(4) + enter_ns(8) + comm(4) + seq(8).
	callSuffixLen = 4 + 8 + 4 + 8

	// vecSuffixLen is step(8) + rank(4) + micro(2).
	vecSuffixLen = 8 + 4 + 2

	maxRank  = math.MaxUint32
	maxMicro = math.MaxUint16
)

// checkJobID rejects ids that would break the key layout. Full validation
// (signal.Job.Validate) is the caller's business; the store only needs the
// id to be non-empty and free of the \x00 separator.
func checkJobID(id string) error {
	if id == "" {
		return fmt.Errorf("store: empty job id")
	}
	if strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("store: job id %q contains NUL", id)
	}
	return nil
}

func jobKey(id string) []byte   { return append([]byte(prefixJob), id...) }
func statsKey(id string) []byte { return append([]byte(prefixStats), id...) }

// jobRange is "<prefix><job>\x00", the common prefix of one job's keys in a
// per-job keyspace, with room for a suffix of n bytes.
func jobRange(prefix, id string, n int) []byte {
	b := make([]byte, 0, len(prefix)+len(id)+1+n)
	b = append(b, prefix...)
	b = append(b, id...)
	return append(b, 0)
}

// rangeEnd is the exclusive upper bound of the range jobRange starts.
func rangeEnd(lo []byte) []byte {
	hi := append([]byte(nil), lo...)
	hi[len(hi)-1] = 1
	return hi
}

// collRanges are job id's collective key ranges [lo, hi), deleted with the
// job; x/<job> is a single key, deleted separately.
func collRanges(id string) [][2][]byte {
	out := make([][2][]byte, 0, 3)
	for _, p := range []string{prefixCall, prefixComm, prefixHighWater} {
		lo := jobRange(p, id, 0)
		out = append(out, [2][]byte{lo, rangeEnd(lo)})
	}
	return out
}

func collStatsKey(id string) []byte { return append([]byte(prefixCollStats), id...) }

// appendCallSuffix appends the 24-byte (rank, enter_ns, comm, seq) suffix;
// the caller has checked the ranges (checkCall).
func appendCallSuffix(dst []byte, rank int, enterNS int64, comm uint32, seq int64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(rank))
	dst = binary.BigEndian.AppendUint64(dst, uint64(enterNS))
	dst = binary.BigEndian.AppendUint32(dst, comm)
	return binary.BigEndian.AppendUint64(dst, uint64(seq))
}

// parseCallSuffix decodes the coordinates from the last 24 bytes of a key.
func parseCallSuffix(key []byte) (rank int, enterNS int64, comm uint32, seq int64, ok bool) {
	if len(key) < callSuffixLen {
		return 0, 0, 0, 0, false
	}
	s := key[len(key)-callSuffixLen:]
	e, q := binary.BigEndian.Uint64(s[4:]), binary.BigEndian.Uint64(s[16:])
	if e > math.MaxInt64 || q > math.MaxInt64 {
		return 0, 0, 0, 0, false
	}
	return int(binary.BigEndian.Uint32(s)), int64(e), binary.BigEndian.Uint32(s[12:]), int64(q), true
}

// vecPrefix is "v/<job>\x00", the common prefix of all of job's vectors.
func vecPrefix(id string) []byte {
	b := make([]byte, 0, len(prefixVector)+len(id)+1+vecSuffixLen)
	b = append(b, prefixVector...)
	b = append(b, id...)
	return append(b, 0)
}

// vecPrefixEnd is the exclusive upper bound of job's vector range.
func vecPrefixEnd(id string) []byte {
	b := vecPrefix(id)
	b[len(b)-1] = 1
	return b
}

// appendVecSuffix appends the 14-byte (step, rank, micro) suffix. The caller
// has checked step >= 0 and the rank/micro ranges.
func appendVecSuffix(dst []byte, step int64, rank, micro int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(step))
	dst = binary.BigEndian.AppendUint32(dst, uint32(rank))
	return binary.BigEndian.AppendUint16(dst, uint16(micro))
}

// vecKey builds the full key of one vector.
func vecKey(id string, step int64, rank, micro int) []byte {
	return appendVecSuffix(vecPrefix(id), step, rank, micro)
}

// parseVecSuffix decodes the coordinates from the last 14 bytes of a key.
func parseVecSuffix(key []byte) (step int64, rank, micro int, ok bool) {
	if len(key) < vecSuffixLen {
		return 0, 0, 0, false
	}
	s := key[len(key)-vecSuffixLen:]
	u := binary.BigEndian.Uint64(s)
	if u > math.MaxInt64 {
		return 0, 0, 0, false
	}
	return int64(u), int(binary.BigEndian.Uint32(s[8:])), int(binary.BigEndian.Uint16(s[12:])), true
}

// keyString renders a key for error messages: printable, coordinates decoded.
func keyString(key []byte) string {
	if len(key) > len(prefixVector)+vecSuffixLen && string(key[:len(prefixVector)]) == prefixVector {
		job := key[len(prefixVector) : len(key)-vecSuffixLen-1]
		if step, rank, micro, ok := parseVecSuffix(key); ok {
			return fmt.Sprintf("v/%s[step=%d rank=%d micro=%d]", job, step, rank, micro)
		}
	}
	if len(key) > len(prefixCall)+callSuffixLen && string(key[:len(prefixCall)]) == prefixCall {
		job := key[len(prefixCall) : len(key)-callSuffixLen-1]
		if rank, enter, comm, seq, ok := parseCallSuffix(key); ok {
			return fmt.Sprintf("c/%s[rank=%d enter_ns=%d comm=#%d seq=%d]", job, rank, enter, comm, seq)
		}
	}
	if rest, ok := strings.CutPrefix(string(key), prefixOpTrace); ok && len(rest) > captureIDLen+opTraceSuffixLen+1 {
		s := rest[len(rest)-opTraceSuffixLen:]
		rank, part := binary.BigEndian.Uint32([]byte(s)), binary.BigEndian.Uint16([]byte(s[4:]))
		job, id := rest[:len(rest)-opTraceSuffixLen-captureIDLen-1], rest[len(rest)-opTraceSuffixLen-captureIDLen:len(rest)-opTraceSuffixLen]
		return fmt.Sprintf("t/%q[capture=%q rank=%d part=%d]", job, id, rank, part)
	}
	if rest, ok := strings.CutPrefix(string(key), prefixCapture); ok && len(rest) > captureIDLen+1 {
		return fmt.Sprintf("a/%q[capture=%q]", rest[:len(rest)-captureIDLen-1], rest[len(rest)-captureIDLen:])
	}
	return fmt.Sprintf("%q", key)
}
