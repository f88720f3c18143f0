package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// D5: `laggard analyze` on an export holding huge finite values (stored by
// older versions) prints a report or a clear error naming the value, and
// never panics (it did: "strings: negative Repeat count" in the stage
// table, or an internal error from the engine).
func TestD5_AnalyzeHugeValuesNoPanic(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"job":{"id":"huge","world_size":2,"schema":{"version":"stagefrontier/v1","stages":["data.next_wait","model.fwd_loss_cpu_wall","model.backward_cpu_wall","callbacks.cpu_wall","optim.step_cpu_wall","step.other_cpu_wall"]}}}` + "\n")
	for step := 1; step <= 30; step++ {
		for r := range 2 {
			data, wall := "1", "10"
			if step >= 28 && r == 1 {
				data, wall = "1e308", "1.7976931348623157e308"
			}
			fmt.Fprintf(&b, `{"step":%d,"rank":%d,"durations_ms":[%s,2,5,0,1],"wall_ms":%s}`+"\n", step, r, data, wall)
		}
	}
	p := filepath.Join(t.TempDir(), "huge.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"analyze", p}, {"analyze", "-json", p}, {"analyze", "-last", "3", p}} {
		code, out, errs := runDone(t, args...)
		if strings.Contains(errs, "internal error") || strings.Contains(errs, "panic") {
			t.Fatalf("%v: crashed: %s", args, errs)
		}
		switch code {
		case 0:
			if !strings.Contains(out, "huge") {
				t.Fatalf("%v: exit 0 without a report: %q", args, out)
			}
		case 1:
			if !strings.Contains(errs, "durations_ms") && !strings.Contains(errs, "wall_ms") {
				t.Fatalf("%v: error does not name the field: %s", args, errs)
			}
		default:
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
}
