// Package buildinfo reports the binary's version, set at link time with
// -ldflags "-X github.com/laggard-dev/laggard/internal/buildinfo.Version=v1.2.3"
// and otherwise taken from the Go module build info.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is overridden at link time for releases.
var Version = ""

// String returns a one-line version description.
func String() string {
	v, rev := Version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return fmt.Sprintf("laggard %s%s (%s %s/%s)", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
