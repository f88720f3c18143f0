package pyclient

import (
	"io/fs"
	"strings"
	"testing"
)

func TestFSHoldsClientAndDemo(t *testing.T) {
	for _, name := range []string{"laggard/__init__.py", "laggard/perf.py", "laggard/shipper.py", "laggard/sinks.py", "laggard/schema.py", "examples/ddp_demo.py"} {
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatalf("embedded %s: %v", name, err)
		}
		if len(b) == 0 {
			t.Fatalf("embedded %s is empty", name)
		}
	}
	b, _ := fs.ReadFile(FS, "laggard/__init__.py")
	if !strings.Contains(string(b), "from .perf import Perf") {
		t.Fatalf("laggard/__init__.py does not export Perf")
	}
}
