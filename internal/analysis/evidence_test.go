package analysis

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/kineto"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

// Fixtures of the evidence tests: real recordings and reports
// (testdata/evidence/README.md, cmd/laggard/testdata/).

const (
	recordedData     = "../../cmd/laggard/testdata/ddp4-data-onset10.jsonl"
	recordedBackward = "../../cmd/laggard/testdata/ddp8-backward-onset10.jsonl.gz"
	// t0 is a wall time the tests anchor step clocks at.
	t0 = int64(1_796_000_000_000_000_000)
)

// recordedReport runs the job report over a recorded stage-vector file.
func recordedReport(t testing.TB, path string) *Report {
	t.Helper()
	var src *MemSource
	job, err := stagefile.ReadFiles([]string{path}, stagefile.Options{}, stagefile.Sink{
		Job:    func(j *signal.Job) error { src = NewMemSource(j); return nil },
		Vector: func(v *stagevec.Vector) error { return src.Add(v) },
	})
	if err != nil {
		t.Fatal(err)
	}
	src.Seal()
	return run(t, src, Request{Job: job.ID})
}

// greyhoundFixture decodes a served Greyhound report. The reports predate
// a validation view's timing fields: they are filled from the plan the
// controller published (its history), as the engine now fills them.
func greyhoundFixture(t testing.TB, name string) *greyhound.Report {
	t.Helper()
	var rep greyhound.Report
	readJSON(t, "testdata/evidence/greyhound-"+name+".json", &rep)
	for _, tr := range rep.Controller.History {
		var ev struct {
			Plan *greyhound.Plan `json:"plan"`
		}
		if tr.To != greyhound.PhaseValidation || json.Unmarshal(tr.Evidence, &ev) != nil || ev.Plan == nil {
			continue
		}
		for i := range rep.Validation {
			if v := &rep.Validation[i]; v.ID == ev.Plan.ID {
				v.AtStep, v.DeadlineMS, v.CreatedNS = ev.Plan.AtStep, ev.Plan.DeadlineMS, tr.AtNS
			}
		}
	}
	return &rep
}

// sysomFixture decodes a SysOM-AI report of a real OS case (named job j).
func sysomFixture(t testing.TB, name string) *SysomReport {
	t.Helper()
	var rep SysomReport
	readJSON(t, "testdata/evidence/sysom-"+name+".json", &rep)
	rep.Job = "j"
	return &rep
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// sleepCalls are the real 2-rank recording where rank 1 sleeps before its
// collectives from step 100 to 200, up to step last.
func sleepCalls(t testing.TB, last int64) []collective.Call {
	t.Helper()
	b, err := os.ReadFile("testdata/evidence/greyhound-sleep.collectives.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	var calls []collective.Call
	for dec.More() {
		var c collective.Call
		if err := dec.Decode(&c); err != nil {
			t.Fatal(err)
		}
		if c.Step <= last {
			calls = append(calls, c)
		}
	}
	return calls
}

// sleepReport is Greyhound's replay of the sleep recording up to step
// last (no validation results: the controller waits in validation).
func sleepReport(t testing.TB, last int64) (*greyhound.Report, []collective.Call) {
	t.Helper()
	calls := sleepCalls(t, last)
	rep, err := greyhound.Analyze(greyhound.Input{Job: "gh-real-sleep", NowNS: calls[len(calls)-1].ReturnNS, Calls: calls, World: 2}, greyhound.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return rep, calls
}

// kairFixture runs KAIR over a real 4-rank capture of cmd/laggard and
// returns it with a capture record like the server's.
func kairFixture(t testing.TB, name string) (*store.Capture, *KairReport) {
	t.Helper()
	var truth struct {
		CaptureID string `json:"capture_id"`
		Trigger   string `json:"trigger"`
	}
	dir := "../../cmd/laggard/testdata/kair/real/" + name
	readJSON(t, dir+"/truth.json", &truth)
	var traces []optrace.Trace
	for r := 0; r < 4; r++ {
		b, err := os.ReadFile(fmt.Sprintf("%s/rank%d.json.gz", dir, r))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := kineto.ReadTrace(zr, kineto.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tr.Rank = r
		traces = append(traces, *tr)
	}
	rep, err := RunKair(traces, nil, DefaultKairRunConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Capture{ID: truth.CaptureID, Job: "kair-" + name, Trigger: truth.Trigger, CreatedNS: t0, DeadlineNS: t0 + 60e9,
		StartStep: 45, Steps: 5, Every: 1, Ranks: []int{0, 1, 2, 3}, State: store.CaptureComplete}
	return c, rep
}

// byID finds an evidence by ID prefix (nil: none).
func byID(evs []incident.Evidence, prefix string) *incident.Evidence {
	for i := range evs {
		if strings.HasPrefix(evs[i].ID, prefix) {
			return &evs[i]
		}
	}
	return nil
}

func ofKind(evs []incident.Evidence, k incident.Kind) []incident.Evidence {
	var out []incident.Evidence
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func targetKeys(ts []incident.Target) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Key())
	}
	return out
}

func TestStepClock(t *testing.T) {
	// Steps 10..14 start every 100 ms; step 12's anchor runs back and is
	// dropped (a clock never runs back).
	c := NewStepClock(map[int64]int64{10: t0, 11: t0 + 100e6, 12: t0 + 50e6, 13: t0 + 300e6, 14: t0 + 400e6, -1: t0})
	cases := []struct {
		step int64
		ns   int64
	}{
		{10, t0}, {11, t0 + 100e6}, {12, t0 + 200e6}, // interpolated across the dropped anchor
		{14, t0 + 400e6}, {16, t0 + 600e6}, {18, t0 + 800e6}, // extrapolated within the anchors' span (4 steps)
		{19, 0}, {6, t0 - 400e6}, {5, 0}, {-1, 0},
	}
	for _, tc := range cases {
		if got := c.NS(tc.step); got != tc.ns {
			t.Errorf("NS(%d) = %d, want %d", tc.step, got, tc.ns)
		}
	}
	steps := []struct {
		ns   int64
		step int64
	}{
		{t0, 10}, {t0 + 150e6, 11}, {t0 + 399e6, 13}, {t0 + 650e6, 16}, {t0 - 50e6, 9}, {t0 - 400e6, 6},
		{t0 + 900e6, -1}, {t0 - 500e6, -1}, {0, -1},
	}
	for _, tc := range steps {
		if got := c.Step(tc.ns); got != tc.step {
			t.Errorf("Step(%d) = %d, want %d", tc.ns-t0, got, tc.step)
		}
	}
	var zero StepClock
	if zero.Known() || zero.NS(10) != 0 || zero.Step(t0) != -1 {
		t.Error("the zero clock knows something")
	}
	one := NewStepClock(map[int64]int64{5: t0})
	if one.Known() || one.NS(5) != t0 || one.NS(6) != 0 || one.Step(t0+1) != -1 {
		t.Error("a one-anchor clock extrapolates")
	}
	if zero.Or(one).NS(5) != t0 || one.Or(c).NS(10) != 0 {
		t.Error("Or")
	}
	sp := c.stepSpan(10, 11)
	if sp != (incident.Span{FromStep: 10, ToStep: 11, FromNS: t0, ToNS: t0 + 200e6}) {
		t.Errorf("stepSpan(10, 11) = %+v", sp)
	}
	if sp := zero.stepSpan(3, 4); sp.FromNS != 0 || sp.ToNS != 0 || sp.FromStep != 3 {
		t.Errorf("stepSpan without a clock = %+v", sp)
	}
	if sp := zero.nsSpan(t0, t0+5); sp.FromStep != -1 || sp.ToStep != -1 || sp.FromNS != t0 {
		t.Errorf("nsSpan without a clock = %+v (want steps unknown: -1)", sp)
	}
}

// The clock's two directions agree: every step it places maps back to
// itself, and time never runs back.
func TestStepClockRoundTrip(t *testing.T) {
	calls := sleepCalls(t, 300)
	for name, c := range map[string]StepClock{
		"calls":    CallClock(calls),
		"timeline": TimelineClock(recordedReport(t, recordedData).Timeline, t0),
	} {
		if !c.Known() {
			t.Fatalf("%s: clock knows nothing", name)
		}
		lo, hi := c.steps[0], c.steps[len(c.steps)-1]
		prev := int64(0)
		for s := lo; s <= hi; s++ {
			ns := c.NS(s)
			if ns <= prev {
				t.Fatalf("%s: NS(%d) = %d after NS(%d) = %d", name, s, ns, s-1, prev)
			}
			if got := c.Step(ns); got != s {
				t.Errorf("%s: Step(NS(%d)) = %d", name, s, got)
			}
			prev = ns
		}
	}
}

func TestCallClockAndTimelineClock(t *testing.T) {
	gi := &GreyhoundInput{In: greyhound.Input{Calls: sleepCalls(t, 20)}}
	if c := gi.Clock(); !c.Known() || c.NS(10) != CallClock(gi.In.Calls).NS(10) {
		t.Error("GreyhoundInput.Clock")
	}
	if h := RankHosts(&signal.Job{Ranks: []signal.Rank{{Rank: 3, Host: "h3"}, {Rank: 4}}}); len(h) != 1 || h[3] != "h3" {
		t.Errorf("RankHosts: %v", h)
	}
	calls := []collective.Call{
		{Rank: 1, Step: 3, EnterNS: t0 + 5}, {Rank: 0, Step: 3, EnterNS: t0 + 2}, {Rank: 0, Step: 4, EnterNS: t0 + 100},
		{Rank: 0, Step: -1, EnterNS: t0 + 50},
	}
	c := CallClock(calls)
	if c.NS(3) != t0+2 || c.NS(4) != t0+100 || len(c.steps) != 2 {
		t.Errorf("CallClock: %+v", c)
	}
	tl := &Timeline{Series: []TimelinePoint{{Step: 7, ExposedMS: 100}, {Step: 8, ExposedMS: 200}, {Step: 9, ExposedMS: 50}}}
	c = TimelineClock(tl, t0)
	// The newest step ends at t0: it starts 50 ms before, step 8 200 ms
	// before that.
	if c.NS(9) != t0-50e6 || c.NS(8) != t0-250e6 || c.NS(7) != t0-350e6 {
		t.Errorf("TimelineClock: %v %v %v", c.NS(7)-t0, c.NS(8)-t0, c.NS(9)-t0)
	}
	if TimelineClock(nil, t0).Known() || TimelineClock(tl, 0).Known() {
		t.Error("a timeline clock without an anchor")
	}
}

// ReadStepClock reads one rank's calls of a window from the store.
func TestReadStepClock(t *testing.T) {
	st := storedJob(t, &signal.Job{ID: "j", WorldSize: 2, Schema: stagevec.DefaultSchema()})
	calls := sleepCalls(t, 40)
	if _, err := st.AppendCollectives("j", &collective.Batch{Calls: calls}); err != nil {
		t.Fatal(err)
	}
	c, err := ReadStepClock(st, "j", store.CallQuery{Rank: 0, FromNS: calls[0].EnterNS, ToNS: calls[len(calls)-1].ReturnNS}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := CallClock(calls)
	for s := int64(0); s <= 40; s++ {
		if got := c.NS(s); absDiff(got, want.NS(s)) > 200e6 || got == 0 {
			t.Errorf("step %d: rank 0's clock %d, all ranks' %d", s, got, want.NS(s))
		}
	}
	if c, err := ReadStepClock(st, "j", store.CallQuery{Rank: -1, FromNS: calls[0].EnterNS, ToNS: calls[len(calls)-1].ReturnNS}, 5); err != nil || len(c.steps) > 5 {
		t.Errorf("maxCalls: %d anchors, %v", len(c.steps), err)
	}
}

// adapted is one fixture's evidence, produced again on demand: from the
// same report decoded afresh (as a re-evaluation from stored data gives
// it), at a given server time.
type adapted struct {
	name  string
	adapt func(t testing.TB, atNS int64) []incident.Evidence
}

// roundTrip decodes a fresh copy of v (a report as stored or served).
func roundTrip[T any](t testing.TB, v *T) *T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

var (
	fixturesOnce sync.Mutex
	fixturesMemo []adapted
)

// fixtures are every engine's fixtures, loaded once per test binary (the
// adapters copy each report before adapting it, so tests share them).
func fixtures(t testing.TB) []adapted {
	fixturesOnce.Lock()
	defer fixturesOnce.Unlock()
	if fixturesMemo == nil {
		fixturesMemo = loadFixtures(t)
	}
	return fixturesMemo
}

func loadFixtures(t testing.TB) []adapted {
	var out []adapted
	for _, f := range []string{recordedData, recordedBackward} {
		rep := recordedReport(t, f)
		out = append(out, adapted{"stagefrontier/" + f, func(t testing.TB, at int64) []incident.Evidence {
			r := roundTrip(t, rep)
			return StageFrontierEvidence(r, map[int]string{0: "h0", 3: "h3"}, EvidenceEnv{Clock: TimelineClock(r.Timeline, t0), AtNS: at})
		}})
	}
	for _, n := range []string{"sleep-s1", "hog-s1", "link-s2", "none-s2", "sleep-s2"} {
		rep := greyhoundFixture(t, n)
		out = append(out, adapted{"greyhound/" + n, func(t testing.TB, at int64) []incident.Evidence {
			return GreyhoundEvidence(roundTrip(t, rep), map[int]string{1: "h1"}, EvidenceEnv{AtNS: at})
		}})
	}
	for _, last := range []int64{60, 160, 300} {
		rep, calls := sleepReport(t, last)
		out = append(out, adapted{fmt.Sprintf("greyhound/sleep-replay-%d", last), func(t testing.TB, at int64) []incident.Evidence {
			return GreyhoundEvidence(roundTrip(t, rep), nil, EvidenceEnv{AtNS: at, Clock: CallClock(calls)})
		}})
	}
	for _, n := range []string{"hog-1", "softirq-2", "logging-1", "vfs-1"} {
		rep := sysomFixture(t, n)
		out = append(out, adapted{"sysom/" + n, func(t testing.TB, at int64) []incident.Evidence {
			return SysomEvidence(roundTrip(t, rep), nil, EvidenceEnv{AtNS: at})
		}})
	}
	for _, n := range []string{"slow_op", "data", "late_collective", "slow_link"} {
		c, rep := kairFixture(t, n)
		out = append(out, adapted{"kair/" + n, func(t testing.TB, at int64) []incident.Evidence {
			return KairEvidence(roundTrip(t, c), roundTrip(t, rep), nil, EvidenceEnv{AtNS: at})
		}})
	}
	return out
}

// Property: an evidence's ID is the finding's identity. Re-running an
// adapter on the same data — the report decoded again, at another server
// time — gives byte-identical evidence except AtNS, and no two findings
// of one report share an ID.
func TestEvidenceIDsStable(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			a, b := f.adapt(t, 1), f.adapt(t, 2_000_000_000)
			if len(a) == 0 {
				t.Fatal("no evidence")
			}
			seen := map[string]bool{}
			for _, e := range a {
				if seen[e.ID] {
					t.Errorf("two findings with ID %s", e.ID)
				}
				seen[e.ID] = true
			}
			if len(a) != len(b) {
				t.Fatalf("%d evidence, then %d", len(a), len(b))
			}
			for i := range a {
				if a[i].AtNS != 1 || b[i].AtNS != 2_000_000_000 {
					t.Errorf("%s: AtNS %d, %d: want the caller's", a[i].ID, a[i].AtNS, b[i].AtNS)
				}
				a[i].AtNS, b[i].AtNS = 0, 0
				ja, _ := json.Marshal(a[i])
				jb, _ := json.Marshal(b[i])
				if !bytes.Equal(ja, jb) {
					t.Errorf("re-evaluation changed the evidence:\n%s\n%s", ja, jb)
				}
			}
		})
	}
}

// What fusion reads holds for every evidence of every fixture: the ID
// names the kind and the incarnation, a withholding names no target and
// says why, an exclusive finding has its subject and one target, a
// confident finding names something, both time axes are well formed, the
// detail is JSON, the view is the job's, and the text is plain words.
func TestEvidenceContract(t *testing.T) {
	engineOf := map[string]incident.Engine{"stagefrontier": incident.EngineStageFrontier, "greyhound": incident.EngineGreyhound, "sysom": incident.EngineSysom, "kair": incident.EngineKair}
	signals := []incident.Signal{incident.SignalOnset, incident.SignalRelief, incident.SignalFinding, incident.SignalHealthy, incident.SignalProgress, incident.SignalState}
	notation := []string{"σ", "μ", "τ", "a_i", "F[", "S_A", "θ"}
	for _, f := range fixtures(t) {
		for _, e := range f.adapt(t, 7) {
			fail := func(format string, args ...any) {
				t.Errorf("%s: %s: %s", f.name, e.ID, fmt.Sprintf(format, args...))
			}
			if want := fmt.Sprintf("%s/i%d/", e.Kind, e.Incarnation); !strings.HasPrefix(e.ID, want) {
				fail("ID does not start with %q", want)
			}
			if eng := engineOf[strings.SplitN(string(e.Kind), ".", 2)[0]]; eng != e.Engine || e.Job == "" {
				fail("engine %q job %q for kind %s", e.Engine, e.Job, e.Kind)
			}
			if !slices.Contains(signals, e.Signal) {
				fail("signal %q", e.Signal)
			}
			if (e.Confidence == incident.ConfidenceWithheld) != (e.Withheld != "") {
				fail("confidence %q with withheld %q", e.Confidence, e.Withheld)
			}
			if e.Confidence == incident.ConfidenceWithheld && len(e.Targets) > 0 {
				fail("a withholding names %v", targetKeys(e.Targets))
			}
			if e.Exclusive && (e.Subject == "" || len(e.Targets) != 1) {
				fail("exclusive with subject %q and targets %v", e.Subject, targetKeys(e.Targets))
			}
			if e.Signal == incident.SignalFinding && e.Confidence == incident.ConfidenceHigh && len(e.Targets) == 0 {
				fail("a high-confidence finding names nothing")
			}
			if e.Signal == incident.SignalHealthy && (len(e.Against) == 0 || len(e.Targets) > 0) {
				fail("healthy with targets %v against %v", targetKeys(e.Targets), targetKeys(e.Against))
			}
			if (e.Signal == incident.SignalOnset || e.Signal == incident.SignalRelief) && (e.BeforeMS <= 0 || e.AfterMS <= 0) {
				fail("a level change without levels")
			}
			if e.Signal == incident.SignalProgress && (len(e.Samples) == 0 || e.Ranks == 0) {
				fail("progress without samples or ranks")
			}
			w := e.Window
			if (w.FromNS == 0) != (w.ToNS == 0) || w.ToNS < w.FromNS || w.FromStep > w.ToStep {
				fail("window %+v", w)
			}
			if w.FromNS == 0 && w.FromStep < 0 {
				fail("window %+v knows neither axis", w)
			}
			if e.Detail != nil && !json.Valid(e.Detail) {
				fail("detail is not JSON")
			}
			if !strings.HasPrefix(e.View, "/api/v1/jobs/"+url.PathEscape(e.Job)+"/") {
				fail("view %q", e.View)
			}
			if e.Text == "" {
				fail("no text")
			}
			for _, n := range notation {
				if strings.Contains(e.Text, n) {
					fail("text %q carries paper notation %q", e.Text, n)
				}
			}
		}
	}
}

// Evidence bytes are the same for every order of the ranks' hosts map and
// the engines' inputs: the adapters sort what they emit.
func TestEvidenceSorted(t *testing.T) {
	for _, f := range fixtures(t) {
		evs := f.adapt(t, 1)
		if !slices.IsSortedFunc(evs, func(a, b incident.Evidence) int { return strings.Compare(a.ID, b.ID) }) {
			t.Errorf("%s: evidence not in ID order", f.name)
		}
	}
}

func TestEvidenceIncarnationAll(t *testing.T) {
	rep := recordedReport(t, recordedData)
	rep.Incarnations = &Incarnations{Analysed: IncAll}
	if evs := StageFrontierEvidence(rep, nil, EvidenceEnv{}); evs != nil {
		t.Errorf("a report over every incarnation gave %d evidence", len(evs))
	}
	gh := greyhoundFixture(t, "sleep-s1")
	gh.Incarnation = IncAll
	if evs := GreyhoundEvidence(gh, nil, EvidenceEnv{}); evs != nil {
		t.Errorf("greyhound over every incarnation gave %d evidence", len(evs))
	}
	sy := sysomFixture(t, "hog-1")
	sy.Incarnation = IncAll
	if evs := SysomEvidence(sy, nil, EvidenceEnv{}); evs != nil {
		t.Errorf("sysom over every incarnation gave %d evidence", len(evs))
	}
	if StageFrontierEvidence(nil, nil, EvidenceEnv{}) != nil || GreyhoundEvidence(nil, nil, EvidenceEnv{}) != nil ||
		SysomEvidence(nil, nil, EvidenceEnv{}) != nil || KairEvidence(nil, nil, nil, EvidenceEnv{}) != nil {
		t.Error("nil reports give evidence")
	}
}

// A restarted job's report reads one incarnation: its evidence says which
// (ID and field) and its view asks for it.
func TestEvidenceIncarnation(t *testing.T) {
	rep := recordedReport(t, recordedData)
	rep.Incarnations = &Incarnations{Analysed: 2, Newest: 2}
	for _, e := range StageFrontierEvidence(rep, nil, EvidenceEnv{}) {
		if e.Incarnation != 2 || !strings.Contains(e.ID, "/i2/") || !strings.Contains(e.View, "incarnation=2") {
			t.Errorf("%s: incarnation %d view %s", e.ID, e.Incarnation, e.View)
		}
	}
}
