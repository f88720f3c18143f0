package catalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// jsonStore is a Store that keeps jobs as JSON, as the real store does, so
// what placement relies on must survive encoding (and a restart).
type jsonStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *jsonStore) PutJob(j *signal.Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[j.ID] = b
	return nil
}

func (s *jsonStore) Job(id string) (*signal.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[id]
	if !ok {
		return nil, fmt.Errorf("job %q: %w", id, errNotFound)
	}
	var j signal.Job
	return &j, json.Unmarshal(b, &j)
}

func (s *jsonStore) Jobs() ([]*signal.Job, error) { return nil, nil }

// regStep is one registration in a scenario: a job registration ("put")
// or a rank join ("join") by a process, and what it must get.
type regStep struct {
	op     string // put | join
	rank   int
	launch string
	proc   string // "" = an older client without process information
	run    string
	world  int // 0 = 4
	want   int // incarnation
	reason signal.IncarnationReason
	err    string // conflict field; the step must fail with it
}

func TestIncarnationScenarios(t *testing.T) {
	// every rank of a launch: a put then a join, from the same process.
	launch := func(want int, launch, procPrefix, run string, ranks ...int) []regStep {
		var out []regStep
		for _, r := range ranks {
			p := ""
			if procPrefix != "" {
				p = fmt.Sprintf("%s%d", procPrefix, r)
			}
			out = append(out, regStep{op: "put", rank: r, launch: launch, proc: p, run: run, want: -1},
				regStep{op: "join", rank: r, launch: launch, proc: p, run: run, want: want})
		}
		return out
	}
	cat := func(parts ...[]regStep) []regStep {
		var out []regStep
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	cases := []struct {
		name  string
		steps []regStep
		// wantN: the job's newest incarnation at the end; reasons: each
		// incarnation's reason in order.
		wantN   int
		reasons []signal.IncarnationReason
	}{
		{"torchelastic restart: the restart count changes the launch id",
			cat(launch(0, "te:r:0", "a", "r", 0, 1, 2, 3), launch(1, "te:r:1", "b", "r", 2, 0, 3, 1),
				[]regStep{{op: "join", rank: 1, launch: "te:r:0", proc: "a1", run: "r", want: 0}}), // a straggler of the first launch stays in it
			1, []signal.IncarnationReason{signal.IncFirst, signal.IncLaunch}},
		{"no launcher (mp.spawn, python train.py): a rank's new process is a restart",
			cat(launch(0, "", "a", "", 0, 1, 2, 3), launch(1, "", "b", "", 3, 2, 1, 0), launch(2, "", "c", "", 0, 1, 2, 3)),
			2, []signal.IncarnationReason{signal.IncFirst, signal.IncRestart, signal.IncRestart}},
		{"re-registration of the same processes is idempotent",
			cat(launch(0, "", "a", "", 0, 1), launch(0, "", "a", "", 1, 0), launch(0, "", "a", "", 0, 1)),
			0, []signal.IncarnationReason{signal.IncFirst}},
		{"a static launch id (LAGGARD_INCARNATION) across restarts still tells restarts apart",
			cat(launch(0, "static", "a", "", 0, 1), launch(1, "static", "b", "", 1, 0)),
			1, []signal.IncarnationReason{signal.IncFirst, signal.IncRestart}},
		{"an older client's resubmission with another run id is a new incarnation, not a 409",
			cat(launch(0, "", "", "run-1", 0, 1), launch(1, "", "", "run-2", 0, 1), launch(1, "", "", "run-2", 0, 1)),
			1, []signal.IncarnationReason{signal.IncFirst, signal.IncRunID}},
		{"an older client restarting with the same run id stays in its incarnation",
			cat(launch(0, "", "", "", 0, 1), launch(0, "", "", "", 0, 1)),
			0, []signal.IncarnationReason{signal.IncFirst}},
		{"elastic world size change from a new process: a new incarnation with its own layout",
			cat(launch(0, "", "a", "", 0, 1),
				[]regStep{{op: "put", rank: 0, proc: "b0", world: 8, want: 1, reason: signal.IncLayout},
					{op: "join", rank: 7, proc: "b7", world: 8, want: 1}}),
			1, []signal.IncarnationReason{signal.IncFirst, signal.IncLayout}},
		{"an older client contradicting the layout is still refused",
			cat(launch(0, "", "", "", 0), []regStep{{op: "put", world: 8, err: "world_size"}}),
			0, []signal.IncarnationReason{signal.IncFirst}},
		{"a known process contradicting its own incarnation's layout is refused",
			cat(launch(0, "", "a", "", 0), []regStep{{op: "put", proc: "a0", world: 8, err: "world_size"}}),
			0, []signal.IncarnationReason{signal.IncFirst}},
		{"the first new-style process adopts an incarnation an older registration opened",
			cat(launch(0, "", "", "", 0), launch(0, "te:x:0", "a", "", 0, 1), launch(1, "te:x:1", "b", "", 0)),
			1, []signal.IncarnationReason{signal.IncFirst, signal.IncLaunch}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &jsonStore{m: map[string][]byte{}}
			c := New(st)
			for i, s := range tc.steps {
				if i%3 == 2 {
					c = New(st) // a server restart between registrations changes nothing
				}
				world := s.world
				if world == 0 {
					world = 4
				}
				p := signal.Process{Launch: s.launch, ID: s.proc, StartNS: int64(1000 + i)}
				var (
					got int
					err error
					j   *signal.Job
				)
				switch s.op {
				case "put":
					j, got, _, err = c.Register(job("j", world, s.run), p, isNotFound)
				case "join":
					j, got, err = c.Join("j", signal.Rank{Rank: s.rank, Role: signal.UnknownRole}, p)
				}
				if s.err != "" {
					if conflictField(err) != s.err {
						t.Fatalf("step %d %+v: err %v, want a conflict on %q", i, s, err, s.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d %+v: %v", i, s, err)
				}
				if s.want >= 0 && got != s.want {
					t.Fatalf("step %d %+v: incarnation %d, want %d (job %+v)", i, s, got, s.want, j.Incarnations)
				}
			}
			j, err := c.Get("j")
			if err != nil {
				t.Fatal(err)
			}
			if j.Current() != tc.wantN {
				t.Errorf("newest incarnation %d, want %d", j.Current(), tc.wantN)
			}
			var reasons []signal.IncarnationReason
			for _, in := range j.Incarnations {
				reasons = append(reasons, in.Reason)
			}
			if fmt.Sprint(reasons) != fmt.Sprint(tc.reasons) {
				t.Errorf("reasons %v, want %v", reasons, tc.reasons)
			}
		})
	}
}

// TestIncarnationLayoutKept: an older incarnation keeps what its vectors
// mean (world size, stage list, rank hosts) after a later one changed it.
func TestIncarnationLayoutKept(t *testing.T) {
	c, _ := newCatalog()
	p := func(id string) signal.Process { return signal.Process{ID: id} }
	if _, _, _, err := c.Register(job("j", 2, ""), p("a0"), isNotFound); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if _, _, err := c.Join("j", signal.Rank{Rank: r, Host: "old", Role: signal.UnknownRole}, p(fmt.Sprint("a", r))); err != nil {
			t.Fatal(err)
		}
	}
	other := stagevec.DefaultSchema()
	other.Stages = []string{"fwd", stagevec.StageOther}
	j, inc, _, err := c.Register(&signal.Job{ID: "j", WorldSize: 4, Schema: other}, p("b0"), isNotFound)
	if err != nil || inc != 1 {
		t.Fatalf("inc %d, %v", inc, err)
	}
	if _, _, err := c.Join("j", signal.Rank{Rank: 3, Host: "new", Role: signal.UnknownRole}, p("b3")); err != nil {
		t.Fatal(err)
	}
	j, _ = c.Get("j")
	old := j.At(0)
	if old.WorldSize != 2 || len(old.Schema.Stages) != len(stagevec.DefaultSchema().Stages) || len(old.Ranks) != 2 || old.Ranks[0].Host != "old" {
		t.Errorf("incarnation 0 as it was: %+v", old)
	}
	if cur := j.At(1); cur.WorldSize != 4 || len(cur.Ranks) != 1 || cur.Ranks[0].Host != "new" || cur.Schema.Stages[0] != "fwd" {
		t.Errorf("incarnation 1: %+v", cur)
	}
}

// TestIncarnationBounds: a crash-looping job keeps registering; what its
// registration holds stays bounded and numbering goes on.
func TestIncarnationBounds(t *testing.T) {
	c, _ := newCatalog()
	n := signal.KeepIncarnations + 40
	for i := range n {
		if _, got, err := c.Join("j", signal.Rank{Rank: 0, Role: signal.UnknownRole}, signal.Process{ID: fmt.Sprint("p", i)}); i > 0 && (err != nil || got != i) {
			t.Fatalf("restart %d: incarnation %d, %v", i, got, err)
		}
		if i == 0 {
			if _, _, _, err := c.Register(job("j", 1024, ""), signal.Process{ID: "p0"}, isNotFound); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Join("j", signal.Rank{Rank: 0, Role: signal.UnknownRole}, signal.Process{ID: "p0"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	j, _ := c.Get("j")
	if len(j.Incarnations) != signal.KeepIncarnations || j.Current() != n-1 {
		t.Fatalf("%d described, newest %d", len(j.Incarnations), j.Current())
	}
	withProcs := 0
	for _, in := range j.Incarnations {
		if len(in.Procs) > 0 {
			withProcs++
		}
	}
	if withProcs > keepProcs {
		t.Errorf("%d incarnations keep process fingerprints, at most %d", withProcs, keepProcs)
	}
	b, _ := json.Marshal(j)
	if len(b) > 200<<10 {
		t.Errorf("registration is %d bytes after %d restarts", len(b), n)
	}
	// The limit of numbers is a clear conflict, not a wrap-around.
	j2 := *j
	j2.Incarnations = append([]signal.Incarnation(nil), j.Incarnations...)
	j2.Incarnations[len(j2.Incarnations)-1].N = signal.MaxIncarnation
	if _, err := open(&j2, nil, signal.Process{}, &opening{reason: signal.IncRestart}, time.Now()); conflictField(err) != "incarnation" {
		t.Errorf("past the last number: %v", err)
	}
}

// TestIncarnationTimeSpans: time-keyed signals belong to the incarnation
// whose span holds them; the oldest described one holds everything before.
func TestIncarnationTimeSpans(t *testing.T) {
	j := &signal.Job{Incarnations: []signal.Incarnation{{N: 0, StartNS: 100}, {N: 1, StartNS: 200}, {N: 2, Opened: time.Unix(0, 300)}}}
	for _, tc := range []struct {
		n        int
		from, to int64
	}{{0, 0, 200}, {1, 200, 300}, {2, 300, 1<<63 - 1}} {
		if f, to := j.TimeSpan(tc.n); f != tc.from || to != tc.to {
			t.Errorf("incarnation %d: [%d, %d), want [%d, %d)", tc.n, f, to, tc.from, tc.to)
		}
	}
	if f, to := (&signal.Job{}).TimeSpan(0); f != 0 || to != 1<<63-1 {
		t.Errorf("a job without incarnations: [%d, %d)", f, to)
	}
}

// TestIncarnationConcurrentRestart: every rank of a restart joining at
// once lands in one new incarnation.
func TestIncarnationConcurrentRestart(t *testing.T) {
	c, _ := newCatalog()
	const world = 32
	if _, _, _, err := c.Register(job("j", world, ""), signal.Process{ID: "a0"}, isNotFound); err != nil {
		t.Fatal(err)
	}
	for gen, prefix := range []string{"a", "b"} {
		var wg sync.WaitGroup
		got := make([]int, world)
		for r := range world {
			wg.Go(func() {
				_, inc, err := c.Join("j", signal.Rank{Rank: r, Role: signal.UnknownRole}, signal.Process{ID: prefix + fmt.Sprint(r)})
				if err != nil {
					t.Error(err)
				}
				got[r] = inc
			})
		}
		wg.Wait()
		for r, inc := range got {
			if inc != gen {
				t.Fatalf("generation %d: rank %d in incarnation %d (%v)", gen, r, inc, got)
			}
		}
	}
	j, _ := c.Get("j")
	if j.Current() != 1 || !strings.Contains(j.Incarnations[1].Detail, "new process") {
		t.Errorf("%+v", j.Incarnations)
	}
}
