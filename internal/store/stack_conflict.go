package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Re-sent stack and OS-stat windows (issue 16 item 1; conflict.go for the
// vector and call keyspaces). A record's key ends in a hash of its node
// and content, so a byte-identical re-send is a duplicate by key. But a
// re-send with other content has another key, and before issue 16 it was
// stored beside the first: the window's samples counted twice. A record
// with other content is also what an agent sends when it halves a window
// the server refused as too large (both halves keep the window), so the
// key cannot tell a conflict from a part. The cell decides: within one
// (window start, rank, node) — for OS points (window start, node) — every
// stack sample has an identity (process, thread, names, frames) and a
// count, every OS point an identity (name, rank, CPU, device) and a
// value. A new record whose identities are disjoint from the stored
// records' is a part and is stored; one whose every identity is stored
// with the same value is a re-sent part, a duplicate; one that gives a
// stored identity another value, or that overlaps the stored ones only in
// part, or that gives the window another end or rate, is a conflict.
// Only windows that already hold a record of the same node pay for this:
// the first record of a window costs one seek.

// cellRec is what the conflict check knows of one record: its window and
// rate, and its identities with their values.
type cellRec struct {
	end  int64
	hz   int
	rate uint64 // ratio's bits
	vals map[uint64]uint64
	// first field name and index of each identity, for error messages.
	at map[uint64]int
}

// stackCell builds the cellRec of samples idx of b.
func stackCell(b *stack.Batch, idx []int32) cellRec {
	c := cellRec{end: b.EndNS, hz: b.Hz, rate: math.Float64bits(b.Ratio), vals: make(map[uint64]uint64, len(idx)), at: make(map[uint64]int, len(idx))}
	for k, i := range idx {
		id := sampleIdentity(b, &b.Samples[i])
		if _, dup := c.vals[id]; !dup {
			c.vals[id], c.at[id] = uint64(b.Samples[i].Count), k
		}
	}
	return c
}

// sampleIdentity hashes what makes two samples of one window the same
// stack: process, thread, their names, the flags and every frame (a
// native frame by its mapping's Build-ID and path, not by its index in a
// record's table).
func sampleIdentity(b *stack.Batch, s *stack.Sample) uint64 {
	h := fnv.New64a()
	var buf []byte
	str := func(x string) {
		buf = binary.AppendUvarint(buf[:0], uint64(len(x)))
		h.Write(buf)
		h.Write([]byte(x))
	}
	num := func(x uint64) {
		buf = binary.AppendUvarint(buf[:0], x)
		h.Write(buf)
	}
	var fl uint64
	if s.Foreign {
		fl |= 1
	}
	if s.Truncated {
		fl |= 2
	}
	num(fl)
	num(uint64(s.PID))
	num(uint64(s.TID))
	str(s.Comm)
	str(s.Thread)
	num(uint64(len(s.Frames)))
	for i := range s.Frames {
		f := &s.Frames[i]
		num(uint64(f.Kind))
		num(f.Addr)
		if f.Mapping >= 0 && int(f.Mapping) < len(b.Mappings) {
			m := &b.Mappings[f.Mapping]
			str(m.BuildID)
			str(m.Path)
		} else {
			str("")
			str("")
		}
		str(f.Func)
		str(f.File)
		num(uint64(f.Line))
	}
	return h.Sum64()
}

// osCell builds the cellRec of an OS batch: points by (name, rank, CPU,
// device), absences by source.
func osCell(b *osstat.Batch) cellRec {
	c := cellRec{end: b.EndNS, vals: make(map[uint64]uint64, len(b.Points)+len(b.Absent)), at: map[uint64]int{}}
	for i := range b.Points {
		p := &b.Points[i]
		h := fnv.New64a()
		fmt.Fprintf(h, "p\x00%s\x00%d\x00%d\x00%s", p.Name, p.Rank, p.CPU, p.Device)
		id := h.Sum64()
		if _, dup := c.vals[id]; !dup {
			c.vals[id], c.at[id] = math.Float64bits(p.Value), i
		}
	}
	for i := range b.Absent {
		h := fnv.New64a()
		fmt.Fprintf(h, "a\x00%s", b.Absent[i].Source)
		id := h.Sum64()
		v := fnv.New64a()
		v.Write([]byte(b.Absent[i].Reason))
		if _, dup := c.vals[id]; !dup {
			c.vals[id], c.at[id] = v.Sum64(), -1-i
		}
	}
	return c
}

// cellVerdict compares a new record with the records already in its cell
// (same window start, rank and node). dup: every identity is stored with
// the same value; err: a conflict naming the record's field.
func cellVerdict(rec *profRec, nr cellRec, stored []cellRec) (dup bool, err error) {
	if len(stored) == 0 {
		return false, nil
	}
	what, field := "rank "+fmt.Sprint(rec.rank)+"'s stack window", "samples"
	if rec.os {
		what, field = "the OS window", "points"
	}
	cell := fmt.Sprintf("%s starting at %d ns from node %q", what, rec.start, signal.Clip(rec.node))
	for _, sr := range stored {
		switch {
		case sr.end != nr.end:
			return false, conflict("end_ns", fmt.Sprintf("%s is stored ending at %d ns, this batch ends it at %d ns; a re-sent window must be identical, and nothing of this batch was stored", cell, sr.end, nr.end))
		case sr.hz != nr.hz || sr.rate != nr.rate:
			return false, conflict("hz", fmt.Sprintf("%s is stored with another sampling rate (%d Hz × %v); a re-sent window must be identical, and nothing of this batch was stored", cell, sr.hz, math.Float64frombits(sr.rate)))
		}
	}
	overlap, firstNew := 0, -1
	for id, v := range nr.vals {
		found := false
		for _, sr := range stored {
			sv, ok := sr.vals[id]
			if !ok {
				continue
			}
			if sv != v {
				return false, conflict(cellField(field, rec, nr.at[id]), fmt.Sprintf("%s already holds this %s with another %s; a re-sent window must be identical, and nothing of this batch was stored",
					cell, map[bool]string{false: "stack", true: "point"}[rec.os], map[bool]string{false: "count", true: "value"}[rec.os]))
			}
			found = true
			break
		}
		if found {
			overlap++
		} else if firstNew < 0 || nr.at[id] < firstNew {
			firstNew = nr.at[id]
		}
	}
	switch {
	case overlap == 0:
		return false, nil // a part of the window: disjoint from what is stored
	case overlap == len(nr.vals):
		return true, nil // a re-sent part
	}
	return false, conflict(cellField(field, rec, firstNew), fmt.Sprintf("%s holds some of this batch's %s already and not others: a window is sent once, or in disjoint parts; nothing of this batch was stored",
		cell, field))
}

// cellField names a record's identity k in the request: samples[i] (the
// sample's index in the posted batch) or points[i] / absent[i].
func cellField(field string, rec *profRec, k int) string {
	switch {
	case rec.os && k < 0:
		return fmt.Sprintf("absent[%d]", -1-k)
	case rec.os:
		return fmt.Sprintf("points[%d]", k)
	case k >= 0 && k < len(rec.idx):
		return fmt.Sprintf("samples[%d]", rec.idx[k])
	}
	return field
}

// storedCell returns the cellRecs of the records stored in rec's cell
// from rec's node (it reads the cell's keys: the window start and, for
// stacks, the rank — the key without its record id).
func (s *Store) storedCell(rec *profRec) ([]cellRec, error) {
	lo := rec.key[:len(rec.key)-8]
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("store: duplicate check: %w", err)
	}
	defer it.Close()
	var out []cellRec
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("store: duplicate check: %w", err)
		}
		if rec.os {
			var b osstat.Batch
			if decodeOSStatRecord(v, rec.start, &b) != nil || b.Node != rec.node {
				continue // another node's, or undecodable (scans skip it too)
			}
			out = append(out, osCell(&b))
			continue
		}
		var b stack.Batch
		if decodeStackRecord(v, rec.start, rec.rank, &b) != nil || b.Node != rec.node {
			continue
		}
		idx := make([]int32, len(b.Samples))
		for i := range idx {
			idx[i] = int32(i)
		}
		out = append(out, stackCell(&b, idx))
	}
	return out, it.Error()
}

// prefixEnd is the smallest key above every key starting with p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
