package collective

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Incarnations (docs/design/roles-and-runs.md, "Collectives"): calls are
// stored by (rank, communicator, seq), and a restarted job's process
// groups keep their names (gloo's "0", "default_pg"), so incarnation N's
// seq 0, 1, … would land on incarnation 0's. The server therefore stores
// the communicator ids of incarnation N > 0 as "incN:" + id, which keeps
// each launch's calls apart without a change of the stored format, and
// lets a report say which launch a communicator belongs to
// (CommIncarnation). Incarnation 0 keeps its ids as sent, so data stored
// before incarnations existed reads as before; an id of incarnation 0
// that already has the "incN:" form is stored as "inc0:" + id, so the
// mapping stays one to one.

// NamespaceComm is the stored id of communicator id sent by incarnation
// inc. An id too long for MaxIDLen once prefixed keeps its head and a
// 64-bit hash of the whole id ("incN:" + head + "~" + 16 hex digits).
func NamespaceComm(inc int, id string) string {
	if id == "" || (inc <= 0 && !namespaced(id)) {
		return id
	}
	p := "inc" + strconv.Itoa(max(inc, 0)) + ":"
	if len(p)+len(id) <= MaxIDLen {
		return p + id
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	sum := strconv.FormatUint(h.Sum64(), 16)
	sum = strings.Repeat("0", 16-len(sum)) + sum
	return p + id[:MaxIDLen-len(p)-1-len(sum)] + "~" + sum
}

// CommIncarnation is the incarnation a stored communicator id belongs to
// and the id as its processes named it (hashed when it was too long).
func CommIncarnation(stored string) (inc int, id string) {
	if !namespaced(stored) {
		return 0, stored
	}
	i := strings.IndexByte(stored, ':')
	n, _ := strconv.Atoi(stored[3:i])
	return n, stored[i+1:]
}

// namespaced reports whether id has the stored form "inc<digits>:…".
func namespaced(id string) bool {
	if !strings.HasPrefix(id, "inc") {
		return false
	}
	i := strings.IndexByte(id, ':')
	if i < 4 || i > 8 {
		return false
	}
	for _, c := range id[3:i] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Namespace stores b under incarnation inc: every communicator id, parent
// and call communicator (NamespaceComm). It changes b in place.
func (b *Batch) Namespace(inc int) {
	for i := range b.Comms {
		c := &b.Comms[i]
		c.ID, c.Parent = NamespaceComm(inc, c.ID), NamespaceComm(inc, c.Parent)
	}
	last, stored := "", ""
	for i := range b.Calls {
		c := &b.Calls[i]
		if c.Comm != last || i == 0 { // calls come in runs of one communicator
			last, stored = c.Comm, NamespaceComm(inc, c.Comm)
		}
		c.Comm = stored
	}
}
