// Package kineto imports PyTorch profiler / Kineto Chrome-trace JSON
// (torch.profiler export_chrome_trace, .json or .json.gz, one file per
// rank) into optrace events (KAIR §III-A Feature 1), streaming: the
// traceEvents array is walked element by element and each event handed to
// a callback, so memory is bounded by the largest single element plus
// fixed-size state, never by the file (multi-GB traces are normal).
//
// Tokenizer: github.com/go-json-experiment/json/jsontext (already in
// go.mod). encoding/json.Decoder.Token allocates an interface per token:
// a bare token walk measured 28 MB/s against this whole importer's
// ~230 MB/s on one core (BenchmarkStdlibTokens vs BenchmarkDecode, same
// Kineto-shaped input); jsontext's ReadValue hands back raw bytes
// valid until the next read, so keys and numbers are compared and parsed
// without allocation, and its SkipValue streams through nested values.
// goccy/go-json is not in go.mod and the issue forbids new modules.
//
// Ordering assumptions (documented, checked by tests, not enforced):
//   - A ProfilerStep#N range precedes the host events it encloses (Kineto
//     writes host activities in start order, parent first). Host events
//     take the step of the most recent enclosing range; only the last
//     maxStepRanges ranges are kept.
//   - Device activities follow host ones in the file. Device work takes
//     the step of its launching runtime call through the CUPTI
//     correlation id, and an NCCL kernel without its own "Process Group
//     Name"/"Seq" takes the instance of the host collective op
//     (record_param_comms) that enclosed the launch. The correlation
//     table is a fixed-size ring, exact while fewer than
//     Options.CorrelationWindow launches are outstanding.
//   - The legacy autograd-profiler export (torch without Kineto: a bare
//     array, no "cat") is accepted; its events read as CPU ops.
//
// Memory: the tokenizer buffers one token (or one kept args value) and
// the whitespace before it at a time, each bounded by
// Options.MaxTokenBytes (4 MiB); every other structure is fixed-size
// (step ring, launch ring, name table).
//   - A flow event ("s"/"f"/"t") binds to the complete event just before
//     it on the same pid/tid/ts (Kineto writes each flow right after its
//     slice); it sets that event's FlowID (and Correlation when absent).
//
// Timestamps: Chrome-trace ts/dur are decimal microseconds; they are read
// exactly into integer nanoseconds (no float rounding at 1.7e15 µs).
// StartNS stays on the file's own time base; when the file carries
// baseTimeNanoseconds (newer Kineto writes relative ts and puts it after
// traceEvents, so a stream cannot apply it up front) Meta.BaseTimeNS says
// what to add.
package kineto

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/wire/bound"
)

// Options tunes the importer; the zero value is usable.
type Options struct {
	// KeepArgs retains each event's args (up to optrace.MaxArgs, values
	// clipped to optrace.MaxArgLen) in Event.Args. Off by default: the
	// fields KAIR needs (correlation, External id, collective identity,
	// device, stream) are always extracted.
	KeepArgs bool
	// CorrelationWindow is the size of the launch ring (default 1<<18
	// entries, 10 MiB). Kineto writes every host event of the window before
	// the device events, so it should cover the launches of one capture;
	// beyond it device work falls back to the step range by timestamp and
	// NCCL kernels lose the inherited collective instance.
	CorrelationWindow int
	// MaxTokenBytes bounds one JSON string, number or literal, or one
	// whitespace run between tokens (default
	// bound.DefaultMaxTokenBytes, 4 MiB): the tokenizer holds a token
	// and the whitespace before it whole, so without a bound a small gzip
	// of whitespace costs gigabytes. Past it Decode fails with an error
	// wrapping bound.ErrTooLarge (= laggardv1.ErrTooLarge).
	MaxTokenBytes int64

	// deferLinks (ReadTrace) leaves Step -1 on everything but ProfilerStep
	// ranges, inherits no collective instance and hands flows to flow
	// instead of binding them: link resolves them over the whole trace.
	deferLinks bool
	flow       func(flowRef) error
}

// Meta is what the file says about itself, plus counts.
type Meta struct {
	// Rank / WorldSize / Backend from distributedInfo; Rank -1 if absent.
	Rank      int    `json:"rank"`
	WorldSize int    `json:"world_size,omitempty"`
	Backend   string `json:"backend,omitempty"`
	// BaseTimeNS from baseTimeNanoseconds (HasBaseTime says it was there);
	// add it to StartNS for the epoch clock.
	BaseTimeNS  int64 `json:"base_time_ns,omitempty"`
	HasBaseTime bool  `json:"has_base_time,omitempty"`
	// Devices is the number of deviceProperties entries.
	Devices       int    `json:"devices,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
	TraceName     string `json:"trace_name,omitempty"`
	// Elements counts traceEvents elements; Events those emitted; Flows
	// flow events bound or not; Skipped metadata/instant/counter/B/E
	// elements; Steps ProfilerStep ranges; Clipped names/args shortened.
	Elements int64 `json:"elements"`
	Events   int64 `json:"events"`
	Flows    int64 `json:"flows"`
	Skipped  int64 `json:"skipped"`
	Steps    int64 `json:"steps"`
	Clipped  int64 `json:"clipped"`
	// Reordered (ReadTrace) counts events that come before, in the file,
	// the ProfilerStep range or the launch they belong to: the file is not
	// in time order (the format requires none), and a reader that links
	// in file order would have lost their step.
	Reordered int64 `json:"reordered,omitempty"`
}

const (
	maxStepRanges = 64
	// The name table stops growing past maxInterned names or
	// maxInternedBytes (kernel names run to KiBs); later names are still
	// emitted, just not shared.
	maxInterned      = 1 << 16
	maxInternedBytes = 8 << 20
	stepPrefix       = "ProfilerStep#"
)

// Decode reads one rank's trace from r (gzip sniffed by magic bytes) and
// calls emit for every operator/kernel event in file order. The *Event is
// reused after emit returns: copy what you keep. An error from emit stops
// decoding and is returned as is.
func Decode(r io.Reader, opt Options, emit func(*optrace.Event) error) (Meta, error) {
	br := bufio.NewReaderSize(r, 1<<20) // 1 MiB: fewer read syscalls (8% of a file decode at 64 KiB)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return Meta{Rank: -1}, fmt.Errorf("gzip: %w", err)
		}
		defer gz.Close()
		src = gz
	}
	tl := bound.NewTokenLimitReader(src, opt.MaxTokenBytes)
	d := newDecoder(tl, opt, emit)
	err := d.run()
	if terr := bound.Err(tl); terr != nil {
		// The bound's own words (the run, its length and offset), not
		// the tokenizer's read error wrapped around them.
		err = fmt.Errorf("traceEvents: %w", terr)
	}
	return d.meta, err
}

type stepRange struct{ start, end, step int64 }

// launch is what device work inherits from the runtime call that launched
// it: its step and, for NCCL kernels (which torch does not annotate), the
// collective instance of the host op that issued the launch.
type launch struct {
	corr, step, seq int64
	comm            string
}

// hostColl is the latest host-side collective op with a known instance.
type hostColl struct {
	tid, ext, start, end, seq int64
	comm                      string
}

type decoder struct {
	dec  *jsontext.Decoder
	opt  Options
	emit func(*optrace.Event) error
	meta Meta

	ev      optrace.Event // pending event (one-element lookahead for flows)
	pending bool

	steps    [maxStepRanges]stepRange
	nSteps   int
	corr     []launch
	lastColl hostColl
	names    map[string]string
	namesLen int

	// per-element scratch
	name, cat, kbuf, sbuf []byte
	args                  []optrace.Arg
}

func newDecoder(r io.Reader, opt Options, emit func(*optrace.Event) error) *decoder {
	w := opt.CorrelationWindow
	if w <= 0 {
		w = 1 << 18
	}
	return &decoder{
		dec:   jsontext.NewDecoder(r, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)),
		opt:   opt,
		emit:  emit,
		meta:  Meta{Rank: -1},
		corr:  make([]launch, w),
		names: make(map[string]string),
	}
}

func (d *decoder) run() error {
	switch d.dec.PeekKind() {
	case '{':
	case '[': // JSON Array Format: a bare event list.
		if err := d.events(); err != nil {
			return err
		}
		return d.eof()
	default:
		if _, err := d.dec.ReadToken(); err != nil {
			return fmt.Errorf("top level: %w", err)
		}
		return errors.New("top level: want a JSON object or array")
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return fmt.Errorf("top level: %w", err)
	}
	for d.dec.PeekKind() != '}' {
		k, err := d.key()
		if err != nil {
			return fmt.Errorf("top level: %w", err)
		}
		switch string(k) {
		case "traceEvents":
			if d.dec.PeekKind() != '[' {
				return errors.New("traceEvents: want an array")
			}
			err = d.events()
		case "distributedInfo":
			err = d.distInfo()
		case "baseTimeNanoseconds":
			var v jsontext.Value
			if v, err = d.dec.ReadValue(); err == nil {
				d.meta.BaseTimeNS, err = parseInt(v)
				d.meta.HasBaseTime = err == nil
			}
			err = wrap("baseTimeNanoseconds", err)
		case "schemaVersion":
			var v jsontext.Value
			if v, err = d.dec.ReadValue(); err == nil && v.Kind() == '0' {
				d.meta.SchemaVersion, err = parseInt(v)
			}
			err = wrap("schemaVersion", err)
		case "traceName":
			var v jsontext.Value
			if v, err = d.dec.ReadValue(); err == nil && v.Kind() == '"' {
				var s []byte
				if s, err = d.str(v); err == nil {
					d.meta.TraceName = clip(string(s), optrace.MaxArgLen)
				}
			}
			err = wrap("traceName", err)
		case "deviceProperties":
			err = wrap("deviceProperties", d.countArray(&d.meta.Devices))
		default:
			err = wrap(string(k), d.dec.SkipValue())
		}
		if err != nil {
			return err
		}
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return fmt.Errorf("top level: %w", err)
	}
	return d.eof()
}

func (d *decoder) eof() error {
	if _, err := d.dec.ReadToken(); err != io.EOF {
		if err == nil {
			return errors.New("top level: data after the trace")
		}
		return fmt.Errorf("top level: %w", err)
	}
	return nil
}

func wrap(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", field, err)
}

func (d *decoder) countArray(n *int) error {
	if d.dec.PeekKind() != '[' {
		return d.dec.SkipValue()
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return err
	}
	for d.dec.PeekKind() != ']' {
		if err := d.dec.SkipValue(); err != nil {
			return err
		}
		*n++
	}
	_, err := d.dec.ReadToken()
	return err
}

func (d *decoder) distInfo() error {
	if d.dec.PeekKind() != '{' {
		return wrap("distributedInfo", d.dec.SkipValue())
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return wrap("distributedInfo", err)
	}
	for d.dec.PeekKind() != '}' {
		k, err := d.key()
		if err != nil {
			return wrap("distributedInfo", err)
		}
		field := "distributedInfo." + string(k)
		isRank := string(k) == "rank"
		switch string(k) {
		case "rank", "world_size":
			v, err := d.dec.ReadValue()
			if err != nil {
				return wrap(field, err)
			}
			n, err := parseInt(v)
			if err == nil && (n < 0 || n > math.MaxInt32) {
				err = fmt.Errorf("%d out of range", n)
			}
			if err != nil {
				return wrap(field, err)
			}
			if isRank {
				d.meta.Rank = int(n)
			} else {
				d.meta.WorldSize = int(n)
			}
		case "backend":
			v, err := d.dec.ReadValue()
			if err != nil {
				return wrap(field, err)
			}
			if v.Kind() == '"' {
				s, err := d.str(v)
				if err != nil {
					return wrap(field, err)
				}
				d.meta.Backend = clip(string(s), optrace.MaxArgLen)
			}
		default:
			if err := d.dec.SkipValue(); err != nil {
				return wrap(field, err)
			}
		}
	}
	_, err := d.dec.ReadToken()
	return wrap("distributedInfo", err)
}

// key reads an object name and returns it unquoted in d.kbuf, valid until
// the next key call (the tokenizer's own bytes die at the next read).
func (d *decoder) key() ([]byte, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	b := v[1 : len(v)-1]
	if bytes.IndexByte(b, '\\') < 0 {
		d.kbuf = append(d.kbuf[:0], b...)
		return d.kbuf, nil
	}
	d.kbuf, err = jsontext.AppendUnquote(d.kbuf[:0], v)
	return d.kbuf, err
}

// str unquotes a string value into scratch (valid until the next str).
func (d *decoder) str(v jsontext.Value) ([]byte, error) {
	if v.Kind() != '"' {
		return nil, fmt.Errorf("want a string, got %s", v.Kind())
	}
	b := v[1 : len(v)-1]
	if bytes.IndexByte(b, '\\') < 0 {
		return b, nil
	}
	var err error
	d.sbuf, err = jsontext.AppendUnquote(d.sbuf[:0], v)
	return d.sbuf, err
}

func (d *decoder) events() error {
	if _, err := d.dec.ReadToken(); err != nil {
		return wrap("traceEvents", err)
	}
	for i := 0; d.dec.PeekKind() != ']'; i++ {
		if d.dec.PeekKind() == 0 {
			// Let ReadToken report the syntax/IO error.
			_, err := d.dec.ReadToken()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("traceEvents[%d]: %w", i, err)
		}
		d.meta.Elements++
		if err := d.element(i); err != nil {
			return err
		}
	}
	if err := d.flush(); err != nil {
		return err
	}
	_, err := d.dec.ReadToken()
	return wrap("traceEvents", err)
}

func (d *decoder) flush() error {
	if !d.pending {
		return nil
	}
	d.pending = false
	d.meta.Events++
	return d.emit(&d.ev)
}

// raw is one element's fields as read.
type raw struct {
	ph                     byte
	hasName, hasTS, hasDur bool
	ts, dur                int64
	pid, tid, id           int64
	corr, ext, seq         int64
	device, stream         int64
	hasDevice, hasStream   bool
	comm                   string
}

func (d *decoder) element(i int) error {
	ef := func(field string, err error) error {
		if field == "" {
			return fmt.Errorf("traceEvents[%d]: %w", i, err)
		}
		return fmt.Errorf("traceEvents[%d].%s: %w", i, field, err)
	}
	if d.dec.PeekKind() != '{' {
		if err := d.dec.SkipValue(); err != nil {
			return ef("", err)
		}
		return ef("", errors.New("want an object"))
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return ef("", err)
	}
	r := raw{seq: -1}
	d.name, d.cat = d.name[:0], d.cat[:0]
	d.args = nil
	for d.dec.PeekKind() != '}' {
		k, err := d.key()
		if err != nil {
			return ef("", err)
		}
		kf := fieldOf(k)
		if kf == fArgs {
			if err := d.readArgs(&r); err != nil {
				return ef("args", err)
			}
			continue
		}
		if p := d.dec.PeekKind(); p == '{' || p == '[' {
			if err := d.dec.SkipValue(); err != nil {
				return ef(string(k), err)
			}
			continue
		}
		v, err := d.dec.ReadValue()
		if err != nil {
			return ef(string(k), err)
		}
		switch kf {
		case fPh:
			s, err := d.str(v)
			if err != nil {
				return ef("ph", err)
			}
			if len(s) > 0 {
				r.ph = s[0]
			}
		case fName:
			s, err := d.str(v)
			if err != nil {
				return ef("name", err)
			}
			d.name = append(d.name, s...)
			r.hasName = true
		case fCat:
			s, err := d.str(v)
			if err != nil {
				return ef("cat", err)
			}
			d.cat = append(d.cat, s...)
		case fTS:
			if r.ts, err = parseMicros(v); err != nil {
				return ef("ts", err)
			}
			r.hasTS = true
		case fDur:
			if r.dur, err = parseMicros(v); err != nil {
				return ef("dur", err)
			}
			r.hasDur = true
		case fPID:
			if r.pid, err = d.idValue(v); err != nil {
				return ef("pid", err)
			}
		case fTID:
			if r.tid, err = d.idValue(v); err != nil {
				return ef("tid", err)
			}
		case fID:
			if r.id, err = d.idValue(v); err != nil {
				return ef("id", err)
			}
		}
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return ef("", err)
	}
	switch r.ph {
	case 'X':
		return d.complete(&r, ef)
	case 's', 'f', 't':
		d.meta.Flows++
		if d.opt.deferLinks {
			if r.id == 0 {
				return nil
			}
			return d.opt.flow(flowRef{pid: r.pid, tid: r.tid, ts: r.ts, id: r.id})
		}
		if d.pending && d.ev.PID == r.pid && d.ev.StartNS == r.ts && r.id != 0 &&
			(d.ev.TID == r.tid || d.ev.Stream == r.tid) {
			d.ev.FlowID = r.id
			if d.ev.Correlation == 0 {
				d.ev.Correlation = r.id
			}
		}
		return nil
	case 0:
		return ef("ph", errors.New("missing"))
	default:
		d.meta.Skipped++
		return nil
	}
}

func (d *decoder) complete(r *raw, ef func(string, error) error) error {
	switch {
	case !r.hasName || len(d.name) == 0:
		return ef("name", errors.New("missing"))
	case !r.hasTS:
		return ef("ts", errors.New("missing"))
	case !r.hasDur:
		return ef("dur", errors.New("missing"))
	case r.ts < -optrace.MaxAbsNS || r.ts > optrace.MaxAbsNS:
		return ef("ts", fmt.Errorf("%d ns out of range", r.ts))
	case r.dur < 0 || r.dur > optrace.MaxDurNS:
		return ef("dur", fmt.Errorf("%d ns out of range [0,%d]", r.dur, optrace.MaxDurNS))
	}
	if err := d.flush(); err != nil {
		return err
	}
	e := &d.ev
	*e = optrace.Event{
		PID: r.pid, Device: -1, StartNS: r.ts, DurNS: r.dur, Step: -1,
		Correlation: r.corr, ExternalID: r.ext, Seq: -1, Args: d.args,
	}
	if len(d.name) > optrace.MaxNameLen {
		d.name = d.name[:optrace.MaxNameLen]
		d.meta.Clipped++
	}
	e.Name = d.intern(d.name)
	e.Cat = category(d.cat, d.name)
	device := isDeviceCat(d.cat)
	if device {
		e.Device = int(r.pid)
		if r.hasDevice {
			e.Device = int(r.device)
		}
		e.Stream = r.tid
		if r.hasStream {
			e.Stream = r.stream
		}
		if e.Device < 0 || e.Device >= optrace.MaxDevice {
			return ef("args.device", fmt.Errorf("%d out of range", e.Device))
		}
	} else {
		e.TID = r.tid
	}
	if r.comm != "" {
		e.Comm = r.comm
		if r.seq >= 0 && r.seq <= optrace.MaxSeq {
			e.Seq = r.seq
		}
	}
	// Step: ProfilerStep#N ranges (host), correlation (device).
	if n, ok := profilerStep(d.name); ok {
		e.Cat = optrace.UserRange
		e.Step = n
		d.steps[d.nSteps%maxStepRanges] = stepRange{r.ts, r.ts + r.dur, n}
		d.nSteps++
		d.meta.Steps++
	} else if !d.opt.deferLinks {
		var slot *launch
		if r.corr > 0 {
			slot = &d.corr[r.corr%int64(len(d.corr))]
		}
		if device && slot != nil && slot.corr == r.corr {
			e.Step = slot.step
			if e.Cat == optrace.Collective && e.Comm == "" && slot.comm != "" {
				e.Comm, e.Seq = slot.comm, slot.seq
			}
		}
		if e.Step < 0 {
			e.Step = d.stepAt(r.ts)
		}
		if !device && e.Cat == optrace.Collective && e.Comm != "" && e.Seq >= 0 {
			d.lastColl = hostColl{tid: r.tid, ext: r.ext, start: r.ts, end: r.ts + r.dur, seq: e.Seq, comm: e.Comm}
		}
		if !device && slot != nil {
			*slot = launch{corr: r.corr, step: e.Step, seq: -1}
			// The launch belongs to the collective op enclosing it on the
			// same thread (or sharing its External id).
			if c := &d.lastColl; c.comm != "" && c.tid == r.tid &&
				((r.ext != 0 && r.ext == c.ext) || (r.ts >= c.start && r.ts < c.end)) {
				slot.comm, slot.seq = c.comm, c.seq
			}
		}
	}
	d.pending = true
	return nil
}

// stepAt finds the newest ProfilerStep range containing ts.
func (d *decoder) stepAt(ts int64) int64 {
	n := min(d.nSteps, maxStepRanges)
	for j := 1; j <= n; j++ {
		s := &d.steps[(d.nSteps-j)%maxStepRanges]
		if ts >= s.start && ts < s.end {
			return s.step
		}
	}
	return -1
}

func profilerStep(name []byte) (int64, bool) {
	if !bytes.HasPrefix(name, []byte(stepPrefix)) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(name[len(stepPrefix):]), 10, 64)
	if err != nil || n < 0 || n > optrace.MaxStep {
		return 0, false
	}
	return n, true
}

func (d *decoder) intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.names) < maxInterned && d.namesLen+len(s) <= maxInternedBytes {
		d.names[s] = s
		d.namesLen += len(s)
	}
	return s
}

func isDeviceCat(cat []byte) bool {
	switch string(cat) {
	case "kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "gpu_user_annotation":
		return true
	}
	return false
}

func category(cat, name []byte) optrace.Category {
	switch string(cat) {
	case "cpu_op", "Operator", "operator":
		if isCollectiveOp(name) {
			return optrace.Collective
		}
		return optrace.CPUOp
	case "kernel", "Kernel":
		if bytes.HasPrefix(name, []byte("nccl")) {
			return optrace.Collective
		}
		return optrace.GPUKernel
	case "gpu_memcpy", "Memcpy":
		return optrace.Memcpy
	case "gpu_memset", "Memset":
		return optrace.Memset
	case "user_annotation", "gpu_user_annotation", "user_range":
		return optrace.UserRange
	case "cuda_runtime", "Runtime", "cuda_driver", "Driver":
		return optrace.Runtime
	case "python_function":
		return optrace.Python
	case "":
		// The legacy autograd profiler (torch built without Kineto)
		// writes a bare array of uncategorized host ops and ranges.
		if isCollectiveOp(name) {
			return optrace.Collective
		}
		return optrace.CPUOp
	}
	return optrace.Other
}

// isCollectiveOp: host-side communication ops as torch names them
// (record_param_comms since 2.0; "nccl:all_reduce"/"gloo:…" in 1.x;
// c10d:: ops).
func isCollectiveOp(name []byte) bool {
	return string(name) == "record_param_comms" || bytes.HasPrefix(name, []byte("nccl:")) ||
		bytes.HasPrefix(name, []byte("gloo:")) || bytes.HasPrefix(name, []byte("c10d::"))
}

func (d *decoder) readArgs(r *raw) error {
	if d.dec.PeekKind() != '{' {
		return d.dec.SkipValue()
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return err
	}
	for d.dec.PeekKind() != '}' {
		k, err := d.key()
		if err != nil {
			return err
		}
		composite := d.dec.PeekKind() == '{' || d.dec.PeekKind() == '['
		keep := d.opt.KeepArgs && len(d.args) < optrace.MaxArgs
		if composite && !keep {
			if err := d.dec.SkipValue(); err != nil {
				return wrap(string(k), err)
			}
			continue
		}
		var key string
		if keep {
			key = clip(string(k), optrace.MaxArgLen)
			if len(key) < len(k) {
				d.meta.Clipped++
			}
		}
		arg := argOf(k)
		known := arg != aNone
		v, err := d.dec.ReadValue()
		if err != nil {
			return wrap(arg.String(), err)
		}
		if known && !composite {
			if err := d.knownArg(r, arg, v); err != nil {
				return err
			}
		}
		if keep {
			val := string(v)
			if v.Kind() == '"' {
				s, err := d.str(v)
				if err != nil {
					return wrap(key, err)
				}
				val = string(s)
			}
			if len(val) > optrace.MaxArgLen {
				d.meta.Clipped++
			}
			d.args = append(d.args, optrace.Arg{Key: key, Value: clip(val, optrace.MaxArgLen)})
		}
	}
	_, err := d.dec.ReadToken()
	return err
}

func (d *decoder) knownArg(r *raw, a argKey, v jsontext.Value) error {
	field := a.String()
	switch a {
	case aPGName, aPGDesc:
		if v.Kind() != '"' {
			return nil
		}
		s, err := d.str(v)
		if err != nil {
			return wrap(field, err)
		}
		// The name identifies the communicator; the description is only
		// a fallback.
		if len(s) > 0 && (r.comm == "" || a != aPGDesc) {
			r.comm = d.intern([]byte(clip(string(s), optrace.MaxCommLen)))
		}
		return nil
	}
	n, err := d.idValue(v)
	if err != nil {
		return wrap(field, err)
	}
	switch a {
	case aCorr:
		r.corr = n
	case aExt:
		r.ext = n
	case aSeq:
		r.seq = n
	case aDevice:
		r.device, r.hasDevice = n, true
	case aStream:
		r.stream, r.hasStream = n, true
	}
	return nil
}

// idValue reads an integer id that may be written as a number or a string
// ("stream 7", "7", or an opaque label, hashed to a stable positive id).
func (d *decoder) idValue(v jsontext.Value) (int64, error) {
	switch v.Kind() {
	case '0':
		return parseInt(v)
	case '"':
		s, err := d.str(v)
		if err != nil {
			return 0, err
		}
		t := bytes.TrimPrefix(s, []byte("stream "))
		if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return n, nil
		}
		// FNV-1a, masked positive: labels like "Spans" or "PyTorch Profiler".
		h := uint64(14695981039346656037)
		for _, c := range s {
			h = (h ^ uint64(c)) * 1099511628211
		}
		return int64(h >> 2), nil
	case 'n':
		return 0, nil
	}
	return 0, fmt.Errorf("want a number or string, got %s", v.Kind())
}
