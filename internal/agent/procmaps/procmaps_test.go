package procmaps

import (
	"os"
	"strings"
	"testing"
)

const sample = `55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1311234                    /usr/bin/cat
55d0c0a02000-55d0c0a07000 r-xp 00002000 08:01 1311234                    /usr/bin/cat
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 
7f1c2a200000-7f1c2a228000 r--p 00000000 fd:00 786 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2a228000-7f1c2a3bd000 r-xp 00028000 fd:00 786 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2a500000-7f1c2a501000 r-xp 00000000 08:01 42 /tmp/with space/lib x.so (deleted)
7ffd5b7e1000-7ffd5b802000 rw-p 00000000 00:00 0                          [stack]
7ffd5b9d4000-7ffd5b9d6000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParse(t *testing.T) {
	ms, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 9 {
		t.Fatalf("got %d mappings", len(ms))
	}
	m := ms[4]
	want := Mapping{Start: 0x7f1c2a228000, Limit: 0x7f1c2a3bd000, Offset: 0x28000, Perms: "r-xp", Dev: "fd:00", Inode: 786, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	if m != want {
		t.Fatalf("got %+v want %+v", m, want)
	}
	if !m.Exec() || !m.File() {
		t.Fatal("libc text should be exec+file")
	}
	if ms[2].Path != "" || ms[2].File() {
		t.Fatalf("anon: %+v", ms[2])
	}
	if ms[5].Path != "/tmp/with space/lib x.so (deleted)" || ms[5].File() {
		t.Fatalf("deleted: %+v", ms[5])
	}
	if ms[7].Path != "[vdso]" || ms[7].File() || !ms[7].Exec() {
		t.Fatalf("vdso: %+v", ms[7])
	}
	if f, ok := Find(ms, 0x7f1c2a228010); !ok || f != want {
		t.Fatalf("Find: %+v %v", f, ok)
	}
	if _, ok := Find(ms, 0x7f1c2a3bd000+1); ok {
		t.Fatal("Find in gap")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"zz-10 r-xp 0 08:01 1 /x", "line 1: start"},
		{sample + "10 r-xp 0 08:01 1 /x", "line 10: address range"},
		{"10-20 r-x 0 08:01 1 /x", "perms"},
		{"10-20 r-xp 0g 08:01 1 /x", "offset"},
		{"10-20 r-xp 0 0801 1 /x", "dev"},
		{"10-20 r-xp 0 08:01 x /x", "inode"},
		{"20-10 r-xp 0 08:01 1 /x", "below start"},
		{"10-20 r-xp 0", "missing dev"},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestReadSelf(t *testing.T) {
	ms, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	found := false
	for _, m := range ms {
		if m.Exec() && m.Path == exe {
			found = true
		}
	}
	if !found {
		t.Fatalf("no executable mapping of %s among %d", exe, len(ms))
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("10-20 r-xp 0 08:01 1\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Limit < m.Start || len(m.Perms) != 4 {
				t.Fatalf("accepted invalid %+v", m)
			}
		}
	})
}
