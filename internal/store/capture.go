package store

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
)

// The KAIR capture keyspace (docs/format/optrace.md): one record per
// on-demand operator-trace capture of a job (KAIR §III-A: traces are
// recorded for a few steps when a straggler is suspected, not always).
//
//	a/<job>\x00<capture id, 13 bytes>   → Capture as JSON
//
// A job keeps at most KeepCaptures captures: storing a new one beyond
// that deletes the least valuable (oldest auto captures first; an auto
// capture never evicts a manual one) with its traces in the same write,
// so an auto-triggering job's storage stays bounded.
const (
	prefixCapture = "a/"

	// KeepCaptures is how many captures (with their traces) one job keeps.
	KeepCaptures = 32
	// MaxCaptureBytes bounds one stored capture record (JSON).
	MaxCaptureBytes = 4 << 20
	// MaxCaptureSteps bounds Capture.Steps.
	MaxCaptureSteps = 64
	// captureIDLen is "c" + 12 hex digits.
	captureIDLen = 13
	// maxSignalLen bounds Capture.Signal.
	maxSignalLen = 256
)

// CaptureState is where a capture is in its life.
type CaptureState string

const (
	CapturePending   CaptureState = "pending"   // created, no rank has fetched it
	CaptureRecording CaptureState = "recording" // some rank fetched it
	CaptureComplete  CaptureState = "complete"  // every asked rank uploaded
	CapturePartial   CaptureState = "partial"   // deadline passed with some uploads
	CaptureExpired   CaptureState = "expired"   // deadline passed with none
	CaptureCancelled CaptureState = "cancelled" // an operator cancelled it
)

// Valid reports whether s is a known state.
func (s CaptureState) Valid() bool {
	switch s {
	case CapturePending, CaptureRecording, CaptureComplete, CapturePartial, CaptureExpired, CaptureCancelled:
		return true
	}
	return false
}

// Open reports whether the capture still awaits ranks.
func (s CaptureState) Open() bool { return s == CapturePending || s == CaptureRecording }

// Capture is one operator-trace capture of a job: the plan the ranks poll
// for and what came of it. The store keeps it as given; the server owns
// its state machine.
type Capture struct {
	ID         string            `json:"id"`          // "c" + 12 hex (random), unique per job
	Job        string            `json:"job"`         //
	Trigger    string            `json:"trigger"`     // "manual" | "auto" | "incident" (the incident escalation policy asked)
	Reason     string            `json:"reason"`      // manual: the operator's text; auto: the signal and its value
	CreatedNS  int64             `json:"created_ns"`  // server clock
	DeadlineNS int64             `json:"deadline_ns"` // after it, missing ranks no longer awaited
	StartStep  int64             `json:"start_step"`  // first training step to record (all ranks)
	Steps      int               `json:"steps"`       // sampled steps to record (default 5, max 64)
	Every      int               `json:"every"`       // step-level sampling interval (default 1)
	Ranks      []int             `json:"ranks"`       // ranks asked to record
	Fetched    []int             `json:"fetched"`     // ranks that picked the plan up
	Uploaded   []int             `json:"uploaded"`    // ranks whose trace is stored
	Failed     map[string]string `json:"failed,omitempty"`
	State      CaptureState      `json:"state"`
	// Signal is an auto capture's finding ("straggler:2", "onset:1500",
	// "greyhound:<ns>"): the trigger fires once per finding, also across
	// restarts.
	Signal string `json:"signal,omitempty"`
	// Incarnation is the launch of the job the capture asks
	// (docs/design/roles-and-runs.md): only its processes record for it.
	Incarnation int `json:"incarnation,omitempty"`
	// Note says why a capture closed early (the job restarted).
	Note string `json:"note,omitempty"`
}

// NewCaptureID returns a fresh random capture id ("c" + 12 hex digits).
func NewCaptureID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return "c" + hex.EncodeToString(b[:])
}

// ValidCaptureID reports whether id has the form NewCaptureID returns.
func ValidCaptureID(id string) bool {
	if len(id) != captureIDLen || id[0] != 'c' {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func checkCaptureID(id string) error {
	if !ValidCaptureID(id) {
		return signal.FieldErrorf("id", "capture id %q is not \"c\" and 12 lower-case hex digits", signal.Clip(id))
	}
	return nil
}

// Validate checks what the store relies on; errors name the field.
func (c *Capture) Validate() error {
	if err := checkCaptureID(c.ID); err != nil {
		return err
	}
	if err := checkJobID(c.Job); err != nil {
		return signal.FieldErrorf("job", "%v", err)
	}
	switch {
	case c.Trigger != "manual" && c.Trigger != "auto" && c.Trigger != "incident":
		return signal.FieldErrorf("trigger", "%q is not manual, auto or incident", signal.Clip(c.Trigger))
	case !c.State.Valid():
		return signal.FieldErrorf("state", "unknown capture state %q", signal.Clip(string(c.State)))
	case c.Steps < 1 || c.Steps > MaxCaptureSteps:
		return signal.FieldErrorf("steps", "%d out of range [1,%d]", c.Steps, MaxCaptureSteps)
	case c.Every < 1:
		return signal.FieldErrorf("every", "%d must be ≥ 1", c.Every)
	case c.StartStep < 0:
		return signal.FieldErrorf("start_step", "%d must be ≥ 0", c.StartStep)
	case len(c.Signal) > maxSignalLen:
		return signal.FieldErrorf("signal", "%d bytes, more than %d", len(c.Signal), maxSignalLen)
	}
	for _, f := range []struct {
		name  string
		ranks []int
	}{{"ranks", c.Ranks}, {"fetched", c.Fetched}, {"uploaded", c.Uploaded}} {
		for i, r := range f.ranks {
			if r < 0 || r > maxRank {
				return signal.FieldErrorf(fmt.Sprintf("%s[%d]", f.name, i), "rank %d out of range", r)
			}
		}
	}
	return nil
}

func captureKey(job, id string) []byte {
	return append(jobRange(prefixCapture, job, captureIDLen), id...)
}

// captureRanges are job's capture and trace ranges [lo, hi), deleted with
// the job.
func captureRanges(job string) [][2][]byte {
	out := make([][2][]byte, 0, 2)
	for _, p := range []string{prefixCapture, prefixOpTrace} {
		lo := jobRange(p, job, 0)
		out = append(out, [2][]byte{lo, rangeEnd(lo)})
	}
	return out
}

// hasCaptures reports whether job has any capture key (DeleteJob: its
// ranges need compacting only then).
func (s *Store) hasCaptures(job string) bool {
	lo := jobRange(prefixCapture, job, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: rangeEnd(lo)})
	if err != nil {
		return true
	}
	ok := it.First()
	_ = it.Close()
	return ok
}

// captureWrite runs a write of job's capture or trace keys under jobMu,
// so it cannot interleave with DeleteJob (a deleted job's capture is
// never written back) or with another capture write of any job.
func (s *Store) captureWrite(job string, need int64, fn func() error) error {
	return s.ghWrite(job, need, fn)
}

// PutCapture creates or replaces capture c of job c.Job (which must
// exist). A new capture beyond the job's KeepCaptures deletes one (see
// evictable) and its traces in the same durable write.
func (s *Store) PutCapture(c *Capture) error {
	if c == nil {
		return signal.FieldErrorf("capture", "nil")
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("store: capture: %w", err)
	}
	v, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: capture %s: %w", c.ID, err)
	}
	if len(v) > MaxCaptureBytes {
		return fmt.Errorf("store: capture %s is %d bytes of JSON, over the %d-byte limit", c.ID, len(v), MaxCaptureBytes)
	}
	job := c.Job
	return s.captureWrite(job, int64(len(v)), func() error {
		b := s.db.NewBatch()
		defer b.Close()
		key := captureKey(job, c.ID)
		_, closer, err := s.db.Get(key)
		switch {
		case err == nil:
			closer.Close()
		case errors.Is(err, pebble.ErrNotFound):
			// New: make room by dropping captures beyond the bound.
			old, err := s.captureList(job)
			if err != nil {
				return err
			}
			victims, err := evictable(old, len(old)-(KeepCaptures-1), automatic(c.Trigger))
			if err != nil {
				return fmt.Errorf("store: put capture %s of job %q: %w", c.ID, job, err)
			}
			for _, id := range victims {
				if err := s.deleteCapture(b, job, id); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("store: read capture %s of job %q: %w", c.ID, job, err)
		}
		if err := b.Set(key, v, nil); err != nil {
			return err
		}
		if err := s.guard(func() error { return b.Commit(s.wo) }); err != nil {
			return fmt.Errorf("store: put capture %s of job %q: %w", c.ID, job, err)
		}
		return nil
	})
}

// ErrCaptureLimit is wrapped by PutCapture when a new auto capture would
// have to evict an operator's (manual) capture to stay within
// KeepCaptures.
var ErrCaptureLimit = errors.New("store: the job keeps its limit of captures")

// automatic reports whether trigger is the server's own (auto, or the
// incident escalation policy's): such captures never evict an operator's.
func automatic(trigger string) bool { return trigger == "auto" || trigger == "incident" }

// evictable picks n captures of old (newest first) to delete so a new one
// fits, least valuable first: records that do not decode, then auto
// captures without a trace, then auto ones with traces, then (only when
// the new capture is manual) manual ones, then open ones; oldest first
// within each. An auto capture never evicts a manual one: when only
// those are left it is refused (ErrCaptureLimit), so a job that keeps
// triggering cannot push out what an operator asked for.
func evictable(old []capEntry, n int, auto bool) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	rank := func(e capEntry) int {
		switch {
		case e.c == nil:
			return 0
		case e.c.State.Open():
			return 4
		case automatic(e.c.Trigger) && len(e.c.Uploaded) == 0:
			return 1
		case automatic(e.c.Trigger):
			return 2
		}
		return 3
	}
	var out []string
	for cls := 0; cls <= 4 && len(out) < n; cls++ {
		if auto && cls >= 3 {
			break
		}
		for i := len(old) - 1; i >= 0 && len(out) < n; i-- { // oldest first
			if rank(old[i]) == cls {
				out = append(out, old[i].id)
			}
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("%w (%d): an auto capture would evict an operator's manual capture; delete or let one go", ErrCaptureLimit, KeepCaptures)
	}
	return out, nil
}

// deleteCapture adds the deletion of capture id and its traces to b.
func (s *Store) deleteCapture(b *pebble.Batch, job, id string) error {
	if err := b.Delete(captureKey(job, id), nil); err != nil {
		return err
	}
	return b.DeleteRange(opTracePrefix(job, id), opTraceEnd(job, id), nil)
}

// capEntry is one stored capture: its id, creation time and (when it
// decodes) the record.
type capEntry struct {
	id      string
	created int64
	c       *Capture
}

// captureList reads job's captures, newest first (created_ns, then id,
// descending); a record that does not decode is skipped with a logged
// error naming its key, and sorts as the oldest.
func (s *Store) captureList(job string) ([]capEntry, error) {
	lo := jobRange(prefixCapture, job, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: rangeEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("store: iterate captures of job %q: %w", job, err)
	}
	var out []capEntry
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		id := string(key[len(lo):])
		c, err := decodeCapture(key, job, id, it.Value())
		if err != nil {
			s.skip(key, err, nil)
			out = append(out, capEntry{id: id, created: -1})
			continue
		}
		out = append(out, capEntry{id: id, created: c.CreatedNS, c: c})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: iterate captures of job %q: %w", job, err)
	}
	slices.SortFunc(out, func(a, b capEntry) int {
		if a.created != b.created {
			if a.created > b.created {
				return -1
			}
			return 1
		}
		return -bytes.Compare([]byte(a.id), []byte(b.id))
	})
	return out, nil
}

func decodeCapture(key []byte, job, id string, v []byte) (*Capture, error) {
	var c Capture
	if err := json.Unmarshal(v, &c); err != nil {
		return nil, fmt.Errorf("store: key %s: %w: %v", keyString(key), ErrCorrupt, err)
	}
	if c.ID != id || c.Job != job {
		return nil, fmt.Errorf("store: key %s: %w: record names capture %q of job %q", keyString(key), ErrCorrupt, signal.Clip(c.ID), signal.Clip(c.Job))
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("store: key %s: %w: %v", keyString(key), ErrCorrupt, err)
	}
	return &c, nil
}

// Capture returns capture id of job; the error wraps ErrNotFound when the
// job or the capture does not exist, ErrCorrupt (naming the key) when the
// stored record does not decode.
func (s *Store) Capture(job, id string) (*Capture, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	if !ValidCaptureID(id) {
		return nil, fmt.Errorf("store: job %q has no capture %q: %w", job, signal.Clip(id), ErrNotFound)
	}
	key := captureKey(job, id)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("store: job %q has no capture %q: %w", job, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read capture %s of job %q: %w", id, job, err)
	}
	defer closer.Close()
	return decodeCapture(key, job, id, v)
}

// Captures returns job's captures, newest first (by CreatedNS). Records
// that do not decode are skipped (logged with their key and counted in
// SkippedRecords).
func (s *Store) Captures(job string) ([]*Capture, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	list, err := s.captureList(job)
	if err != nil {
		return nil, err
	}
	out := make([]*Capture, 0, len(list))
	for _, e := range list {
		if e.c != nil {
			out = append(out, e.c)
		}
	}
	return out, nil
}
