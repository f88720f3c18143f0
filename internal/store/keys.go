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
	return fmt.Sprintf("%q", key)
}
