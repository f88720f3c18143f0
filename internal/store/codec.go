package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Value codec for one stage vector. The coordinates live in the key; the
// stage names live in the job schema, so the value is only numbers:
//
//	version      byte (=1)
//	n            uvarint            number of durations (<= signal.MaxStages)
//	durations    n × float64 LE
//	wall_ms      float64 LE
//	data_lead    varint
//	dropped      varint
//	nested       varint
//	p            uvarint            number of probes (<= maxProbes)
//	p × { name_len uvarint (1..maxProbeName), name, ready byte (0|1), value float64 LE }
//
// Why hand-rolled rather than JSON or protobuf: this sits on the ingest
// hot path (millions of values/s) and the scan path (a 1000×1024 window is a
// million decodes). A fixed layout with raw float64s encodes with no
// reflection and no allocation, decodes straight into a reused
// StageVector, and is ~6 bytes/vector larger than the floats themselves.
// Floats are stored bit-exactly (NaN payloads included).

const (
	valueVersion = 1
	maxProbes    = 64
	maxProbeName = 255
)

// ErrCorrupt marks a stored value that cannot be decoded; the error text
// names the key.
var ErrCorrupt = errors.New("corrupt value")

// checkEncodable reports what the codec or the key layout cannot
// represent, naming the field as the HTTP API does ("rank", "probes").
func checkEncodable(v *stagevec.Vector) error {
	switch {
	case v.Step < 0:
		return &signal.FieldError{Field: "step", Msg: fmt.Sprintf("must be >= 0, got %d", v.Step)}
	case v.Rank < 0 || v.Rank > maxRank:
		return &signal.FieldError{Field: "rank", Msg: fmt.Sprintf("must be in [0, %d], got %d", maxRank, v.Rank)}
	case v.Micro < 0 || v.Micro > maxMicro:
		return &signal.FieldError{Field: "micro", Msg: fmt.Sprintf("must be in [0, %d], got %d", maxMicro, v.Micro)}
	case len(v.Durations) > signal.MaxStages:
		return &signal.FieldError{Field: "durations_ms", Msg: fmt.Sprintf("at most %d values, got %d", signal.MaxStages, len(v.Durations))}
	case len(v.Probes) > maxProbes:
		return &signal.FieldError{Field: "probes", Msg: fmt.Sprintf("at most %d probes, got %d", maxProbes, len(v.Probes))}
	}
	for name := range v.Probes {
		if name == "" || len(name) > maxProbeName {
			return &signal.FieldError{Field: "probes", Msg: fmt.Sprintf("probe name %q must be 1..%d bytes", name, maxProbeName)}
		}
	}
	return nil
}

// appendValue encodes v (already checked by checkEncodable) onto dst.
func appendValue(dst []byte, v *stagevec.Vector) []byte {
	dst = append(dst, valueVersion)
	dst = binary.AppendUvarint(dst, uint64(len(v.Durations)))
	for _, d := range v.Durations {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(d))
	}
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.WallMS))
	dst = binary.AppendVarint(dst, int64(v.DataLead))
	dst = binary.AppendVarint(dst, v.Dropped)
	dst = binary.AppendVarint(dst, int64(v.Nested))
	dst = binary.AppendUvarint(dst, uint64(len(v.Probes)))
	if len(v.Probes) == 0 {
		return dst
	}
	appendProbe := func(name string, p stagevec.Probe) {
		dst = binary.AppendUvarint(dst, uint64(len(name)))
		dst = append(dst, name...)
		ready := byte(0)
		if p.Ready {
			ready = 1
		}
		dst = append(dst, ready)
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(p.Value))
	}
	if len(v.Probes) == 1 { // the common case: one CUDA probe, no sort needed
		for name, p := range v.Probes {
			appendProbe(name, p)
		}
		return dst
	}
	// Sorted so equal vectors encode to equal bytes.
	names := make([]string, 0, len(v.Probes))
	for name := range v.Probes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		appendProbe(name, v.Probes[name])
	}
	return dst
}

// valueDecoder decodes values into a reused StageVector. It keeps the probe
// map and interned probe names across calls so steady-state decoding does
// not allocate. The zero value is ready to use; not safe for concurrent use.
type valueDecoder struct {
	probes map[string]stagevec.Probe
	names  []string
}

// decode fills v's payload fields (not Step/Rank/Micro) from b, reusing
// v.Durations' backing array. It never panics; on malformed input it
// returns an error wrapping ErrCorrupt and v's contents are unspecified.
func (d *valueDecoder) decode(b []byte, v *stagevec.Vector) error {
	r := reader{b: b}
	if ver := r.byte(); r.err == nil && ver != valueVersion {
		return fmt.Errorf("%w: unknown version %d", ErrCorrupt, ver)
	}
	n := r.uvarint("durations count")
	if r.err == nil && n > signal.MaxStages {
		return fmt.Errorf("%w: %d durations exceeds %d", ErrCorrupt, n, signal.MaxStages)
	}
	if r.err == nil && uint64(len(r.b)) < n*8 {
		return fmt.Errorf("%w: durations truncated", ErrCorrupt)
	}
	if r.err != nil {
		return r.err
	}
	v.Durations = slices.Grow(v.Durations[:0], int(n))[:n]
	for i := range v.Durations {
		v.Durations[i] = r.float("durations")
	}
	v.WallMS = r.float("wall_ms")
	v.DataLead = int(r.varint("data_lead", math.MinInt32, math.MaxInt32))
	v.Dropped = r.varint("dropped", math.MinInt64, math.MaxInt64)
	v.Nested = int(r.varint("nested", math.MinInt32, math.MaxInt32))
	np := r.uvarint("probes count")
	if r.err == nil && np > maxProbes {
		return fmt.Errorf("%w: %d probes exceeds %d", ErrCorrupt, np, maxProbes)
	}
	if r.err != nil {
		return r.err
	}
	if np == 0 {
		v.Probes = nil
	} else {
		if d.probes == nil {
			d.probes = make(map[string]stagevec.Probe, np)
		}
		clear(d.probes)
		for range np {
			ln := r.uvarint("probe name length")
			if r.err == nil && (ln == 0 || ln > maxProbeName) {
				return fmt.Errorf("%w: probe name length %d", ErrCorrupt, ln)
			}
			name := d.intern(r.bytes(int(ln), "probe name"))
			ready := r.byte()
			if r.err == nil && ready > 1 {
				return fmt.Errorf("%w: probe %q ready byte %d", ErrCorrupt, name, ready)
			}
			val := r.float("probe value")
			if r.err != nil {
				return r.err
			}
			if _, dup := d.probes[name]; dup {
				return fmt.Errorf("%w: probe %q appears twice", ErrCorrupt, name)
			}
			d.probes[name] = stagevec.Probe{Value: val, Ready: ready == 1}
		}
		v.Probes = d.probes
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b))
	}
	return nil
}

// intern returns a string equal to b, reusing a previous one when possible
// (a job declares a handful of probe names; re-allocating them per decoded
// vector would dominate scan allocations).
func (d *valueDecoder) intern(b []byte) string {
	for _, s := range d.names {
		if s == string(b) { // no allocation: compiler-optimized comparison
			return s
		}
	}
	s := string(b)
	if len(d.names) < maxProbes {
		d.names = append(d.names, s)
	}
	return s
}

// reader is a sticky-error byte cursor: after the first failure every read
// returns zero, so decode checks r.err only where it must bound allocation.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s truncated or malformed", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail("byte")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int, what string) []byte {
	if n < 0 || len(r.b) < n {
		r.fail(what)
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) float(what string) float64 {
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return f
}

func (r *reader) uvarint(what string) uint64 {
	u, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return u
}

func (r *reader) varint(what string, lo, hi int64) int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	if x < lo || x > hi {
		if r.err == nil {
			r.err = fmt.Errorf("%w: %s %d out of range", ErrCorrupt, what, x)
		}
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return x
}
