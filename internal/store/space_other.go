//go:build !(linux || darwin)

package store

import "errors"

// statfsFree is not implemented here: the free-space reserve is not
// enforced (a full disk still fails commits with ErrDiskFull, see space.go).
func statfsFree(string) (uint64, error) { return 0, errors.ErrUnsupported }

// statfsTotal is not implemented here: defaults are not scaled to the
// volume.
func statfsTotal(string) (uint64, error) { return 0, errors.ErrUnsupported }
