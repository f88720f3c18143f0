package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf8"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
)

// The incident keyspaces (docs/format/incident.md). Values are opaque
// JSON written by internal/control (schema laggard.incident/v1): the
// store keeps the bytes durable and the keys ordered, and never decodes
// them, so a record it cannot read can never stop it. The incident
// manager keeps per job:
//
//	i/<job>\x00<incident id>                    → the incident (full record)
//	n/<incident id>\x00<job>                    → its summary (the fleet index: Get by id, List across jobs, Hosts)
//	e/<job>\x00<evidence id>                    → one piece of evidence of the job's working set
//	u/<job>\x00<at_ns u64><content hash u64>    → one audit action
//
// The working set (e/, u/) is what fusion reads: a restarted server
// re-fuses it and gets the same incidents. DeleteJob (and so retention)
// removes all four with the job's other keys in one batch.
const (
	prefixIncident      = "i/"
	prefixIncidentIndex = "n/"
	prefixEvidence      = "e/"
	prefixAudit         = "u/"

	// MaxIncidentBytes bounds one stored incident record (its evidence is
	// bounded by incident.Config.MaxEvidence, each piece by
	// MaxEvidenceBytes' share); MaxIncidentSummaryBytes its index entry.
	MaxIncidentBytes        = 16 << 20
	MaxIncidentSummaryBytes = 256 << 10
	// MaxEvidenceBytes bounds one stored piece of evidence (with its
	// engine detail); MaxActionBytes one audit action.
	MaxEvidenceBytes = 1 << 20
	MaxActionBytes   = 64 << 10
	// MaxIncidentIDLen and MaxEvidenceIDLen bound the ids in keys.
	MaxIncidentIDLen = 128
	MaxEvidenceIDLen = 512

	auditSuffixLen = 8 + 8
)

// IncidentRecord is one incident to store: its full record and its
// summary (the record without evidence and audit, for the index).
type IncidentRecord struct {
	ID      string
	Value   []byte
	Summary []byte
}

// EvidenceRecord is one piece of evidence of a job's working set.
type EvidenceRecord struct {
	ID    string
	Value []byte
}

// ActionKey names one stored audit action: when it was taken and a hash
// of its bytes (so the same action recorded twice is one key).
type ActionKey struct {
	AtNS int64
	Hash uint64
}

// ActionRecord is one stored audit action.
type ActionRecord struct {
	Key   ActionKey
	Value []byte
}

// NewActionRecord keys value (an action's JSON) at atNS.
func NewActionRecord(atNS int64, value []byte) ActionRecord {
	h := fnv.New64a()
	h.Write(value)
	return ActionRecord{Key: ActionKey{AtNS: max(atNS, 0), Hash: h.Sum64()}, Value: value}
}

// IncidentWrite is one durable change of a job's incident keyspaces: a
// fusion round's changed incidents together with the working-set change
// that produced them, so a restart never sees incidents without their
// evidence or evidence without its incidents. Deletions apply before
// puts.
type IncidentWrite struct {
	Put            []IncidentRecord
	Delete         []string
	PutEvidence    []EvidenceRecord
	DeleteEvidence []string
	PutActions     []ActionRecord
	DeleteActions  []ActionKey
}

// Empty reports whether w changes nothing.
func (w *IncidentWrite) Empty() bool {
	return len(w.Put)+len(w.Delete)+len(w.PutEvidence)+len(w.DeleteEvidence)+len(w.PutActions)+len(w.DeleteActions) == 0
}

// CheckIncidentID reports whether id can key an incident: 1 to
// MaxIncidentIDLen bytes of printable UTF-8, no NUL, no '/'.
func CheckIncidentID(id string) error {
	if id == "" || len(id) > MaxIncidentIDLen || !utf8.ValidString(id) || strings.ContainsAny(id, "\x00/") {
		return signal.FieldErrorf("id", "incident id %q: want 1..%d bytes of UTF-8 without NUL or '/'", signal.Clip(id), MaxIncidentIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return signal.FieldErrorf("id", "incident id %q holds a control character", signal.Clip(id))
		}
	}
	return nil
}

// CheckEvidenceID reports whether id can key a piece of evidence.
func CheckEvidenceID(id string) error {
	if id == "" || len(id) > MaxEvidenceIDLen || strings.IndexByte(id, 0) >= 0 {
		return signal.FieldErrorf("id", "evidence id %q: want 1..%d bytes without NUL", signal.Clip(id), MaxEvidenceIDLen)
	}
	return nil
}

func incidentKey(job, id string) []byte {
	return append(jobRange(prefixIncident, job, len(id)), id...)
}

func incidentIndexKey(id, job string) []byte {
	b := make([]byte, 0, len(prefixIncidentIndex)+len(id)+1+len(job))
	b = append(append(append(b, prefixIncidentIndex...), id...), 0)
	return append(b, job...)
}

func evidenceKey(job, id string) []byte {
	return append(jobRange(prefixEvidence, job, len(id)), id...)
}

func auditKey(job string, k ActionKey) []byte {
	b := jobRange(prefixAudit, job, auditSuffixLen)
	b = binary.BigEndian.AppendUint64(b, uint64(max(k.AtNS, 0)))
	return binary.BigEndian.AppendUint64(b, k.Hash)
}

// incidentRanges are job's per-job incident key ranges [lo, hi) (the n/
// index is keyed by incident id and deleted key by key).
func incidentRanges(job string) [][2][]byte {
	out := make([][2][]byte, 0, 3)
	for _, p := range []string{prefixIncident, prefixEvidence, prefixAudit} {
		lo := jobRange(p, job, 0)
		out = append(out, [2][]byte{lo, rangeEnd(lo)})
	}
	return out
}

func (w *IncidentWrite) check() (int64, error) {
	var need int64
	for i, r := range w.Put {
		if err := CheckIncidentID(r.ID); err != nil {
			return 0, fmt.Errorf("put[%d]: %w", i, err)
		}
		switch {
		case len(r.Value) == 0 || len(r.Value) > MaxIncidentBytes:
			return 0, signal.FieldErrorf(fmt.Sprintf("put[%d]", i), "incident %s record of %d bytes: want 1..%d", r.ID, len(r.Value), MaxIncidentBytes)
		case len(r.Summary) == 0 || len(r.Summary) > MaxIncidentSummaryBytes:
			return 0, signal.FieldErrorf(fmt.Sprintf("put[%d]", i), "incident %s summary of %d bytes: want 1..%d", r.ID, len(r.Summary), MaxIncidentSummaryBytes)
		}
		need += int64(len(r.Value) + len(r.Summary))
	}
	for i, id := range w.Delete {
		if err := CheckIncidentID(id); err != nil {
			return 0, fmt.Errorf("delete[%d]: %w", i, err)
		}
	}
	for i, e := range w.PutEvidence {
		if err := CheckEvidenceID(e.ID); err != nil {
			return 0, fmt.Errorf("put_evidence[%d]: %w", i, err)
		}
		if len(e.Value) == 0 || len(e.Value) > MaxEvidenceBytes {
			return 0, signal.FieldErrorf(fmt.Sprintf("put_evidence[%d]", i), "evidence %q of %d bytes: want 1..%d", signal.Clip(e.ID), len(e.Value), MaxEvidenceBytes)
		}
		need += int64(len(e.Value))
	}
	for i, id := range w.DeleteEvidence {
		if err := CheckEvidenceID(id); err != nil {
			return 0, fmt.Errorf("delete_evidence[%d]: %w", i, err)
		}
	}
	for i, a := range w.PutActions {
		if len(a.Value) == 0 || len(a.Value) > MaxActionBytes || a.Key.AtNS < 0 {
			return 0, signal.FieldErrorf(fmt.Sprintf("put_actions[%d]", i), "action of %d bytes at %d: want 1..%d bytes at a time ≥ 0", len(a.Value), a.Key.AtNS, MaxActionBytes)
		}
		need += int64(len(a.Value))
	}
	return need, nil
}

// WriteIncidents applies w to job's incident keyspaces in one durable
// write. The job must exist: a write racing DeleteJob stores nothing
// (ErrNotFound), so a deleted job's incidents are never written back.
func (s *Store) WriteIncidents(job string, w *IncidentWrite) error {
	if w == nil || w.Empty() {
		return nil
	}
	need, err := w.check()
	if err != nil {
		return fmt.Errorf("store: incidents of job %q: %w", job, err)
	}
	return s.ghWrite(job, need, func() error {
		b := s.db.NewBatch()
		defer b.Close()
		var err error
		for _, id := range w.Delete {
			if err == nil {
				err = b.Delete(incidentKey(job, id), nil)
			}
			if err == nil {
				err = b.Delete(incidentIndexKey(id, job), nil)
			}
		}
		for _, id := range w.DeleteEvidence {
			if err == nil {
				err = b.Delete(evidenceKey(job, id), nil)
			}
		}
		for _, k := range w.DeleteActions {
			if err == nil {
				err = b.Delete(auditKey(job, k), nil)
			}
		}
		for _, r := range w.Put {
			if err == nil {
				err = b.Set(incidentKey(job, r.ID), r.Value, nil)
			}
			if err == nil {
				err = b.Set(incidentIndexKey(r.ID, job), r.Summary, nil)
			}
		}
		for _, e := range w.PutEvidence {
			if err == nil {
				err = b.Set(evidenceKey(job, e.ID), e.Value, nil)
			}
		}
		for _, a := range w.PutActions {
			if err == nil {
				err = b.Set(auditKey(job, a.Key), a.Value, nil)
			}
		}
		if err == nil {
			err = s.guard(func() error { return b.Commit(s.wo) })
		}
		if err != nil {
			return fmt.Errorf("store: write incidents of job %q: %w", job, err)
		}
		return nil
	})
}

// scanSuffix calls fn with each key's suffix after lo (a jobRange) and
// its value (both valid during the call only).
func (s *Store) scanSuffix(lo []byte, fn func(suffix, v []byte) error) error {
	return s.scanRange(lo, func(k, v []byte) error { return fn(k[len(lo):], v) })
}

// hasIncidentData reports whether job has incident or evidence keys
// (DeleteJob and JobDiskBytes look at the ranges only then).
func (s *Store) hasIncidentData(job string) bool {
	for _, p := range []string{prefixIncident, prefixEvidence, prefixAudit} {
		lo := jobRange(p, job, 0)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: rangeEnd(lo)})
		if err != nil {
			return true
		}
		ok := it.First()
		_ = it.Close()
		if ok {
			return true
		}
	}
	return false
}

// JobIncidents calls fn with each stored incident of job (id order);
// value is valid during the call only. An unknown job wraps ErrNotFound.
func (s *Store) JobIncidents(job string, fn func(id string, value []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return notFound(job)
	}
	if err := s.scanSuffix(jobRange(prefixIncident, job, 0), func(k, v []byte) error { return fn(string(k), v) }); err != nil {
		return fmt.Errorf("store: incidents of job %q: %w", job, err)
	}
	return nil
}

// Incident returns incident id's job and full record; the error wraps
// ErrNotFound when no job has it. Ids are unique per job; should two jobs
// hold the same id, the first in job order is returned.
func (s *Store) Incident(id string) (job string, value []byte, err error) {
	if err := s.enter(); err != nil {
		return "", nil, err
	}
	defer s.life.RUnlock()
	if CheckIncidentID(id) != nil {
		return "", nil, fmt.Errorf("store: incident %q: %w", signal.Clip(id), ErrNotFound)
	}
	lo := append(append([]byte(prefixIncidentIndex), id...), 0)
	var jobs []string
	if err := s.scanSuffix(lo, func(k, _ []byte) error {
		jobs = append(jobs, string(k))
		return nil
	}); err != nil {
		return "", nil, fmt.Errorf("store: incident %q: %w", id, err)
	}
	for _, j := range jobs {
		v, closer, err := s.db.Get(incidentKey(j, id))
		if errors.Is(err, pebble.ErrNotFound) {
			continue // an index entry whose record went (a torn older write): not this incident
		}
		if err != nil {
			return "", nil, fmt.Errorf("store: incident %q of job %q: %w", id, j, err)
		}
		value = bytes.Clone(v)
		closer.Close()
		return j, value, nil
	}
	return "", nil, fmt.Errorf("store: incident %q: %w", id, ErrNotFound)
}

// IncidentIndex calls fn with every stored incident's summary (the
// fleet index), in incident-id order; summary is valid during the call
// only. A malformed index key is skipped (logged, SkippedRecords).
func (s *Store) IncidentIndex(fn func(id, job string, summary []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	lo := []byte(prefixIncidentIndex)
	hi := []byte(prefixIncidentIndex)
	hi[len(hi)-1]++
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: incident index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(lo):]
		i := bytes.IndexByte(k, 0)
		if i <= 0 || i == len(k)-1 {
			s.skip(it.Key(), fmt.Errorf("%w: incident index key without <id>\\x00<job>", ErrCorrupt), nil)
			continue
		}
		if err := fn(string(k[:i]), string(k[i+1:]), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: incident index: %w", err)
	}
	return nil
}

// IncidentWorkingSet calls ev with each piece of job's stored evidence
// (evidence-id order) and act with each audit action (time order);
// values are valid during the call only; a nil callback skips its part. A malformed audit key is
// skipped (logged, SkippedRecords).
func (s *Store) IncidentWorkingSet(job string, ev func(id string, value []byte) error, act func(k ActionKey, value []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return notFound(job)
	}
	if ev != nil {
		if err := s.scanSuffix(jobRange(prefixEvidence, job, 0), func(k, v []byte) error { return ev(string(k), v) }); err != nil {
			return fmt.Errorf("store: evidence of job %q: %w", job, err)
		}
	}
	if act == nil {
		return nil
	}
	lo := jobRange(prefixAudit, job, 0)
	err := s.scanSuffix(lo, func(k, v []byte) error {
		if len(k) != auditSuffixLen || binary.BigEndian.Uint64(k) > 1<<63-1 {
			s.skip(append(bytes.Clone(lo), k...), fmt.Errorf("%w: audit key of %d bytes", ErrCorrupt, len(k)), nil)
			return nil
		}
		return act(ActionKey{AtNS: int64(binary.BigEndian.Uint64(k)), Hash: binary.BigEndian.Uint64(k[8:])}, v)
	})
	if err != nil {
		return fmt.Errorf("store: audit of job %q: %w", job, err)
	}
	return nil
}

// jobIncidentIDs lists job's incident ids (keys only), for DeleteJob's
// index deletions.
func (s *Store) jobIncidentIDs(job string) ([]string, error) {
	var ids []string
	err := s.scanSuffix(jobRange(prefixIncident, job, 0), func(k, _ []byte) error {
		ids = append(ids, string(k))
		return nil
	})
	return ids, err
}
