package elfinfo

import (
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The paths the agent opens for symbols and unwind tables come from
// other processes (/proc/<pid>/maps, a container's file system), so a
// process can point them at a symlink to a host secret or at a FIFO.
// Every such open goes through OpenInRoot or OpenProc: never blocks
// (O_NONBLOCK, after an O_PATH check that the inode is a regular file),
// never leaves the process's root, and hands back the fd that was
// checked, so the file read is the file verified (SysOM-AI §3.4: the
// agent uploads binaries to the central symbol store).

// ErrNotRegular is returned for a path naming a FIFO, device, directory
// or symlink (where symlinks are refused).
var ErrNotRegular = errors.New("not a regular file")

// OpenInRoot opens name as a process whose root directory is root sees
// it: openat2 with RESOLVE_IN_ROOT, so ".." and absolute symlinks stay
// inside root, and RESOLVE_NO_MAGICLINKS (no /proc/self/fd tricks).
// followSymlinks=false also refuses any symlink on the way
// (RESOLVE_NO_SYMLINKS); true allows ones that stay in root (Fedora's
// /usr/lib/debug/.build-id entries are symlinks). Only regular files
// are opened for reading.
func OpenInRoot(root, name string, followSymlinks bool) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open root", Path: root, Err: err}
	}
	defer unix.Close(dir)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if !followSymlinks {
		how.Flags |= unix.O_NOFOLLOW
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	var fd int
	for {
		fd, err = unix.Openat2(dir, name, &how)
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root, name), Err: err}
	}
	defer unix.Close(fd)
	return reopen(fd, filepath.Join(root, name))
}

// OpenProc opens a /proc magic link the agent built itself
// (/proc/<pid>/map_files/<range>: the exact mapped inode) as a regular
// file, without blocking.
func OpenProc(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return reopen(fd, path)
}

// reopen checks that the O_PATH fd is a regular file and opens that same
// inode for reading through /proc/self/fd (no open side effects on
// devices, no blocking on FIFOs), then checks the inode again.
func reopen(pathFD int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(pathFD, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pathFD), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "reopen", Path: name, Err: err}
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || st2.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "reopen", Path: name, Err: errors.New("inode changed")}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// ReaderCRC is the .gnu_debuglink checksum (CRC-32, IEEE, as zlib's
// crc32) of r's contents.
func ReaderCRC(r io.Reader) (uint32, error) {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, r); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// OpenDebugFile opens the separate debug file of the ELF f, seen at
// path inside root, looking under debugDir (both as the process inside
// root sees them): by Build-ID, then by .gnu_debuglink next to the file,
// in its .debug/ and under debugDir + its directory. A candidate is
// accepted only if its own Build-ID equals f's (and, for a debuglink,
// its CRC matches), so a planted file is never taken. Returns nil when
// none is found; name is the candidate's in-root path.
func OpenDebugFile(root, path string, f *elf.File, debugDir string) (fh *os.File, name string, err error) {
	id, err := BuildID(f)
	if err != nil {
		return nil, "", err
	}
	if id != "" {
		if p, err := BuildIDPath(debugDir, id); err == nil {
			if fh, err := OpenInRoot(root, p, true); err == nil {
				if HasBuildID(fh, id) {
					return fh, p, nil
				}
				fh.Close()
			}
		}
	}
	link, crc, ok, err := DebugLink(f)
	if err != nil || !ok {
		return nil, "", err
	}
	dir := filepath.Dir(path)
	for _, cand := range []string{
		filepath.Join(dir, link),
		filepath.Join(dir, ".debug", link),
		filepath.Join(debugDir, dir, link),
	} {
		if cand == path {
			continue
		}
		fh, err := OpenInRoot(root, cand, false)
		if err != nil {
			continue
		}
		got, err := ReaderCRC(io.NewSectionReader(fh, 0, 1<<62))
		if err == nil && got == crc && (id == "" || HasBuildID(fh, id)) {
			return fh, cand, nil
		}
		fh.Close()
	}
	return nil, "", nil
}

// HasBuildID reports whether the ELF file open as r carries Build-ID id.
func HasBuildID(r io.ReaderAt, id string) bool {
	ef, err := elf.NewFile(r)
	if err != nil {
		return false
	}
	got, err := BuildID(ef)
	return err == nil && got != "" && got == id
}
