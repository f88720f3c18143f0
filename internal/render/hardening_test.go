package render

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
)

// D5: a report whose numbers are not finite or out of range (shares from
// sums that overflowed, a hand-edited JSON report) renders instead of
// panicking with "strings: negative Repeat count".
func TestD5_TextSurvivesNonFiniteShares(t *testing.T) {
	for _, share := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.4, 7, 1e300} {
		rep := &analysis.Report{JobID: "j", Groups: []analysis.GroupReport{
			{Group: "a", NumRanks: 2, Report: &stagefrontier.Report{Stages: []string{"x", "y"}, Share: []float64{share, 0.5}, AdvanceMS: []float64{1}, NumSteps: 1}},
			{Group: "b", NumRanks: 1}, // no report
		}}
		var buf bytes.Buffer
		if err := Text(&buf, rep); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "█"); n > 2*barWidth {
			t.Errorf("share %v: %d bar cells", share, n)
		}
		if !strings.Contains(buf.String(), "stage") {
			t.Errorf("share %v: no stage table:\n%s", share, buf.String())
		}
	}
}
