// Package auth is laggard's bearer-token authorization: a token file maps
// tokens (stored as SHA-256 hashes, or plain) to scopes — read, admin, and
// ingest for one job or a job-id prefix — and is reloaded on SIGHUP or when
// the file changes, keeping the old tokens when the new file is bad.
//
// The file has one token per line; '#' starts a comment:
//
//	# TOKEN                                                                  SCOPES               NAME
//	sha256:4f6bd4e1c5c2a0d7b2a3c0e4f5d6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f  read                 grafana
//	sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9  ingest:team-a-*      team-a trainers
//	lg_hD8p6XgJ1cQ-plain-tokens-work-too-but-hashes-are-better             ingest,read          ci
//
// SCOPES is a comma-separated list of read, admin (implies every scope),
// ingest (every job), ingest:JOB (one job id) and ingest:PREFIX* (every job
// id starting with PREFIX). NAME (the rest of the line) names the token in
// logs and errors.
package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Kind is a scope's kind.
type Kind uint8

// The scope kinds. Admin implies the others.
const (
	Read Kind = iota + 1
	Ingest
	Admin
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "read"
	case Ingest:
		return "ingest"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Scope is one grant. For Ingest, Job is an exact job id, or a prefix when
// Prefix is set; an empty prefix grants every job.
type Scope struct {
	Kind   Kind
	Job    string
	Prefix bool
}

func (s Scope) String() string {
	if s.Kind != Ingest || (s.Prefix && s.Job == "") {
		return s.Kind.String()
	}
	if s.Prefix {
		return "ingest:" + s.Job + "*"
	}
	return "ingest:" + s.Job
}

// Need is what one request needs: a kind, and for Ingest the job id.
type Need struct {
	Kind Kind
	Job  string
}

// String is the scope that grants n, as a token file writes it. A need
// for ingest to no particular job (a symbol upload: any ingest scope
// will do) is "ingest", never "ingest:" with an empty job.
func (n Need) String() string {
	if n.Kind == Ingest && n.Job != "" {
		return "ingest:" + signal.Clip(n.Job)
	}
	return n.Kind.String()
}

// Describe is n for an error message: "scope ingest:j", or for ingest to
// any job "an ingest scope (ingest:JOB for any job, or ingest)".
func (n Need) Describe() string {
	if n.Kind == Ingest && n.Job == "" {
		return "an ingest scope (ingest:JOB for any job, or ingest)"
	}
	return "scope " + n.String()
}

// Allows reports whether the scope grants n.
func (s Scope) Allows(n Need) bool {
	switch {
	case s.Kind == Admin:
		return true
	case s.Kind != n.Kind:
		return false
	case s.Kind != Ingest:
		return true
	case s.Prefix:
		return strings.HasPrefix(n.Job, s.Job)
	}
	return n.Job == s.Job
}

// Principal is the holder of a valid token.
type Principal struct {
	// Name is the token's name from the file ("line N" when it has none).
	Name   string
	Scopes []Scope
}

// Allows reports whether any of p's scopes grants n.
func (p *Principal) Allows(n Need) bool {
	for _, s := range p.Scopes {
		if s.Allows(n) {
			return true
		}
	}
	return false
}

// ScopeList is p's scopes for messages, e.g. "read,ingest:team-a-*".
func (p *Principal) ScopeList() string {
	parts := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// Verifier looks a presented bearer token up. *Set and *File implement it.
type Verifier interface {
	Lookup(token string) (*Principal, bool)
}

// Set is an immutable set of tokens.
type Set struct {
	entries []entry
	// Plain counts tokens written in the clear (not as sha256:).
	Plain int
}

type entry struct {
	hash [sha256.Size]byte
	p    *Principal
}

// Len is the number of tokens.
func (s *Set) Len() int { return len(s.entries) }

// Lookup returns the principal of token. It hashes the token and compares
// the hash with every entry in constant time, so neither the time taken
// nor an early exit tells how close a guess was.
func (s *Set) Lookup(token string) (*Principal, bool) {
	if token == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	var found *Principal
	for i := range s.entries {
		if subtle.ConstantTimeCompare(h[:], s.entries[i].hash[:]) == 1 {
			found = s.entries[i].p
		}
	}
	return found, found != nil
}

// Hash returns the token file form of token's hash: "sha256:<hex>".
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}

// MinPlainLen is the shortest plain token accepted: a short secret is a
// guessable one.
const MinPlainLen = 16

// maxLine bounds one line of the token file.
const maxLine = 64 << 10

// LineError is a token file error at a line.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

var jobPrefixRe = regexp.MustCompile(`^[A-Za-z0-9._-]{0,128}$`)

// Parse reads a token file (format in the package comment). An error
// names the line; a secret is never quoted in it.
func Parse(r io.Reader) (*Set, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	set := &Set{}
	seen := map[[sha256.Size]byte]int{}
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 {
			return nil, &LineError{line, errors.New("want TOKEN SCOPES [NAME], got one field (a token without scopes)")}
		}
		var e entry
		if hx, ok := cutHashPrefix(fields[0]); ok {
			b, err := hex.DecodeString(hx)
			if err != nil || len(b) != sha256.Size {
				return nil, &LineError{line, errors.New("sha256: wants 64 hex digits (laggard token prints a hashed line)")}
			}
			copy(e.hash[:], b)
		} else {
			if looksHashed(fields[0]) {
				// A mistyped hash line must not become a plain token whose
				// secret is the hash printed in the file.
				return nil, &LineError{line, errors.New("this looks like a SHA-256 hash without the exact prefix sha256: (lower case, then 64 hex digits)")}
			}
			if len(fields[0]) < MinPlainLen {
				return nil, &LineError{line, fmt.Errorf("plain token shorter than %d bytes; use a long random token (laggard token makes one)", MinPlainLen)}
			}
			e.hash = sha256.Sum256([]byte(fields[0]))
			set.Plain++
		}
		if prev, dup := seen[e.hash]; dup {
			return nil, &LineError{line, fmt.Errorf("the same token as line %d", prev)}
		}
		seen[e.hash] = line
		scopes, err := ParseScopes(fields[1])
		if err != nil {
			return nil, &LineError{line, err}
		}
		name := strings.Join(fields[2:], " ")
		if name == "" {
			name = fmt.Sprintf("line %d", line)
		}
		e.p = &Principal{Name: name, Scopes: scopes}
		set.entries = append(set.entries, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &LineError{line + 1, fmt.Errorf("longer than %d bytes", maxLine)}
		}
		return nil, err
	}
	return set, nil
}

// ParseScopes parses a comma-separated scope list.
func ParseScopes(list string) ([]Scope, error) {
	var out []Scope
	for _, s := range strings.Split(list, ",") {
		kind, job, hasJob := strings.Cut(s, ":")
		switch {
		case kind == "read" && !hasJob:
			out = append(out, Scope{Kind: Read})
		case kind == "admin" && !hasJob:
			out = append(out, Scope{Kind: Admin})
		case kind == "ingest" && (!hasJob || job == "*"):
			out = append(out, Scope{Kind: Ingest, Prefix: true})
		case kind == "ingest":
			prefix := strings.HasSuffix(job, "*")
			job = strings.TrimSuffix(job, "*")
			if job == "" || !jobPrefixRe.MatchString(job) {
				return nil, fmt.Errorf("scope %q: a job id or prefix is letters, digits, '.', '_' and '-', with an optional trailing '*'", signal.Clip(s))
			}
			out = append(out, Scope{Kind: Ingest, Job: job, Prefix: prefix})
		default:
			return nil, fmt.Errorf("unknown scope %q: want read, admin, ingest, ingest:JOB or ingest:PREFIX*", signal.Clip(s))
		}
	}
	return out, nil
}

// cutHashPrefix cuts a "sha256:" prefix in any letter case.
func cutHashPrefix(tok string) (string, bool) {
	const p = "sha256:"
	if len(tok) >= len(p) && strings.EqualFold(tok[:len(p)], p) {
		return tok[len(p):], true
	}
	return "", false
}

// looksHashed reports whether a would-be plain token is really a hash
// line written wrongly: a sha256 or sha-256 prefix with another case or
// separator. (A bare 64-hex-digit token stays a valid plain token:
// openssl rand -hex 32 makes those.)
func looksHashed(tok string) bool {
	l := strings.ToLower(tok)
	return strings.HasPrefix(l, "sha256") || strings.HasPrefix(l, "sha-256")
}
