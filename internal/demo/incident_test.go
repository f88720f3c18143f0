package demo

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// fixture reads one of the render package's fixture incidents (the JSON
// the API serves).
func fixture(t *testing.T, name string) incident.Incident {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../render/testdata/incidents", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var inc incident.Incident
	if err := json.Unmarshal(b, &inc); err != nil {
		t.Fatal(err)
	}
	return inc
}

func inject(job, fault string, rank int) Injected {
	return Injected{Job: job, Fault: fault, Rank: rank, DelayMS: 120, What: fault + " on rank " + string(rune('0'+rank))}
}

// Issue 17 item 7: the incident's stated cause against the injected
// fault — right, withheld (counted apart), wrong, missed — with the
// category checked and the confidence kept.
func TestGradeIncidents(t *testing.T) {
	open, withheld, uniform, two, resolved := fixture(t, "open"), fixture(t, "withheld"), fixture(t, "uniform"), fixture(t, "two-faults"), fixture(t, "resolved")
	opJob := open
	opJob.Hypotheses = []incident.Hypothesis{{Target: incident.Target{Kind: incident.TargetOperator, Name: "aten::mm", Rank: 5}, Stated: true, Category: incident.CategoryCompute}}
	unknownKind := open
	unknownKind.Hypotheses = slices.Clone(open.Hypotheses)
	unknownKind.Hypotheses[0].Category = incident.CategoryUnknown
	linkOnly := open
	linkOnly.Hypotheses = []incident.Hypothesis{{Target: incident.LinkTarget(5, 6), Stated: true, Category: incident.CategoryNetwork}}
	extra := open
	extra.Hypotheses = append(slices.Clone(open.Hypotheses), incident.Hypothesis{Target: incident.RankTarget(3, ""), Stated: true, Category: incident.CategoryData})
	second := open
	second.ID = "inc-second"
	for _, tc := range []struct {
		name   string
		faults []Injected
		incs   []incident.Incident
		kinds  []string
		lines  []string
	}{
		{"right rank and kind", []Injected{inject("gpt-ft-7b", "data", 5)}, []incident.Incident{open}, []string{IncidentRight},
			[]string{"✔ right: states rank 5 as data, high confidence — injected: data on rank 5"}},
		{"wrong rank", []Injected{inject("gpt-ft-7b", "data", 2)}, []incident.Incident{open}, []string{IncidentWrong},
			[]string{"✘ wrong: states rank 5, high confidence — injected: data on rank 2"}},
		{"right rank, wrong kind", []Injected{inject("gpt-ft-7b", "backward", 5)}, []incident.Incident{open}, []string{IncidentWrong},
			[]string{"the right rank, as data (want compute or communication)"}},
		{"a slow link is not a data fault", []Injected{inject("gpt-ft-7b", "forward_host", 5)}, []incident.Incident{opNet(open)}, []string{IncidentWrong},
			[]string{"the right rank, as network (want compute)"}},
		{"kind not stated", []Injected{inject("gpt-ft-7b", "backward", 5)}, []incident.Incident{unknownKind}, []string{IncidentRight},
			[]string{"(the kind of cause is not stated)"}},
		{"an operator on the rank", []Injected{inject("gpt-ft-7b", "backward", 5)}, []incident.Incident{opJob}, []string{IncidentRight},
			[]string{"states aten::mm on rank 5 as compute"}},
		{"a link is not the rank", []Injected{inject("gpt-ft-7b", "backward_comm", 5)}, []incident.Incident{linkOnly}, []string{IncidentWrong},
			[]string{"link 5→6, not the rank alone"}},
		{"an extra rank stated", []Injected{inject("gpt-ft-7b", "data", 5)}, []incident.Incident{extra}, []string{IncidentWrong},
			[]string{"states rank 5; rank 3"}},
		{"withheld is not wrong", []Injected{inject("moe-32e", "backward_comm", 3)}, []incident.Incident{withheld}, []string{IncidentWithheld},
			[]string{"– withheld: no cause stated (2 competing candidates)"}},
		{"uniform for a rank fault", []Injected{inject("llama-70b-sft", "data", 0)}, []incident.Incident{uniform}, []string{IncidentWrong},
			[]string{"states every rank alike"}},
		{"resolved, compute", []Injected{inject("resnet152-dp", "backward", 2)}, []incident.Incident{resolved}, []string{IncidentRight},
			[]string{"rank 2 as compute"}},
		{"missed", []Injected{inject("other-job", "data", 1)}, []incident.Incident{open}, []string{IncidentMissed},
			[]string{"✘ missed: no incident opened — injected: data on rank 1"}},
		{"control, quiet", []Injected{{Job: "other-job", Fault: "data", Rank: -1}}, []incident.Incident{open}, []string{IncidentQuiet},
			[]string{"✔ quiet"}},
		{"control, false alarm", []Injected{{Job: "gpt-ft-7b", Fault: "data", Rank: -1}}, []incident.Incident{open}, []string{IncidentFalseAlarm},
			[]string{"✘ false alarm: incident(s) inc-7d1c0a opened"}},
		{"two incidents for one fault", []Injected{inject("gpt-ft-7b", "data", 5)}, []incident.Incident{open, second}, []string{IncidentRight},
			[]string{"2 incidents opened for it (want 1): inc-7d1c0a, inc-second"}},
		// Two faults on one job: each is graded on its own stated cause;
		// the other fault's rank is no extra; a link for a rank fault is
		// not that rank.
		{"two faults", []Injected{inject("gpt-ft-13b", "data", 4), inject("gpt-ft-13b", "callback_host", 11)}, []incident.Incident{two},
			[]string{IncidentRight, IncidentWrong}, []string{"rank 4 as data", "not the rank alone"}},
		{"two faults, one stated", []Injected{inject("gpt-ft-7b", "data", 5), inject("gpt-ft-7b", "backward", 1)}, []incident.Incident{open},
			[]string{IncidentRight, IncidentWithheld}, []string{"rank 5 as data", "not rank 1"}},
	} {
		gs := GradeIncidents(tc.faults, tc.incs)
		if len(gs) != len(tc.faults) {
			t.Fatalf("%s: %d grades", tc.name, len(gs))
		}
		for i, g := range gs {
			if g.Kind != tc.kinds[i] || !strings.Contains(g.Line, tc.lines[i]) {
				t.Errorf("%s[%d]: %s %q; want %s with %q", tc.name, i, g.Kind, g.Line, tc.kinds[i], tc.lines[i])
			}
		}
	}
	// The JSON eval/incidents reads.
	g := GradeIncidents([]Injected{inject("gpt-ft-7b", "data", 5)}, []incident.Incident{open})[0]
	b, _ := json.Marshal(g)
	var back map[string]any
	_ = json.Unmarshal(b, &back)
	for _, k := range []string{"job", "fault", "rank", "want_causes", "kind", "incidents", "stated", "stated_ranks", "category", "cause", "confidence", "line"} {
		if _, ok := back[k]; !ok {
			t.Errorf("grade JSON lacks %q: %s", k, b)
		}
	}
	if g.Category != incident.CategoryData || g.Cause != "right" || g.Confidence != incident.ConfidenceHigh || !slices.Equal(g.StatedRanks, []int{5}) {
		t.Errorf("%+v", g)
	}
}

// opNet is inc with its stated cause's kind made network.
func opNet(inc incident.Incident) incident.Incident {
	inc.Hypotheses = slices.Clone(inc.Hypotheses)
	inc.Hypotheses[0].Category = incident.CategoryNetwork
	return inc
}

// Every fault family the demo injects has the causes true of it.
func TestFaultCausesCoverEveryFamily(t *testing.T) {
	for f := range Faults {
		if len(FaultCauses[f]) == 0 {
			t.Errorf("fault %s has no true cause", f)
		}
	}
	if len(FaultCauses[FaultCPUHog]) == 0 {
		t.Error("the CPU hog has no true cause")
	}
}

// AwaitIncidents reads each incident in full, waits until two reads
// agree, and answers at once when the layer is off.
func TestAwaitIncidents(t *testing.T) {
	inc := fixture(t, "open")
	var reads atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/incidents", func(w http.ResponseWriter, r *http.Request) {
		n := reads.Add(1)
		if r.URL.Query().Get("job") != "gpt-ft-7b" {
			_ = json.NewEncoder(w).Encode(map[string]any{"incidents": []incident.Incident{}})
			return
		}
		li := inc
		li.Evidence = nil
		if n == 1 { // the first read sees an older fusion
			li.Updated.Step--
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"incidents": []incident.Incident{li}})
	})
	mux.HandleFunc("GET /api/v1/incidents/{id}", func(w http.ResponseWriter, r *http.Request) {
		out := inc
		if reads.Load() == 1 {
			out.Updated.Step--
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got, err := AwaitIncidents(context.Background(), srv.URL, "gpt-ft-7b", 10*time.Second, 10*time.Millisecond)
	if err != nil || len(got) != 1 || len(got[0].Evidence) != len(inc.Evidence) || reads.Load() != 3 {
		t.Fatalf("%d incidents, %v, %d reads", len(got), err, reads.Load())
	}
	// No incident: the last (empty) read at the deadline.
	got, err = AwaitIncidents(context.Background(), srv.URL, "quiet-job", 50*time.Millisecond, 10*time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("quiet: %v %v", got, err)
	}
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusNotFound} {
		off := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"error":"incidents are off"}`))
		}))
		_, err := AwaitIncidents(context.Background(), off.URL, "j", time.Minute, time.Second)
		off.Close()
		if !errors.Is(err, ErrIncidentsOff) {
			t.Errorf("%d: %v", code, err)
		}
	}
}
