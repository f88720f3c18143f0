//go:build !nvml

package gpu

import "fmt"

const builtWithout = "built without NVML (build tag nvml)"

// Open returns the absent source: this binary has no NVML.
func Open() (Source, error) {
	return absent{builtWithout}, fmt.Errorf("%w: %s", ErrUnavailable, builtWithout)
}
