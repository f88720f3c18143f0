package kineto

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

var update = flag.Bool("update", false, "rewrite golden files")

func decodeAll(t testing.TB, data []byte, opt Options) ([]optrace.Event, Meta, error) {
	t.Helper()
	var out []optrace.Event
	m, err := Decode(bytes.NewReader(data), opt, func(e *optrace.Event) error {
		if err := e.Validate(); err != nil {
			t.Errorf("emitted invalid event %+v: %v", *e, err)
		}
		out = append(out, *e)
		return nil
	})
	return out, m, err
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGolden converts a hand-written trace shaped like torch.profiler's
// export_chrome_trace (ProfilerStep#, aten:: ops, cudaLaunchKernel →
// kernel with correlation and flows, an NCCL collective) and compares
// with the committed golden; the gzip form must give the same events.
func TestGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	evs, meta, err := decodeAll(t, data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(meta); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	golden := "testdata/rank1.golden.jsonl"
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("golden mismatch (run with -update and review):\n%s", buf.String())
	}
	gevs, gmeta, err := decodeAll(t, gz(t, data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if gmeta != meta || len(gevs) != len(evs) {
		t.Fatalf("gzip differs: %+v vs %+v", gmeta, meta)
	}
	for i := range evs {
		a, _ := json.Marshal(evs[i])
		b, _ := json.Marshal(gevs[i])
		if !bytes.Equal(a, b) {
			t.Errorf("gzip event %d: %s vs %s", i, b, a)
		}
	}
}

// TestSemantics spells out what the golden encodes.
func TestSemantics(t *testing.T) {
	data, err := os.ReadFile("testdata/rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	evs, meta, err := decodeAll(t, data, Options{KeepArgs: true})
	if err != nil {
		t.Fatal(err)
	}
	if meta.Rank != 1 || meta.WorldSize != 2 || meta.Backend != "nccl" || !meta.HasBaseTime ||
		meta.BaseTimeNS != 1700000000000000000 || meta.Devices != 1 || meta.Steps != 1 || meta.Skipped != 3 || meta.Flows != 4 {
		t.Errorf("meta = %+v", meta)
	}
	by := map[string]optrace.Event{}
	for _, e := range evs {
		by[e.Name] = e
	}
	step := by["ProfilerStep#4"]
	if step.Cat != optrace.UserRange || step.Step != 4 || step.StartNS != 1_000_000 || step.DurNS != 900_500 {
		t.Errorf("step range = %+v", step)
	}
	lin := by["aten::linear"]
	if lin.Cat != optrace.CPUOp || lin.Step != 4 || lin.StartNS != 1_010_250 || lin.DurNS != 40_125 || lin.Device != -1 || lin.TID != 4121 {
		t.Errorf("aten::linear = %+v", lin)
	}
	k := by["ampere_sgemm_32x32_sliced1x4_tn"]
	if k.Cat != optrace.GPUKernel || k.Correlation != 77 || k.FlowID != 77 || k.Stream != 7 || k.Device != 0 || k.Step != 4 || k.DurNS != 12_345 {
		t.Errorf("kernel = %+v", k)
	}
	comm := by["record_param_comms"]
	if comm.Cat != optrace.Collective || comm.Comm != "0" || comm.Seq != 12 || comm.ExternalID != 4 || comm.Device != -1 {
		t.Errorf("record_param_comms = %+v", comm)
	}
	nccl := by["ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"]
	// Launched inside step 4 but runs past the range's end: the step
	// comes from the launch's correlation, not from the timestamp.
	if nccl.Cat != optrace.Collective || nccl.Device != 0 || nccl.Comm != "0" || nccl.Seq != 12 || nccl.Step != 4 || nccl.Stream != 21 {
		t.Errorf("nccl kernel = %+v", nccl)
	}
	if e := by["Optimizer.step#SGD.step"]; e.Step != -1 {
		t.Errorf("event after the step range got step %d", e.Step)
	}
	if e := by["Memcpy DtoH (Device -> Pageable)"]; e.Cat != optrace.Memcpy || e.Stream != 7 {
		t.Errorf("memcpy = %+v", e)
	}
	if e := by["Memset (Device)"]; e.Cat != optrace.Memset {
		t.Errorf("memset = %+v", e)
	}
	if e := by["torch/nn/modules/module.py(1190): _call_impl"]; e.Cat != optrace.Python || e.Step != 4 {
		t.Errorf("python = %+v", e)
	}
	if e := by["aten::addmm"]; len(e.Args) != 3 || e.Args[1].Key != "Input Dims" || e.Args[1].Value != "[[32, 64], [32, 128], [128, 64]]" {
		t.Errorf("addmm args = %+v", e.Args)
	}
}

func TestTable(t *testing.T) {
	ev := func(extra string) string {
		return `{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":10.5,"dur":2` + extra + `}`
	}
	tests := []struct {
		name string
		in   string
		n    int
		chk  func(t *testing.T, e []optrace.Event, m Meta)
	}{
		{name: "empty object", in: `{}`, chk: func(t *testing.T, e []optrace.Event, m Meta) {
			if m.Rank != -1 {
				t.Errorf("rank %d", m.Rank)
			}
		}},
		{name: "bare array", in: `[` + ev("") + `]`, n: 1},
		{name: "whitespace and unknown keys", in: " {\"foo\": {\"a\": [1, {\"b\": 2}]}, \"traceEvents\": [ " + ev(`,"args":{"x":{"y":[1]}}`) + " ] } \n", n: 1},
		{name: "exact ns", in: `[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1700000000123456.789,"dur":0.0015}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].StartNS != 1700000000123456789 || e[0].DurNS != 2 {
					t.Errorf("got %d/%d", e[0].StartNS, e[0].DurNS)
				}
			}},
		{name: "exponent ts", in: `[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5e3,"dur":1E0}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].StartNS != 1_500_000 || e[0].DurNS != 1000 {
					t.Errorf("got %d/%d", e[0].StartNS, e[0].DurNS)
				}
			}},
		{name: "escaped key and name", in: `[{"p\u0068":"X","cat":"cpu_op","name":"a\"b\\c","pid":1,"tid":1,"ts":1,"dur":1}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].Name != `a"b\c` {
					t.Errorf("name %q", e[0].Name)
				}
			}},
		{name: "skipped kinds", in: `[{"ph":"M","name":"process_name","pid":1},{"ph":"C","name":"mem","ts":1,"pid":1},{"ph":"i","name":"x","ts":1}]`, n: 0,
			chk: func(t *testing.T, _ []optrace.Event, m Meta) {
				if m.Skipped != 3 || m.Elements != 3 {
					t.Errorf("meta %+v", m)
				}
			}},
		{name: "long name clipped", in: `[{"ph":"X","cat":"kernel","name":"` + strings.Repeat("n", optrace.MaxNameLen+10) + `","pid":0,"tid":1,"ts":1,"dur":1}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, m Meta) {
				if len(e[0].Name) != optrace.MaxNameLen || m.Clipped != 1 {
					t.Errorf("len %d clipped %d", len(e[0].Name), m.Clipped)
				}
			}},
		{name: "step ranges nest and expire", in: `[
			{"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":1,"tid":1,"ts":0,"dur":10},
			{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5,"dur":1},
			{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":10,"dur":10},
			{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":10,"dur":1},
			{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":25,"dur":1}]`, n: 5,
			chk: func(t *testing.T, e []optrace.Event, m Meta) {
				got := []int64{e[0].Step, e[1].Step, e[2].Step, e[3].Step, e[4].Step}
				if want := []int64{0, 0, 1, 1, -1}; !equal(got, want) {
					t.Errorf("steps %v, want %v", got, want)
				}
			}},
		{name: "string pid and tid", in: `[{"ph":"X","cat":"gpu_user_annotation","name":"u","pid":"Spans","tid":"stream 3","ts":1,"dur":1,"args":{"device":2}}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].Stream != 3 || e[0].Device != 2 || e[0].Cat != optrace.UserRange {
					t.Errorf("%+v", e[0])
				}
			}},
		{name: "seq without comm dropped", in: `[` + ev(`,"args":{"Seq":3}`) + `]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].Seq != -1 || e[0].Comm != "" {
					t.Errorf("%+v", e[0])
				}
			}},
		{name: "nccl kernel inherits instance from its launch", in: `[
			{"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":1,"tid":1,"ts":0,"dur":100},
			{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":10,"dur":20,"args":{"External id":5,"Process Group Name":"7","Seq":41}},
			{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":12,"dur":2,"args":{"External id":5,"correlation":900}},
			{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":50,"dur":2,"args":{"External id":6,"correlation":901}},
			{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":20,"ts":300,"dur":50,"args":{"device":0,"stream":20,"correlation":900}},
			{"ph":"X","cat":"kernel","name":"ncclDevKernel_Broadcast","pid":0,"tid":20,"ts":400,"dur":50,"args":{"device":0,"stream":20,"correlation":901}}]`, n: 6,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if k := e[4]; k.Cat != optrace.Collective || k.Comm != "7" || k.Seq != 41 || k.Step != 2 {
					t.Errorf("inherited %+v", k)
				}
				if k := e[5]; k.Comm != "" || k.Seq != -1 || k.Step != 2 {
					t.Errorf("launch outside the collective op inherited %+v", k)
				}
			}},
		{name: "torch 1.x nccl op", in: `[{"ph":"X","cat":"cpu_op","name":"nccl:all_reduce","pid":1,"tid":1,"ts":1,"dur":1,"args":{"pg_name":"pg1","seq":"5"}}]`, n: 1,
			chk: func(t *testing.T, e []optrace.Event, _ Meta) {
				if e[0].Cat != optrace.Collective || e[0].Comm != "pg1" || e[0].Seq != 5 {
					t.Errorf("%+v", e[0])
				}
			}},
	}
	for _, tc := range tests {
		for _, z := range []bool{false, true} {
			name := tc.name
			in := []byte(tc.in)
			if z {
				name += "/gz"
				in = gz(t, in)
			}
			t.Run(name, func(t *testing.T) {
				e, m, err := decodeAll(t, in, Options{KeepArgs: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(e) != tc.n {
					t.Fatalf("%d events, want %d", len(e), tc.n)
				}
				if tc.chk != nil {
					tc.chk(t, e, m)
				}
			})
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestErrorsNameField(t *testing.T) {
	good := `{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}`
	tests := []struct{ in, want string }{
		{`{"traceEvents":[` + good + `,{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":-3}]}`, "traceEvents[1].dur: -3000 ns out of range"},
		{`{"traceEvents":[{"ph":"X","name":"a","ts":"x","dur":1}]}`, "traceEvents[0].ts: want a number"},
		{`{"traceEvents":[{"ph":"X","name":"a","dur":1}]}`, "traceEvents[0].ts: missing"},
		{`{"traceEvents":[{"ph":"X","ts":1,"dur":1}]}`, "traceEvents[0].name: missing"},
		{`{"traceEvents":[{"ph":"X","name":"a","ts":1}]}`, "traceEvents[0].dur: missing"},
		{`{"traceEvents":[{"name":"a","ts":1}]}`, "traceEvents[0].ph: missing"},
		{`{"traceEvents":[{"ph":1}]}`, "traceEvents[0].ph: want a string"},
		{`{"traceEvents":[` + good + `,` + good + `,{"ph":"X","name":"a","ts":1,"dur":1,"args":{"correlation":1.5}}]}`, "traceEvents[2].args: correlation: want an integer"},
		{`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"device":-4}}]}`, "traceEvents[0].args.device: -4 out of range"},
		{`{"traceEvents":[{"ph":"X","name":"a","ts":1e300,"dur":1}]}`, "traceEvents[0].ts: 1e300 µs out of range"},
		{`{"traceEvents":[` + good + `,3]}`, "traceEvents[1]: want an object"},
		{`{"traceEvents":[` + good + `,{"ph":"X",`, "traceEvents[1]"},
		{`{"traceEvents":{}}`, "traceEvents: want an array"},
		{`{"distributedInfo":{"rank":"one"}}`, "distributedInfo.rank: want an integer"},
		{`"x"`, "top level: want a JSON object or array"},
		{`{} {}`, "top level: data after the trace"},
		{``, "top level"},
	}
	for _, tc := range tests {
		_, _, err := decodeAll(t, []byte(tc.in), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want containing %q", tc.in, err, tc.want)
		}
	}
}

func TestEmitErrorStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	_, err := Decode(strings.NewReader(`[{"ph":"X","name":"a","ts":1,"dur":1},{"ph":"X","name":"b","ts":1,"dur":1}]`), Options{},
		func(*optrace.Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("err %v after %d emits", err, n)
	}
}

// TestRealTorchTrace records a tiny CPU trace with the installed
// torch.profiler (ProfilerStep# via schedule) and checks it decodes, steps
// included.
func TestRealTorchTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips launching python")
	}
	// /usr/bin/python3 first: the Debian one carries torch here, a
	// pyenv shim on PATH may not.
	var py string
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(c)
		if err == nil && exec.Command(p, "-c", "import torch.profiler").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with torch.profiler (tried /usr/bin/python3 and python3 on PATH)")
	}
	out := filepath.Join(t.TempDir(), "trace.json")
	script := `
import sys, torch
from torch.profiler import profile, schedule, ProfilerActivity, record_function
m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as p:
    for _ in range(4):
        with record_function("forward"):
            y = m(torch.randn(32, 64)).sum()
        y.backward(); opt.step(); opt.zero_grad()
        p.step()
p.export_chrome_trace(sys.argv[1])
`
	if b, err := exec.Command(py, "-c", script, out).CombinedOutput(); err != nil {
		t.Fatalf("torch.profiler: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	evs, meta, err := decodeAll(t, data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[int64]bool{}
	var aten, user int
	for _, e := range evs {
		if e.Step >= 0 {
			steps[e.Step] = true
		}
		if strings.HasPrefix(e.Name, "aten::") && e.Cat == optrace.CPUOp {
			aten++
		}
		// This box's torch 1.13 is built without Kineto: the legacy
		// exporter writes no "cat", so record_function ranges read as
		// CPU ops there and as UserRange under Kineto.
		if e.Name == "forward" && (e.Cat == optrace.UserRange || e.Cat == optrace.CPUOp) {
			user++
		}
	}
	t.Logf("meta %+v, %d events, steps %v", meta, len(evs), steps)
	if aten == 0 || user != 2 || len(steps) != 2 {
		t.Errorf("aten ops %d, forward ranges %d (want 2), steps %v (want 2)", aten, user, steps)
	}
	for _, e := range evs {
		if e.Name == "forward" && e.Step < 0 {
			t.Errorf("forward range outside any step: %+v", e)
		}
	}
}
