package kineto

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// ReadTrace's errors besides Decode's: past ReadOptions.MaxEvents, and a
// time base that moves an event out of optrace's range (wrapped with a
// *signal.FieldError naming the event).
var (
	ErrTooManyEvents = errors.New("kineto: too many events")
	ErrTimeBase      = errors.New("kineto: time base out of range")
)

// ReadOptions tunes ReadTrace.
type ReadOptions struct {
	Options
	// MaxEvents bounds the events kept (memory: a few hundred bytes
	// each); past it ReadTrace stops with ErrTooManyEvents. ≤ 0: no bound.
	MaxEvents int
	// Ctx, if set, stops a long decode once it is done (ReadTrace then
	// fails with its error): an interrupted command, a client that left.
	Ctx context.Context
	// BaseNS is added to every timestamp when the trace has no
	// baseTimeNanoseconds: the caller's epoch-ns estimate of ts 0 for
	// profilers that write relative times (0: leave them).
	BaseNS int64
}

// ReadTrace decodes one rank's trace into memory (the server's upload and
// `laggard trace` share it): every event, in any order (steps, launches
// and flows are linked over the whole trace, Meta.Reordered counts what
// came before what it belongs to), args only with KeepArgs, and
// timestamps moved to epoch ns on the rank's clock — by the trace's
// baseTimeNanoseconds when present, else by BaseNS — so ranks share a
// time base before clock alignment (KAIR Feature 4). The trace's Rank is
// Meta.Rank (-1 when the file does not say; the caller decides).
func ReadTrace(r io.Reader, opt ReadOptions) (*optrace.Trace, Meta, error) {
	t := &optrace.Trace{Rank: -1}
	if opt.Ctx != nil {
		r = ctxReader{opt.Ctx, r}
	}
	// Steps, launches and flows are linked after the whole file is read
	// (link.go): the Chrome trace format requires no order.
	var flows []flowRef
	o := opt.Options
	o.deferLinks = true
	o.flow = func(f flowRef) error {
		if opt.MaxEvents > 0 && len(flows) >= opt.MaxEvents {
			return ErrTooManyEvents
		}
		flows = append(flows, f)
		return nil
	}
	meta, err := Decode(r, o, func(e *optrace.Event) error {
		if opt.MaxEvents > 0 && len(t.Events) >= opt.MaxEvents {
			return ErrTooManyEvents
		}
		ev := *e
		if !opt.KeepArgs {
			ev.Args = nil
		}
		t.Events = append(t.Events, ev)
		return nil
	})
	if err != nil {
		return nil, meta, err
	}
	meta.Reordered = link(t.Events, flows)
	t.Rank = meta.Rank
	shift := opt.BaseNS
	if meta.HasBaseTime {
		shift = meta.BaseTimeNS
	}
	if shift != 0 {
		for i := range t.Events {
			e := &t.Events[i]
			s := e.StartNS + shift
			if s < -optrace.MaxAbsNS || s > optrace.MaxAbsNS || (shift > 0) != (s > e.StartNS) {
				return nil, meta, fmt.Errorf("%w: %w", ErrTimeBase, signal.FieldErrorf(fmt.Sprintf("traceEvents[%d].ts", i),
					"%d ns past the base time %d is out of range", e.StartNS, shift))
			}
			e.StartNS = s
		}
	}
	// One order whatever the file's: the engine breaks ties by position.
	t.Sort()
	return t, meta, nil
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
