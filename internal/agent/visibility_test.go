package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/laggard-dev/laggard/internal/agent/register"
)

func TestMayRead(t *testing.T) {
	const host, ctr = 100, 200
	user := register.Cred{UID: 1000, GID: 1000, PidNS: host}
	own := procIDs{uid: [3]uint32{1000, 1000, 1000}, gid: [3]uint32{1000, 1000, 1000}, owner: 1000, pidNS: host}
	for _, c := range []struct {
		name string
		c    register.Cred
		p    procIDs
		want bool
	}{
		{"its own process", user, own, true},
		{"another user's", user, procIDs{uid: [3]uint32{1001, 1001, 1001}, gid: own.gid, owner: 1001, pidNS: host}, false},
		{"root's", user, procIDs{owner: 0, pidNS: host}, false},
		{"setuid: saved uid differs", user, procIDs{uid: [3]uint32{1000, 1000, 0}, gid: own.gid, owner: 1000, pidNS: host}, false},
		{"another group", user, procIDs{uid: own.uid, gid: [3]uint32{1000, 5, 1000}, owner: 1000, pidNS: host}, false},
		{"not dumpable (/proc/pid owned by root)", user, procIDs{uid: own.uid, gid: own.gid, owner: 0, pidNS: host}, false},
		{"root registrant, host namespace", register.Cred{PidNS: host}, procIDs{uid: [3]uint32{7, 7, 7}, owner: 7, pidNS: ctr}, true},
		{"root in a container: outside its namespace", register.Cred{PidNS: ctr}, procIDs{owner: 0, pidNS: host}, false},
		{"root in a container: inside it", register.Cred{PidNS: ctr}, procIDs{owner: 0, pidNS: ctr}, true},
		{"unknown namespace", register.Cred{}, procIDs{pidNS: host}, false},
	} {
		if got := mayRead(c.c, c.p, host); got != c.want {
			t.Errorf("%s: mayRead = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReadProcIDsSelf(t *testing.T) {
	p, ok := readProcIDs("/proc", os.Getpid())
	if !ok || p.uid[1] != uint32(os.Geteuid()) || p.gid[1] != uint32(os.Getegid()) || p.pidNS == 0 {
		t.Fatalf("readProcIDs(self) = %+v, %v", p, ok)
	}
	if _, ok := readProcIDs("/proc", 1<<30); ok {
		t.Error("a pid that does not exist was read")
	}
}

// TestOpenAsRegistrant: the uploader opens files with the registrant's
// filesystem credentials, on a thread thrown away afterwards.
func TestOpenAsRegistrant(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to take another user's credentials")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's parent: nobody must reach the files
	private, public := filepath.Join(dir, "private"), filepath.Join(dir, "public")
	os.WriteFile(private, []byte("root only"), 0o600)
	os.WriteFile(public, []byte("anyone"), 0o644)
	nobody := &register.Cred{UID: 65534, GID: 65534}
	open := func(p string) func() (*os.File, error) { return func() (*os.File, error) { return os.Open(p) } }
	if f, err := openAs(nobody, open(private)); !errors.Is(err, os.ErrPermission) {
		if f != nil {
			f.Close()
		}
		t.Errorf("nobody opening a 0600 root file: %v, want permission denied", err)
	}
	f, err := openAs(nobody, open(public))
	if err != nil {
		t.Fatalf("nobody opening a 0644 file: %v", err)
	}
	f.Close()
	// The agent's own credentials are untouched on every other thread.
	for range 20 {
		f, err := os.Open(private)
		if err != nil {
			t.Fatalf("the agent lost its credentials: %v", err)
		}
		f.Close()
	}
	// Groups count: a file readable by a supplementary group only.
	grp := filepath.Join(dir, "group")
	os.WriteFile(grp, []byte("g"), 0o640)
	os.Chown(grp, 0, 4242)
	if f, err := openAs(&register.Cred{UID: 65534, GID: 65534, Groups: []uint32{4242}}, open(grp)); err != nil {
		t.Errorf("member of the file's group: %v", err)
	} else {
		f.Close()
	}
	if _, err := openAs(nobody, open(grp)); !errors.Is(err, os.ErrPermission) {
		t.Errorf("not a member of the file's group: %v", err)
	}
}
