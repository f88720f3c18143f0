package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/demo"
)

// `laggard demo --json` keeps the job report's fields at the top level and
// puts the Greyhound report beside them.
func TestDemoJSONCarriesBothReports(t *testing.T) {
	rep := &analysis.Report{SchemaVersion: analysis.ReportSchema, JobID: "demo-1", Groups: []analysis.GroupReport{}}
	for _, tc := range []struct {
		name      string
		res       demo.Result
		greyhound bool
		errText   string
	}{
		{"both", demo.Result{Report: rep, Greyhound: ghFixture()}, true, ""},
		{"no greyhound", demo.Result{Report: rep, GreyhoundErr: "GET …/greyhound: 404"}, false, "GET …/greyhound: 404"},
	} {
		var buf bytes.Buffer
		if err := writeDemoJSON(&buf, &tc.res); err != nil {
			t.Fatal(err)
		}
		var got struct {
			analysis.Report
			Greyhound      *analysis.GreyhoundReport `json:"greyhound"`
			GreyhoundError string                    `json:"greyhound_error"`
		}
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, buf.String())
		}
		if got.SchemaVersion != analysis.ReportSchema || got.JobID != "demo-1" {
			t.Errorf("%s: job report fields not at the top level: %s", tc.name, buf.String())
		}
		if (got.Greyhound != nil) != tc.greyhound || got.GreyhoundError != tc.errText {
			t.Errorf("%s: greyhound %v, error %q", tc.name, got.Greyhound != nil, got.GreyhoundError)
		}
		if tc.greyhound && (got.Greyhound.Verdict.Kind != tc.res.Greyhound.Verdict.Kind || got.Greyhound.Iteration.MedianMS != 96) {
			t.Errorf("%s: greyhound report %+v", tc.name, got.Greyhound)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(buf.Bytes(), &raw)
		if _, ok := raw["greyhound"]; !ok {
			t.Errorf("%s: no greyhound key", tc.name)
		}
	}
}
