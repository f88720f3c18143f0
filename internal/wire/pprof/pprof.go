// Package pprof imports outside CPU profiles in pprof's profile.proto
// format (perf via perf_data_converter, Go, py-spy, Parca) as stack
// batches, and exports laggard's symbolized profiles back to it, so users
// of those tools can feed laggard and read its windows in their viewers
// (SysOM-AI §4 "flame graphs"; issue 8 item 8).
//
// Which sample value is the count: the "samples" sample type when the
// profile has one (a count per stack, what perf and Parca write);
// otherwise the "cpu" sample type divided by the profile's period (Go
// writes cpu in nanoseconds with a 10 ms period: 1 per tick). Profiles
// with neither (heap, contention) are refused: laggard's stacks are CPU
// time. When the period type is cpu time, its rate becomes the batch's Hz
// (Ratio 1); otherwise Hz is 0 (rate unknown).
package pprof

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// DefaultMaxBytes bounds a profile's decompressed size: the parser holds
// every sample, location and string at once (several times the encoded
// size), so a small gzip body must not expand without bound.
const DefaultMaxBytes = 32 << 20

// Options are an import's request-side facts.
type Options struct {
	// Rank is the rank of samples without a "rank" label (-1: none).
	Rank int
	// StartNS, EndNS, when set, are the batch's window; otherwise the
	// profile's time and duration are.
	StartNS, EndNS int64
	// MaxBytes bounds the (decompressed) profile; 0 means DefaultMaxBytes.
	MaxBytes int64
}

// Import reads a gzipped or raw pprof profile; samples without a "rank"
// label get rank -1. The batch is validated.
func Import(r io.Reader) (*stack.Batch, error) {
	return ImportWith(r, Options{Rank: -1})
}

// ImportWith is Import with the request's rank, window and size bound.
// Errors are *signal.FieldError (400) or wrap laggardv1.ErrTooLarge (413).
func ImportWith(r io.Reader, o Options) (*stack.Batch, error) {
	limit := o.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	data, err := readAll(r, limit)
	if err != nil {
		return nil, err
	}
	if isGzip(data) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, &signal.FieldError{Field: "body", Msg: "invalid gzip: " + clip(err.Error())}
		}
		if data, err = readAll(zr, limit); err != nil {
			return nil, err
		}
		if isGzip(data) { // the parser would inflate a second layer without bound
			return nil, &signal.FieldError{Field: "body", Msg: "gzip inside gzip"}
		}
	}
	p, err := profile.ParseUncompressed(data)
	if err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid pprof profile: " + clip(err.Error())}
	}
	return fromProfile(p, o)
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// readAll reads r whole, failing past limit bytes.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "reading: " + clip(err.Error())}
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: profile larger than %d bytes (decompressed)", laggardv1.ErrTooLarge, limit)
	}
	return data, nil
}

func clip(s string) string {
	if len(s) > 160 {
		return s[:157] + "…"
	}
	return s
}

// countIndex picks the sample value that is the count and the divisor
// that turns it into one (see the package comment).
func countIndex(p *profile.Profile) (idx int, div int64, err error) {
	for i, st := range p.SampleType {
		if st != nil && st.Type == "samples" {
			return i, 1, nil
		}
	}
	for i, st := range p.SampleType {
		if st != nil && st.Type == "cpu" {
			if p.Period <= 0 {
				return 0, 0, signal.FieldErrorf("period", "a cpu profile without a positive period cannot be turned into sample counts")
			}
			return i, p.Period, nil
		}
	}
	types := make([]string, 0, len(p.SampleType))
	for _, st := range p.SampleType {
		if st != nil {
			types = append(types, st.Type)
		}
	}
	return 0, 0, signal.FieldErrorf("sample_type", "no \"samples\" or \"cpu\" sample type (have %s): laggard imports CPU profiles", clip(strings.Join(types, ", ")))
}

// unitNS is the length of one unit of a time unit in nanoseconds (0:
// not a time unit).
func unitNS(u string) float64 {
	switch u {
	case "nanoseconds", "ns":
		return 1
	case "microseconds", "us":
		return 1e3
	case "milliseconds", "ms":
		return 1e6
	case "seconds", "s":
		return 1e9
	}
	return 0
}

func fromProfile(p *profile.Profile, o Options) (*stack.Batch, error) {
	if len(p.Sample) > stack.MaxSamples {
		return nil, fmt.Errorf("%w: %d samples, at most %d in one profile", laggardv1.ErrTooLarge, len(p.Sample), stack.MaxSamples)
	}
	if len(p.Mapping) > stack.MaxMappings {
		return nil, fmt.Errorf("%w: %d mappings, at most %d in one profile", laggardv1.ErrTooLarge, len(p.Mapping), stack.MaxMappings)
	}
	idx, div, err := countIndex(p)
	if err != nil {
		return nil, err
	}
	b := &stack.Batch{StartNS: p.TimeNanos, EndNS: p.TimeNanos + max(p.DurationNanos, 0)}
	if o.StartNS != 0 || o.EndNS != 0 {
		b.StartNS, b.EndNS = o.StartNS, o.EndNS
	}
	if b.StartNS <= 0 {
		return nil, signal.FieldErrorf("start_ns", "the profile carries no time: pass start_ns and end_ns")
	}
	if pt := p.PeriodType; pt != nil && pt.Type == "cpu" && p.Period > 0 {
		if u := unitNS(pt.Unit); u > 0 {
			hz := int(math.Round(1e9 / (float64(p.Period) * u)))
			if hz >= stack.MinHz && hz <= stack.MaxHz {
				b.Hz, b.Ratio = hz, 1
			}
		}
	}
	// Mappings: kept (with a Build-ID when it is hex, the form central
	// symbolization keys on) for locations the profile did not name.
	mapIdx := map[*profile.Mapping]int32{}
	mappingOf := func(m *profile.Mapping) int32 {
		if m == nil || m.Limit <= m.Start {
			return -1
		}
		if i, ok := mapIdx[m]; ok {
			return i
		}
		bid := strings.ToLower(m.BuildID)
		if len(bid) > stack.MaxBuildIDLen || !isHex(bid) {
			bid = "" // Go's "action/content" ids and others: not an ELF note
		}
		file := m.File
		if len(file) > stack.MaxNameLen {
			file = file[:stack.MaxNameLen]
		}
		i := int32(len(b.Mappings))
		b.Mappings = append(b.Mappings, stack.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, BuildID: bid, Path: file})
		mapIdx[m] = i
		return i
	}
	frames := 0
	b.Samples = make([]stack.Sample, 0, len(p.Sample))
	for i, s := range p.Sample {
		field := func(f string) string { return "samples[" + strconv.Itoa(i) + "]." + f }
		if s == nil || idx >= len(s.Value) {
			return nil, signal.FieldErrorf(field("value"), "missing the count value")
		}
		v := s.Value[idx]
		if v < 0 {
			return nil, signal.FieldErrorf(field("value"), "negative")
		}
		n := v/div + (v%div+div/2)/div // rounds without overflowing v + div/2
		if n == 0 {
			continue // below one sample: nothing to attribute
		}
		smp := stack.Sample{Rank: o.Rank, Count: n}
		if err := labels(s, &smp); err != nil {
			return nil, prefixField(field(""), err)
		}
		for _, loc := range s.Location {
			if loc == nil {
				continue
			}
			if len(loc.Line) == 0 {
				mi := mappingOf(loc.Mapping)
				if mi >= 0 {
					// An unsymbolized address: kept raw for central
					// symbolization. pprof addresses are runtime ones;
					// the file offset stands in for the ELF virtual
					// address, which it equals for the text segment of
					// common linker layouts.
					m := loc.Mapping
					smp.Frames = append(smp.Frames, stack.Frame{Kind: stack.Native, Addr: loc.Address - m.Start + m.Offset, Mapping: mi})
				} else {
					smp.Frames = append(smp.Frames, stack.Frame{Kind: stack.Symbol, Mapping: -1, Func: "0x" + strconv.FormatUint(loc.Address, 16)})
				}
				continue
			}
			// Line[0] is the innermost inlined call: leaf first, as
			// Sample.Frames is.
			for _, ln := range loc.Line {
				f := stack.Frame{Kind: stack.Symbol, Mapping: -1}
				if fn := ln.Function; fn != nil {
					f.Func, f.File = fn.Name, fn.Filename
					if f.Func == "" {
						f.Func = fn.SystemName
					}
				}
				if f.Func == "" {
					f.Func = "0x" + strconv.FormatUint(loc.Address, 16)
				}
				f.Func, f.File = clipName(f.Func), clipName(f.File)
				if ln.Line > 0 && ln.Line <= math.MaxInt32 {
					f.Line = int32(ln.Line)
				}
				smp.Frames = append(smp.Frames, f)
			}
		}
		if len(smp.Frames) == 0 {
			smp.Frames = []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "[no frames]"}}
		}
		if len(smp.Frames) > stack.MaxFrames { // keep the leaf end: where the time went
			smp.Frames, smp.Truncated = smp.Frames[:stack.MaxFrames:stack.MaxFrames], true
		}
		frames += len(smp.Frames)
		if frames > laggardv1.MaxBatchFrames {
			return nil, fmt.Errorf("%w: more than %d frames in one profile", laggardv1.ErrTooLarge, laggardv1.MaxBatchFrames)
		}
		b.Samples = append(b.Samples, smp)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

func clipName(s string) string {
	if len(s) > stack.MaxNameLen {
		return s[:stack.MaxNameLen]
	}
	return s
}

// labels applies the sample's rank, pid, tid, comm and thread labels.
func labels(s *profile.Sample, smp *stack.Sample) error {
	num := func(key string) (int64, bool, error) {
		if v := s.NumLabel[key]; len(v) > 0 {
			return v[0], true, nil
		}
		if v := s.Label[key]; len(v) > 0 {
			n, err := strconv.ParseInt(v[0], 10, 64)
			if err != nil {
				return 0, false, signal.FieldErrorf("label."+key, "%q is not an integer", signal.Clip(v[0]))
			}
			return n, true, nil
		}
		return 0, false, nil
	}
	for _, l := range []struct {
		key    string
		dst    *int
		lo, hi int64
	}{{"rank", &smp.Rank, -1, stack.MaxRank}, {"pid", &smp.PID, 0, stack.MaxPID}, {"tid", &smp.TID, 0, stack.MaxPID}} {
		n, ok, err := num(l.key)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if n < l.lo || n > l.hi {
			return signal.FieldErrorf("label."+l.key, "%d outside [%d, %d]", n, l.lo, l.hi)
		}
		*l.dst = int(n)
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			if v := s.Label[k]; len(v) > 0 {
				return clipName(v[0])
			}
		}
		return ""
	}
	smp.Comm = str("comm", "process_name")
	smp.Thread = str("thread", "thread_name")
	return nil
}

func prefixField(path string, err error) error {
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		return &signal.FieldError{Field: path + fe.Field, Msg: fe.Msg}
	}
	return err
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Export converts a symbolized profile to pprof: sample types
// samples/count and (when the rate is known) cpu/nanoseconds, one
// function and location per interned function, a mapping per module of
// non-Python code, the rank as a numeric "rank" label. The result passes
// profile.CheckValid.
func Export(p *stack.Profile) *profile.Profile {
	out := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}},
		TimeNanos:     p.StartNS,
		DurationNanos: max(p.EndNS-p.StartNS, 0),
		Comments:      []string{"exported by laggard"},
	}
	var period int64
	if p.Hz > 0 && p.Ratio > 0 {
		period = int64(math.Round(1e9 / (float64(p.Hz) * p.Ratio)))
		out.SampleType = append(out.SampleType, &profile.ValueType{Type: "cpu", Unit: "nanoseconds"})
		out.PeriodType = &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
		out.Period = period
		out.DefaultSampleType = "cpu"
	}
	mappings := map[string]*profile.Mapping{}
	locs := make([]*profile.Location, len(p.Funcs))
	for i, f := range p.Funcs {
		fn := &profile.Function{ID: uint64(i + 1), Name: f.Name, SystemName: f.Name}
		loc := &profile.Location{ID: uint64(i + 1), Line: []profile.Line{{Function: fn}}}
		switch {
		case f.Kind == stack.Python:
			fn.Filename = f.Module
		case f.Module != "":
			m := mappings[f.Module]
			if m == nil {
				m = &profile.Mapping{ID: uint64(len(out.Mapping) + 1), File: f.Module, HasFunctions: true}
				mappings[f.Module] = m
				out.Mapping = append(out.Mapping, m)
			}
			loc.Mapping = m
		}
		out.Function = append(out.Function, fn)
		out.Location = append(out.Location, loc)
		locs[i] = loc
	}
	for _, s := range p.Stacks {
		ps := &profile.Sample{Value: []int64{s.Count}, Location: make([]*profile.Location, 0, len(s.Frames))}
		if period > 0 {
			ps.Value = append(ps.Value, mulSat(s.Count, period))
		}
		for j := len(s.Frames) - 1; j >= 0; j-- { // pprof is leaf first
			if k := s.Frames[j]; k >= 0 && int(k) < len(locs) {
				ps.Location = append(ps.Location, locs[k])
			}
		}
		if p.Rank >= 0 {
			ps.NumLabel = map[string][]int64{"rank": {int64(p.Rank)}}
		}
		out.Sample = append(out.Sample, ps)
	}
	return out
}

// mulSat is a·b for non-negative a, b, saturating at MaxInt64 (a merged
// profile's count times the sampling period can exceed int64).
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
