package store

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Re-sent records (issue 16 item 1). A client retries a batch it got no
// answer for, an agent resends a window after a timeout, a restarted
// process replays steps: the store sees keys it already holds. A record
// that is byte-identical to the stored one is a duplicate — acknowledged,
// counted as such, not written again (a retry stays idempotent). A record
// with the same key and other values is a conflict: the write is refused
// (ErrConflict, 409 naming the record and the cell) and nothing of it is
// stored, because silently replacing acknowledged data — what the store
// did before — loses it without a trace, and silently keeping the old
// copy would acknowledge data that was never stored.
//
// The check is by key and value bytes, so it holds for any key layout
// (the incarnation dimension the keys get next included): the encodings
// are deterministic (probes sorted, floats bit-exact).

// keyProbe reads stored values of one key range in ascending key order,
// one iterator for a whole write: SeekGE from the previous position steps
// forward instead of seeking afresh. No bloom filter is consulted (a
// re-sent key exists, so its filter cannot say no), and the read gives the
// value the comparison needs.
type keyProbe struct {
	s      *Store
	lo, hi []byte
	it     *pebble.Iterator
}

// get returns key's stored value (valid until the next call) or nil.
func (p *keyProbe) get(key []byte) ([]byte, error) {
	if p.it == nil {
		it, err := p.s.db.NewIter(&pebble.IterOptions{LowerBound: p.lo, UpperBound: p.hi})
		if err != nil {
			return nil, fmt.Errorf("store: duplicate check: %w", err)
		}
		p.it = it
	}
	if !p.it.SeekGE(key) || !bytes.Equal(p.it.Key(), key) {
		if err := p.it.Error(); err != nil {
			return nil, fmt.Errorf("store: duplicate check: %w", err)
		}
		return nil, nil
	}
	v, err := p.it.ValueAndErr()
	if err != nil {
		return nil, fmt.Errorf("store: duplicate check: key %s: %w", keyString(key), err)
	}
	if v == nil {
		v = []byte{} // stored, empty
	}
	return v, nil
}

func (p *keyProbe) close() {
	if p.it != nil {
		p.it.Close()
		p.it = nil
	}
}

// vecDiff says how two encoded vector values differ, for a conflict's
// message: the first field that differs, with both values named by na
// and nb ("stored", "sent").
func vecDiff(x, y []byte, na, nb string) string {
	var a, b stagevec.Vector
	var da, db valueDecoder
	if da.decode(x, &a) != nil || db.decode(y, &b) != nil {
		return "the values differ"
	}
	pair := func(field, va, vb string) string { return fmt.Sprintf("%s is %s %s, %s %s", field, va, na, vb, nb) }
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	same := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	if len(a.Durations) != len(b.Durations) {
		return pair("the number of durations", fmt.Sprint(len(a.Durations)), fmt.Sprint(len(b.Durations)))
	}
	for i := range a.Durations {
		if !same(a.Durations[i], b.Durations[i]) {
			return pair(fmt.Sprintf("durations_ms[%d]", i), num(a.Durations[i]), num(b.Durations[i]))
		}
	}
	switch {
	case !same(a.WallMS, b.WallMS):
		return pair("wall_ms", num(a.WallMS), num(b.WallMS))
	case a.DataLead != b.DataLead:
		return pair("data_lead", fmt.Sprint(a.DataLead), fmt.Sprint(b.DataLead))
	case a.Dropped != b.Dropped:
		return pair("dropped", fmt.Sprint(a.Dropped), fmt.Sprint(b.Dropped))
	case a.Nested != b.Nested:
		return pair("nested", fmt.Sprint(a.Nested), fmt.Sprint(b.Nested))
	}
	names := make([]string, 0, len(a.Probes)+len(b.Probes))
	for k := range a.Probes {
		names = append(names, k)
	}
	for k := range b.Probes {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range slices.Compact(names) {
		pa, oka := a.Probes[k]
		pb, okb := b.Probes[k]
		if oka != okb || !same(pa.Value, pb.Value) || pa.Ready != pb.Ready {
			return pair(fmt.Sprintf("probe %q", k), fmtProbe(pa, oka), fmtProbe(pb, okb))
		}
	}
	return "the values differ"
}

func fmtProbe(p stagevec.Probe, ok bool) string {
	if !ok {
		return "absent"
	}
	return fmt.Sprintf("%s ms, ready %v", strconv.FormatFloat(p.Value, 'g', -1, 64), p.Ready)
}
