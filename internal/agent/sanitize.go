package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Strings the agent ships come from other processes: a process names
// itself (prctl PR_SET_NAME), a Python code object names its function and
// file, a driver names its interrupt, a trainer names its communicator.
// Any of them may be invalid UTF-8 (or absurdly long), which the wire
// format (proto3 strings) cannot carry: one such string used to make the
// server refuse the node's whole window (issue 16 item 8a). The agent
// repairs every string before it queues a batch: invalid bytes become
// U+FFFD and the string is clipped to the signal's bound on a rune
// boundary. Sanitizing is deterministic, so a communicator id and the
// calls naming it still match.

// cleanString returns s as valid UTF-8 of at most max bytes, and whether
// it had to change it.
func cleanString(s string, max int) (string, bool) {
	if len(s) <= max && utf8.ValidString(s) {
		return s, false
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s, true
}

// cleaner counts the strings it repaired.
type cleaner struct{ n int }

func (c *cleaner) fix(p *string, max int) {
	if v, changed := cleanString(*p, max); changed {
		*p = v
		c.n++
	}
}

// sanitizeStacks repairs every string of b in place and returns how many
// it changed.
func sanitizeStacks(b *stack.Batch) int {
	var c cleaner
	c.fix(&b.Node, stack.MaxNameLen)
	for i := range b.Mappings {
		c.fix(&b.Mappings[i].Path, stack.MaxNameLen)
	}
	for i := range b.Samples {
		s := &b.Samples[i]
		c.fix(&s.Comm, stack.MaxNameLen)
		c.fix(&s.Thread, stack.MaxNameLen)
		for j := range s.Frames {
			c.fix(&s.Frames[j].Func, stack.MaxNameLen)
			c.fix(&s.Frames[j].File, stack.MaxNameLen)
		}
	}
	return c.n
}

// sanitizeOS repairs every string of b in place.
func sanitizeOS(b *osstat.Batch) int {
	var c cleaner
	c.fix(&b.Node, osstat.MaxNameLen)
	for i := range b.Points {
		c.fix(&b.Points[i].Name, osstat.MaxNameLen)
		c.fix(&b.Points[i].Device, osstat.MaxNameLen)
	}
	for i := range b.Absent {
		c.fix(&b.Absent[i].Source, osstat.MaxNameLen)
		c.fix(&b.Absent[i].Reason, osstat.MaxNameLen)
	}
	return c.n
}

// maxHostLen bounds a communicator's host name (collective.Comm.Validate).
const maxHostLen = 255

// cleanID returns s as a collective id (printable ASCII, at most
// collective.MaxIDLen bytes) unchanged when it is one; otherwise every
// other byte (and '%') is %-escaped, and an id still too long becomes
// "x-" and a hash of it. Injective in practice, so two communicators
// never merge and a call still names its communicator.
func cleanID(s string) (string, bool) {
	ok := len(s) <= collective.MaxIDLen
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= 0x21 && s[i] <= 0x7e
	}
	if ok {
		return s, false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x21 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	if b.Len() <= collective.MaxIDLen {
		return b.String(), true
	}
	h := sha256.Sum256([]byte(s))
	return "x-" + hex.EncodeToString(h[:16]), true
}

func (c *cleaner) id(p *string) {
	if *p == "" {
		return
	}
	if v, changed := cleanID(*p); changed {
		*p = v
		c.n++
	}
}

// sanitizeCollectives repairs the strings of comms and calls in place.
func sanitizeCollectives(comms []collective.Comm, calls []collective.Call) int {
	var c cleaner
	for i := range comms {
		m := &comms[i]
		c.id(&m.ID)
		c.id(&m.Parent)
		c.id(&m.Backend)
		c.fix(&m.Host, maxHostLen)
	}
	for i := range calls {
		c.id(&calls[i].Comm)
		c.id(&calls[i].Dtype)
	}
	return c.n
}
