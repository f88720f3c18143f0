package kineto

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

func TestReadTrace(t *testing.T) {
	const withBase = `{"distributedInfo":{"rank":2},"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5,"args":{"k":"v"}},
{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":20,"dur":5}],
"baseTimeNanoseconds":1000000000}`
	const relative = `[{"ph":"X","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5}]`
	for _, tc := range []struct {
		name, in  string
		opt       ReadOptions
		rank      int
		n         int
		start0    int64
		wantErr   error
		wantField string
	}{
		{name: "base time from the trace wins over BaseNS", in: withBase, opt: ReadOptions{BaseNS: 7}, rank: 2, n: 2, start0: 1_000_010_000},
		{name: "relative ts get BaseNS", in: relative, opt: ReadOptions{BaseNS: 5_000_000_000}, rank: -1, n: 1, start0: 5_000_010_000},
		{name: "no base: unchanged", in: relative, rank: -1, n: 1, start0: 10_000},
		{name: "event bound", in: withBase, opt: ReadOptions{MaxEvents: 1}, wantErr: ErrTooManyEvents},
		{name: "base out of range", in: relative, opt: ReadOptions{BaseNS: optrace.MaxAbsNS}, wantField: "traceEvents[0].ts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, meta, err := ReadTrace(strings.NewReader(tc.in), tc.opt)
			var fe *signal.FieldError
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			case tc.wantField != "":
				if !errors.As(err, &fe) || fe.Field != tc.wantField || !errors.Is(err, ErrTimeBase) {
					t.Fatalf("err %v, want field %s", err, tc.wantField)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if tr.Rank != tc.rank || meta.Rank != tc.rank || len(tr.Events) != tc.n || tr.Events[0].StartNS != tc.start0 {
				t.Fatalf("rank %d events %d start %d, want %d %d %d", tr.Rank, len(tr.Events), tr.Events[0].StartNS, tc.rank, tc.n, tc.start0)
			}
			if tr.Events[0].Args != nil {
				t.Error("args kept without KeepArgs")
			}
		})
	}
}

// A done context stops the decode with its error.
func TestReadTraceContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := ReadTrace(strings.NewReader(`[{"ph":"X","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5}]`), ReadOptions{Ctx: ctx})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}
