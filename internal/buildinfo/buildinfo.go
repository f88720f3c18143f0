// Package buildinfo reports the binary's version, set at link time with
// -ldflags "-X github.com/laggard-dev/laggard/internal/buildinfo.Version=v1.2.3"
// and otherwise taken from the Go module build info.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is overridden at link time for releases.
var Version = ""

// Info returns the version ("dev" when unknown) and the VCS revision
// (12 hex digits, "" when unknown).
func Info() (version, revision string) {
	version = Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				revision = s.Value[:12]
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	return version, revision
}

// String returns a one-line version description.
func String() string {
	v, rev := Info()
	if rev != "" {
		rev = " " + rev
	}
	return fmt.Sprintf("laggard %s%s (%s %s/%s)", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Register exports laggard_build_info{version,revision,goversion} = 1.
func Register(reg prometheus.Registerer) error {
	v, rev := Info()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "laggard", Name: "build_info",
		Help:        "Build of the running laggard binary; always 1.",
		ConstLabels: prometheus.Labels{"version": v, "revision": rev, "goversion": runtime.Version()}})
	g.Set(1)
	return reg.Register(g)
}
