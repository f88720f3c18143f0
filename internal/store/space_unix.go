//go:build linux || darwin

package store

import "syscall"

// statfsFree is the space available to unprivileged writers on dir's
// filesystem (f_bavail). The standard library's Statfs is enough here; its
// field types differ by OS, hence the conversions.
func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:unconvert // int64 on linux, uint32 on darwin
}

// statfsTotal is the size of dir's filesystem.
func statfsTotal(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Blocks) * uint64(st.Bsize), nil //nolint:unconvert // as statfsFree
}
