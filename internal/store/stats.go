package store

import (
	"encoding/binary"
	"fmt"
	"math"
)

// JobStats summarizes one job's stored vectors. It is maintained on every
// write and persisted in the same batch as the vectors, so it is exact and
// survives restarts without a scan. With no vectors yet, FirstStep and
// LastStep are -1 and Vectors is 0.
type JobStats struct {
	FirstStep, LastStep int64
	// Vectors counts distinct (step, rank, micro) keys; overwrites of an
	// existing key do not add to it.
	Vectors int64
}

var emptyStats = JobStats{FirstStep: -1, LastStep: -1}

// covers reports whether step lies in [FirstStep, LastStep], i.e. whether a
// write there might overwrite an existing key. Writes outside are new by
// construction, which keeps the duplicate check off the common
// append-at-the-head path.
func (st JobStats) covers(step int64) bool {
	return st.Vectors > 0 && step >= st.FirstStep && step <= st.LastStep
}

// add records one new key.
func (st *JobStats) add(step int64) {
	if st.Vectors == 0 || step < st.FirstStep {
		st.FirstStep = step
	}
	if st.Vectors == 0 || step > st.LastStep {
		st.LastStep = step
	}
	st.Vectors++
}

// encodeStats encodes st and the time of the job's last write (Unix
// milliseconds), which retention by age reads. Stores written before the
// time was kept have 24-byte values; decodeStats reads both.
func encodeStats(st JobStats, lastWriteMS int64) []byte {
	b := make([]byte, 0, 32)
	b = binary.BigEndian.AppendUint64(b, uint64(st.FirstStep))
	b = binary.BigEndian.AppendUint64(b, uint64(st.LastStep))
	b = binary.BigEndian.AppendUint64(b, uint64(st.Vectors))
	return binary.BigEndian.AppendUint64(b, uint64(lastWriteMS))
}

// decodeStats decodes a stats value; lastWriteMS is 0 when not recorded.
func decodeStats(key, b []byte) (st JobStats, lastWriteMS int64, err error) {
	if len(b) != 24 && len(b) != 32 {
		return JobStats{}, 0, fmt.Errorf("store: key %s: %w: stats value is %d bytes, want 24 or 32", keyString(key), ErrCorrupt, len(b))
	}
	if len(b) == 32 {
		lastWriteMS = max(int64(binary.BigEndian.Uint64(b[24:])), 0)
	}
	st = JobStats{
		FirstStep: int64(binary.BigEndian.Uint64(b)),
		LastStep:  int64(binary.BigEndian.Uint64(b[8:])),
		Vectors:   int64(binary.BigEndian.Uint64(b[16:])),
	}
	if st.Vectors < 0 || (st.Vectors > 0 && (st.FirstStep < 0 || st.FirstStep > st.LastStep)) || st.LastStep == math.MinInt64 {
		return JobStats{}, 0, fmt.Errorf("store: key %s: %w: stats %+v inconsistent", keyString(key), ErrCorrupt, st)
	}
	if st.Vectors == 0 {
		st = emptyStats
	}
	return st, lastWriteMS, nil
}
