package analysis

import (
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

func testPlan() *ValidationPlan {
	return &ValidationPlan{ID: "v-1", AtStep: 100, DeadlineMS: 30000,
		GEMM: &GEMMTest{Ranks: []int{0, 1, 2, 3}, N: 256, Dtype: "float32", Reps: 3},
		P2P: &P2PTest{SizesBytes: []int64{1 << 24, 1 << 25}, Reps: 3,
			Passes: [][]Link{{{Src: 0, Dst: 1}, {Src: 2, Dst: 3}}, {{Src: 1, Dst: 2}, {Src: 3, Dst: 0}}}}}
}

func TestDecodeValidationResult(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"ok", `{"rank":1,"gemm_ms":[3.1,3,3.2],"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":[12,11.8,12.1]},{"pass":1,"src":1,"dst":2,"bytes":33554432,"ms":[20]}]}`, ""},
		{"missed", `{"rank":3,"missed":true}`, ""},
		// review2 #7: strict decoding; a GEMM-listed rank reports its times.
		{"unknown field", `{"rank":0,"gemm_ms":[1],"host":"n1"}`, "host"},
		{"misnamed field", `{"rank":0,"gemm":[1]}`, "gemm"},
		{"name in another case", `{"Rank":0,"gemm_ms":[1]}`, "Rank"},
		{"unknown nested field", `{"rank":0,"gemm_ms":[1],"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":[1],"x":1}]}`, "p2p[0].x"},
		{"duplicate key", `{"rank":0,"rank":1,"gemm_ms":[1]}`, "rank"},
		{"top-level array", `[]`, "body"},
		{"top-level null", `null`, "body"},
		{"gemm rank without times", `{"rank":2}`, "gemm_ms"},
		{"gemm rank with an error", `{"rank":2,"error":"cuda: out of memory"}`, ""},
		{"gemm rank, empty lists, missed", `{"rank":2,"missed":true,"gemm_ms":[],"p2p":[]}`, ""},
		{"rank out of world", `{"rank":4}`, "rank"},
		{"negative rank", `{"rank":-1}`, "rank"},
		{"rank as string", `{"rank":"1"}`, "rank"},
		{"not json", `rank=1`, "body"},
		{"trailing data", `{"rank":1} {}`, "body"},
		{"zero time", `{"rank":1,"gemm_ms":[0]}`, "gemm_ms[0]"},
		{"huge time", `{"rank":1,"gemm_ms":[1e300]}`, "gemm_ms[0]"},
		{"missed with data", `{"rank":1,"missed":true,"gemm_ms":[1]}`, "missed"},
		{"wrong nested type", `{"rank":0,"gemm_ms":[1],"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":["1"]}]}`, "p2p[0].ms[0]"},
		{"pass out of plan", `{"rank":0,"p2p":[{"pass":2,"src":0,"dst":1,"bytes":16777216,"ms":[1]}]}`, "p2p[0].pass"},
		{"link not in pass", `{"rank":0,"p2p":[{"pass":1,"src":0,"dst":1,"bytes":16777216,"ms":[1]}]}`, "p2p[0]"},
		{"other ranks' link", `{"rank":0,"p2p":[{"pass":0,"src":2,"dst":3,"bytes":16777216,"ms":[1]}]}`, "p2p[0]"},
		{"size not in plan", `{"rank":0,"p2p":[{"pass":0,"src":0,"dst":1,"bytes":1000,"ms":[1]}]}`, "p2p[0].bytes"},
		{"no reps", `{"rank":0,"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":[]}]}`, "p2p[0].ms"},
		{"bad rep", `{"rank":0,"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":[1,-2]}]}`, "p2p[0].ms[1]"},
		{"too many reps", `{"rank":0,"gemm_ms":[` + strings.Repeat("1,", 64) + `1]}`, "gemm_ms"},
		{"long error", `{"rank":0,"error":"` + strings.Repeat("x", 1025) + `"}`, "error"},
		// issue 16: the rank's pause, so the server masks it out of detection
		{"pause", `{"rank":1,"gemm_ms":[3],"paused_from_ns":1750000000000000000,"paused_to_ns":1750000012000000000}`, ""},
		{"pause end only", `{"rank":1,"gemm_ms":[3],"paused_to_ns":1750000012000000000}`, "paused_to_ns"},
		{"pause backwards", `{"rank":1,"gemm_ms":[3],"paused_from_ns":1750000012000000000,"paused_to_ns":1750000000000000000}`, "paused_to_ns"},
		{"pause of a day", `{"rank":1,"gemm_ms":[3],"paused_from_ns":1750000000000000000,"paused_to_ns":1750086400000000000}`, "paused_to_ns"},
		{"pause negative", `{"rank":1,"gemm_ms":[3],"paused_from_ns":-5,"paused_to_ns":1}`, "paused_from_ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := DecodeValidationResult(strings.NewReader(tc.body), testPlan(), 4)
			if tc.field == "" {
				if err != nil || res == nil {
					t.Fatalf("want ok, got %v", err)
				}
				return
			}
			var fe *signal.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a field error naming %q, got %v", tc.field, err)
			}
			if fe.Field != tc.field {
				t.Fatalf("error names %q, want %q (%v)", fe.Field, tc.field, err)
			}
		})
	}
}

func TestValidationID(t *testing.T) {
	for _, s := range []string{"v-1", "v-42", "v-4294967295"} {
		n, err := ParseValidationID(s)
		if err != nil || ValidationID(n) != s {
			t.Errorf("%s: %d, %v", s, n, err)
		}
	}
	for _, s := range []string{"", "v-0", "v-01", "1", "v-x", "v-4294967296", "v--1", "v-+1"} {
		if _, err := ParseValidationID(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzDecodeValidationResult(f *testing.F) {
	for _, s := range []string{
		`{"rank":1,"gemm_ms":[3.1],"p2p":[{"pass":0,"src":0,"dst":1,"bytes":16777216,"ms":[12]}]}`,
		`{"rank":3,"missed":true}`, `{"rank":1e3}`, `[]`, `{"p2p":[{"pass":-1}]}`, `{"gemm_ms":[NaN]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := DecodeValidationResult(strings.NewReader(string(b)), testPlan(), 4)
		if err != nil {
			var fe *signal.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error without a field: %v", err)
			}
			return
		}
		// What is accepted passes validation again (the decoder checks all).
		if err := validateResult(res, testPlan(), 4); err != nil {
			t.Fatalf("accepted result fails Validate: %v", err)
		}
	})
}
