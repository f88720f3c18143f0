package api

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// Issue 16 item 12: one time rule for every signal. Stack and OS-stat
// windows in the far future (2^63−10 ns, year 2200) were accepted while
// profile imports refused them; a collective call could be stamped in
// 2199. Every timestamped route now refuses a time more than 5 minutes
// past the server's clock (400 naming the field, nothing stored) and
// accepts the present.
func TestOneTimeRuleForEverySignal(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	register(t, e.base, "j")
	now := time.Now().UnixNano()
	y2200 := int64(7_258_118_400)*1e9 - 10e9
	type post struct {
		path, ctype string
		body        []byte
		field       string // the field a refusal names
	}
	cases := map[string]func(start int64) post{
		"stacks": func(start int64) post {
			b := nodeStacks("n1", 0, 1)
			b.StartNS, b.EndNS = start, start+min(5e9, math.MaxInt64-start)
			js, _ := laggardv1.MarshalJSONStacks(b)
			return post{"/api/v1/jobs/j/stacks", "application/json", js, "start_ns"}
		},
		"osstats": func(start int64) post {
			b := &osstat.Batch{Node: "n1", StartNS: start, EndNS: start + min(5e9, math.MaxInt64-start),
				Points: []osstat.Point{{Name: osstat.RunQueueWait, Rank: 1, CPU: -1, Value: 0.1}}}
			pbb, _ := laggardv1.MarshalProtoOSStats(b)
			return post{"/api/v1/jobs/j/osstats", "application/x-protobuf", pbb, "start_ns"}
		},
		"collectives": func(start int64) post {
			b := callBatch(2, 0, 3, false)
			for i := range b.Calls {
				c := &b.Calls[i]
				c.EnterNS = start + int64(i)
				c.ReturnNS = c.EnterNS + min(50, math.MaxInt64-c.EnterNS)
			}
			return post{"/api/v1/jobs/j/collectives", "application/json", jsonCalls(t, b), "calls[0].enter_ns"}
		},
	}
	for name, mk := range cases {
		for _, when := range []struct {
			name string
			ns   int64
			ok   bool
		}{{"now", now, true}, {"one minute ahead", now + 60e9, true}, {"an hour ahead", now + 3600e9, false},
			{"year 2200", y2200, false}, {"2^63-10 ns", math.MaxInt64 - 10, false}} {
			p := mk(when.ns)
			a := send(t, "POST", e.base+p.path, p.ctype, p.body)
			switch {
			case when.ok && a.status != http.StatusOK:
				t.Errorf("%s stamped %s: %d %s, want 200", name, when.name, a.status, a.raw)
			case !when.ok && (a.status != http.StatusBadRequest || !strings.HasSuffix(a.body.Field, p.field[strings.LastIndexByte(p.field, '.')+1:])):
				t.Errorf("%s stamped %s: %d field %q %s, want 400 naming %s", name, when.name, a.status, a.body.Field, a.raw, p.field)
			}
		}
	}
	// Nothing from the far future was stored: the profile's latest
	// window is the present one.
	st, err := e.st.ProfileStats("j")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastNS > now+MaxImportSkewNS+10e9 {
		t.Errorf("stored profile data ends at %d, past the server's clock %d", st.LastNS, now)
	}
	cs, err := e.st.CollectiveStats("j")
	if err != nil {
		t.Fatal(err)
	}
	if cs.LastNS > now+MaxImportSkewNS {
		t.Errorf("stored collective calls end at %d, past the server's clock %d", cs.LastNS, now)
	}
}
