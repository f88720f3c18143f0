package sysom

import (
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field string
		set   func(*Config)
	}{
		{"w", func(c *Config) { c.W = 1 }},
		{"k", func(c *Config) { c.K = 0 }},
		{"delta", func(c *Config) { c.Delta = 1 }},
		{"alpha", func(c *Config) { c.Alpha = 0 }},
		{"min_samples", func(c *Config) { c.MinSamples = 0 }},
		{"min_total", func(c *Config) { c.MinTotal = 0 }},
		{"min_instances", func(c *Config) { c.MinInstances = 101 }},
		{"late_noise_ms", func(c *Config) { c.LateNoiseMs = 0 }},
		{"iter_rise", func(c *Config) { c.IterRise = -1 }},
		{"gpu_uniform", func(c *Config) { c.GPUUniform = 2 }},
		{"os_ratio", func(c *Config) { c.OSRatio = 1 }},
		{"max_paths", func(c *Config) { c.MaxPaths = 0 }},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v", c.field, err)
		}
		if _, err := Analyze(&Input{}, cfg); err == nil {
			t.Errorf("%s: Analyze accepted a bad config", c.field)
		}
	}
}

// Bad input is refused with the field's path.
func TestInputErrorsNameTheField(t *testing.T) {
	good := func() *stack.Profile {
		return &stack.Profile{Funcs: []stack.Func{{Name: "a", Kind: stack.Native}}, Stacks: []stack.Stack{{Frames: []int32{0}, Count: 3}}, Total: 3}
	}
	for _, c := range []struct {
		want string
		in   func() *Input
	}{
		{"profiles[3].stacks[0].frames[0]", func() *Input {
			p := good()
			p.Stacks[0].Frames[0] = 7
			return &Input{Profiles: map[int]*stack.Profile{3: p}}
		}},
		{"baseline[1].total", func() *Input {
			p := good()
			p.Total = 4
			return &Input{Baseline: map[int]*stack.Profile{1: p}}
		}},
		{"profiles[0].stacks[0].count", func() *Input {
			p := good()
			p.Stacks[0].Count, p.Total = 0, 0
			return &Input{Profiles: map[int]*stack.Profile{0: p}}
		}},
		{"profiles[2].funcs[0].kind", func() *Input {
			p := good()
			p.Funcs[0].Kind = 0
			return &Input{Profiles: map[int]*stack.Profile{2: p}}
		}},
		{"profiles[5].profile", func() *Input { return &Input{Profiles: map[int]*stack.Profile{5: nil}} }},
		{"groups[0].ranks", func() *Input { return &Input{Groups: []Group{{ID: "g", Ranks: []int{1, 1}}}} }},
		{"calls[0].comm", func() *Input {
			c := genCalls("x", []int{0, 1}, 1, nil, nil, nil, 0, 100, true, 1)
			c[0].Comm = ""
			return &Input{Calls: c}
		}},
		{"os[0].end_ns", func() *Input { return &Input{OS: []osstat.Batch{{StartNS: 5, EndNS: 5}}} }},
		{"gpu[0].total_ms", func() *Input { return &Input{GPU: []GPUKernel{{Rank: 0, Name: "k", TotalMs: -1}}} }},
		{"iter_ms", func() *Input { return &Input{IterMs: -1} }},
	} {
		_, err := Analyze(c.in(), DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
}

// An empty window is not an error: the report says what did not run.
func TestAnalyzeEmpty(t *testing.T) {
	rep, err := Analyze(&Input{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SlowRanks)+len(rep.Waterline)+len(rep.Diagnoses) != 0 || rep.Temporal != nil || len(rep.Notes) == 0 {
		t.Fatalf("%+v", rep)
	}
}

// A rising iteration time without a baseline profile still reports the
// temporal comparison, saying it had nothing to compare.
func TestTemporalWithoutBaseline(t *testing.T) {
	sc := newScenario()
	for r := range 4 {
		sc.prof(sc.cur, r).add([]stack.Func{{Name: "main", Kind: stack.Native}}, 500)
	}
	in := sc.input()
	in.IterMs, in.IterBaseMs = 120, 100
	rep, err := Analyze(in, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Temporal == nil || len(rep.Temporal.Candidates) != 0 || !strings.Contains(strings.Join(rep.Temporal.Evidence, " "), "no CPU stacks in the baseline") {
		t.Fatalf("%+v", rep.Temporal)
	}
}
