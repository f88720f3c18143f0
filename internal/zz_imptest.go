package internal
import (
 _ "github.com/cilium/ebpf"
 _ "github.com/cilium/ebpf/link"
 _ "github.com/cilium/ebpf/perf"
 _ "github.com/cilium/ebpf/btf"
 _ "github.com/cilium/ebpf/rlimit"
 _ "github.com/google/pprof/profile"
 _ "github.com/ianlancetaylor/demangle"
 _ "github.com/go-delve/delve/pkg/dwarf/frame"
 _ "github.com/prometheus/procfs"
 _ "github.com/prometheus/procfs/sysfs"
)
