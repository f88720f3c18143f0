package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/laggard-dev/laggard/internal/agent/register"
)

// What a job may be shown of other processes (issue 16 item 10,
// docs/security.md "Node agent"). The agent runs as root and samples
// every process on a rank's CPUs; the job's readers are whoever can read
// the job on the server, which the registering user chose. So the agent
// shows a job what its registrant could have read itself, and no more:
//
//   - another process's name and stacks only when the registrant could
//     read them with its own credentials — Linux's ptrace read rule
//     (__ptrace_may_access): the process is visible in the registrant's
//     pid namespace, and either the registrant is root, or the process's
//     real, effective and saved uid and gid are the registrant's
//     (SO_PEERCRED) and it is dumpable (/proc/<pid> is owned by its uid);
//   - every other process only as its share of the rank's core, one
//     opaque "[other process] (hidden)" frame per rank;
//   - a binary is uploaded to the symbol store only when the registrant
//     could open it: the agent opens it on a thread whose filesystem
//     credentials are the registrant's (setfsuid/setfsgid/setgroups).
//
// Not the cgroup: a job's cgroup holds the trainer's children (data
// loaders, a compiler), but also whatever else the user started in it,
// and knowing the cgroup does not say who may read what; uid and pid
// namespace are what the kernel itself uses. An admin may opt in to
// showing every process (agent -show-other-processes).

// procIDs is what decides whether a registrant could read a process.
type procIDs struct {
	uid, gid [3]uint32 // real, effective, saved
	owner    uint32    // owner of /proc/<pid>: the euid, or root when not dumpable
	pidNS    uint64
}

// readProcIDs reads pid's credentials under the procfs root proc.
func readProcIDs(proc string, pid int) (procIDs, bool) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	var p procIDs
	fi, err := os.Stat(dir)
	if err != nil {
		return p, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return p, false
	}
	p.owner = st.Uid
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return p, false
	}
	var haveU, haveG bool
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "Uid" && k != "Gid") {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 3 {
			return p, false
		}
		dst := &p.uid
		if k == "Gid" {
			dst = &p.gid
		}
		for i := range 3 {
			n, err := strconv.ParseUint(f[i], 10, 32)
			if err != nil {
				return p, false
			}
			dst[i] = uint32(n)
		}
		haveU, haveG = haveU || k == "Uid", haveG || k == "Gid"
	}
	if !haveU || !haveG {
		return p, false
	}
	p.pidNS = nsInode(filepath.Join(dir, "ns", "pid"))
	return p, true
}

func nsInode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// mayRead reports whether a registrant with credentials c could read
// process p itself; hostNS is the agent's own pid namespace.
func mayRead(c register.Cred, p procIDs, hostNS uint64) bool {
	// Visible from the registrant's pid namespace: the same one, or the
	// registrant lives in the agent's (host) namespace and sees all. A
	// namespace nested below the registrant's is not followed (rare;
	// hidden is the safe side).
	if c.PidNS == 0 || p.pidNS == 0 || (c.PidNS != hostNS && c.PidNS != p.pidNS) {
		return false
	}
	if c.UID == 0 {
		return true
	}
	for i := range 3 {
		if p.uid[i] != c.UID || p.gid[i] != c.GID {
			return false
		}
	}
	return p.owner == c.UID
}

// openAs runs open (which opens files and must return one) on a fresh OS
// thread whose filesystem credentials are c's — fsuid, fsgid and
// supplementary groups — so the kernel checks every path component and
// the file's permissions as it would for the registrant, not for the
// agent's root. The thread is thrown away afterwards (never unlocked),
// so no goroutine ever runs with those credentials again. A nil c or
// root runs open as the agent.
func openAs(c *register.Cred, open func() (*os.File, error)) (*os.File, error) {
	if c == nil || c.UID == 0 {
		return open()
	}
	type res struct {
		f   *os.File
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		if err := setThreadFSCred(c); err != nil {
			ch <- res{nil, err}
			return
		}
		f, err := open()
		ch <- res{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// errCred: the thread's credentials could not be set (the agent is not
// root): nothing is opened.
var errCred = errors.New("cannot take the registrant's credentials")

// setThreadFSCred sets this thread's supplementary groups, fsgid and
// fsuid (in that order: setfsuid drops the capabilities the others need)
// and checks they took.
func setThreadFSCred(c *register.Cred) error {
	gs := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = int(g)
	}
	if err := unix.Setgroups(gs); err != nil { // per thread: a raw syscall
		return fmt.Errorf("%w: setgroups: %v", errCred, err)
	}
	unix.Setfsgid(int(c.GID))
	unix.Setfsuid(int(c.UID))
	// setfsuid/setfsgid report no error: read the values back (-1 is
	// invalid and changes nothing).
	if g, _ := unix.SetfsgidRetGid(-1); g != int(c.GID) {
		return fmt.Errorf("%w: fsgid is %d, want %d", errCred, g, c.GID)
	}
	if u, _ := unix.SetfsuidRetUid(-1); u != int(c.UID) {
		return fmt.Errorf("%w: fsuid is %d, want %d", errCred, u, c.UID)
	}
	return nil
}
