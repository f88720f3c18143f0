//go:build !(linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64))

package osstat

import "log/slog"

func openLatency(string, *slog.Logger) (latencySource, string) {
	return nil, "no sched latency BPF object for this platform"
}
