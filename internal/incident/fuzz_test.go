package incident

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecode: the decoder of stored and uploaded incidents never panics,
// and what it accepts re-encodes to something it accepts again.
func FuzzDecode(f *testing.F) {
	evs := []Evidence{series("j", 0, 300, slowBetween(100, 400, 150)), onset("j", EngineStageFrontier, 100, 100, 150),
		finding("j", "v", EngineGreyhound, KindGreyhoundVerdict, LayerCollective, CategoryCompute, ConfidenceHigh, 100, 200, RankTarget(2, "h"))}
	for _, inc := range fuse(evs, at(300)) {
		b, _ := json.Marshal(inc)
		f.Add(b)
	}
	f.Add([]byte(`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"resolved"}`))
	f.Add([]byte(`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"open","evidence":[{"id":"","signal":"onset"}]}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		inc, err := Decode(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(inc)
		if err != nil {
			t.Fatalf("accepted incident does not encode: %v", err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("accepted incident re-encodes to a rejected one: %v\n%s", err, again)
		}
	})
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"schema":"v0","id":"x","job":"j","state":"open"}`, "schema"},
		{`{"schema":"laggard.incident/v1","id":"","job":"j","state":"open"}`, "id"},
		{`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"gone"}`, "state"},
		{`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"resolved"}`, "resolved"},
		{`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"open","evidence":[{"id":"e","kind":"k","signal":"maybe"}]}`, "evidence[0].signal"},
		{`{"schema":"laggard.incident/v1","id":"x","job":"j","state":"open"} x`, "trailing"},
	} {
		_, err := Decode([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) = %v, want an error naming %q", tc.in, err, tc.want)
		}
	}
}
