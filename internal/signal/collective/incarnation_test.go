package collective

import (
	"strconv"
	"strings"
	"testing"
)

// The stored ids of different (incarnation, id) pairs never collide, fit
// MaxIDLen, stay valid ids, and say their incarnation.
func TestNamespaceComm(t *testing.T) {
	long := strings.Repeat("p", MaxIDLen)
	ids := []string{"0", "world", "default_pg", "inc1:x", "inc01:x", "inc0:y", "incx:z", "inc:1", long, long[:MaxIDLen-1] + "q", long[:MaxIDLen-5]}
	seen := map[string][2]any{}
	for _, inc := range []int{0, 1, 2, 17, 65535} {
		for _, id := range ids {
			s := NamespaceComm(inc, id)
			if prev, ok := seen[s]; ok {
				t.Fatalf("(%d, %q) and %v both stored as %q", inc, id, prev, s)
			}
			seen[s] = [2]any{inc, id}
			if err := validID("comm", s, true); err != nil {
				t.Fatalf("(%d, %q) → %q: %v", inc, id, s, err)
			}
			n, back := CommIncarnation(s)
			if n != inc {
				t.Fatalf("(%d, %q) → %q reads as incarnation %d", inc, id, s, n)
			}
			if len(id)+len("inc:")+len(strconv.Itoa(inc)) <= MaxIDLen && back != id {
				t.Fatalf("(%d, %q) → %q reads back as %q", inc, id, s, back)
			}
		}
	}
	if NamespaceComm(0, "world") != "world" || NamespaceComm(3, "") != "" {
		t.Fatal("incarnation 0 keeps its ids; an absent parent stays absent")
	}
}

func TestBatchNamespace(t *testing.T) {
	b := &Batch{Comms: []Comm{{ID: "world", Parent: "root", Size: 1}}, Calls: []Call{{Comm: "world"}, {Comm: "world"}, {Comm: "pp"}}}
	b.Namespace(2)
	if b.Comms[0].ID != "inc2:world" || b.Comms[0].Parent != "inc2:root" || b.Calls[1].Comm != "inc2:world" || b.Calls[2].Comm != "inc2:pp" {
		t.Fatalf("%+v", b)
	}
}
