package analysis

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// The validation protocol's JSON (docs/format/greyhound.md, Greyhound
// §4.3): the plan the server publishes and the result each rank posts.
// These are outside input and output, so they are typed and checked here
// rather than trusted to the engine's in-memory types.

// The protocol's types are single-sourced in internal/signal/collective
// (the node agent speaks them too).
type (
	ValidationPlan   = collective.ValidationPlan
	GEMMTest         = collective.GEMMTest
	P2PTest          = collective.P2PTest
	Link             = collective.Link
	ValidationResult = collective.ValidationResult
	P2PResult        = collective.P2PResult
)

// Bounds on a result: generous for real benchmarks, small enough that a
// hostile body cannot make the judge slow.
const (
	maxResultReps  = 64
	maxResultP2P   = 4096
	maxResultMS    = 3.6e6 // one hour for one repetition
	maxResultError = 1024
	maxPauseNS     = int64(3600e9) // an hour: far beyond any plan's deadline
	// MaxResultBytes bounds a result body.
	MaxResultBytes = 1 << 20
)

// DecodeValidationResult reads one rank's result and checks it against
// the plan and the job's world size. Errors are *signal.FieldError naming
// the field (`p2p[2].ms[0]`).
func DecodeValidationResult(r io.Reader, plan *ValidationPlan, world int) (*ValidationResult, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxResultBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxResultBytes {
		return nil, signal.FieldErrorf("body", "larger than %d bytes", MaxResultBytes)
	}
	// Strict, as the ingest decoders (internal/wire): unknown members,
	// names in another case, duplicate keys and trailing data are
	// errors. A lax decode would store a mistyped result ("gemm": […])
	// as the rank's final answer with no measurements, and the corrected
	// retry would then be a conflict.
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, signal.FieldErrorf("body", "must be a JSON object")
	}
	var res ValidationResult
	if err := json.Unmarshal(b, &res, json.RejectUnknownMembers(true)); err != nil {
		return nil, jsonFieldError(err)
	}
	if err := validateResult(&res, plan, world); err != nil {
		return nil, err
	}
	return &res, nil
}

// jsonFieldError names the field a JSON decoding error is about
// ("p2p[0].ms[1]", an unknown member by its name). Messages never quote
// the input.
func jsonFieldError(err error) error {
	var se *json.SemanticError
	var xe *jsontext.SyntacticError
	switch {
	case errors.As(err, &se):
		f := resultPath(se.JSONPointer)
		if se.Err == json.ErrUnknownName {
			return signal.FieldErrorf(f, "unknown field (names are case-sensitive)")
		}
		if errors.As(se.Err, &xe) {
			break
		}
		msg := "has the wrong JSON type"
		if se.GoType != nil {
			msg = "must be JSON for " + se.GoType.String()
		}
		if se.JSONKind != 0 {
			msg += ", got " + se.JSONKind.String()
		}
		return signal.FieldErrorf(f, "%s", msg)
	case errors.As(err, &xe):
	default:
		return signal.FieldErrorf("body", "is not a JSON result object")
	}
	f := resultPath(xe.JSONPointer)
	if xe.Err == jsontext.ErrDuplicateName {
		return signal.FieldErrorf(f, "duplicate key")
	}
	return signal.FieldErrorf(f, "invalid JSON at byte %d", xe.ByteOffset)
}

// resultPath turns a JSON Pointer (/p2p/0/ms/1) into a field path
// (p2p[0].ms[1]); a result has no maps, so a number is an index.
func resultPath(p jsontext.Pointer) string {
	var sb strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 32); err == nil {
			sb.WriteString("[" + tok + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(signal.Clip(tok))
		if sb.Len() > 256 {
			break
		}
	}
	if sb.Len() == 0 {
		return "body"
	}
	return sb.String()
}

// validateResult checks r against plan (nil: only the plan-free checks)
// and the world size (0: unknown).
func validateResult(r *ValidationResult, plan *ValidationPlan, world int) error {
	if r.Rank < 0 || (world > 0 && r.Rank >= world) || r.Rank > math.MaxInt32 {
		return signal.FieldErrorf("rank", "must be in [0, %d), got %d", max(world, 1), r.Rank)
	}
	if len(r.Error) > maxResultError {
		return signal.FieldErrorf("error", "longer than %d bytes", maxResultError)
	}
	if r.Missed && (len(r.GEMMMS) > 0 || len(r.P2P) > 0) {
		return signal.FieldErrorf("missed", "a missed plan carries no measurements")
	}
	// The pause: both or neither, in order, within the calls' time range
	// and at most the longest a plan may hold a rank.
	switch {
	case r.PausedFromNS < 0 || r.PausedFromNS > collective.MaxNS:
		return signal.FieldErrorf("paused_from_ns", "must be a Unix-epoch nanosecond time in [0, %d], got %d", collective.MaxNS, r.PausedFromNS)
	case r.PausedToNS < 0 || r.PausedToNS > collective.MaxNS:
		return signal.FieldErrorf("paused_to_ns", "must be a Unix-epoch nanosecond time in [0, %d], got %d", collective.MaxNS, r.PausedToNS)
	case (r.PausedFromNS == 0) != (r.PausedToNS == 0):
		return signal.FieldErrorf("paused_to_ns", "paused_from_ns and paused_to_ns come together")
	case r.PausedToNS < r.PausedFromNS:
		return signal.FieldErrorf("paused_to_ns", "is before paused_from_ns")
	case r.PausedToNS-r.PausedFromNS > maxPauseNS:
		return signal.FieldErrorf("paused_to_ns", "a pause of %d s is longer than %d s", (r.PausedToNS-r.PausedFromNS)/1e9, maxPauseNS/1e9)
	}
	if err := checkMS("gemm_ms", r.GEMMMS); err != nil {
		return err
	}
	inGEMM := plan != nil && plan.GEMM != nil && slices.Contains(plan.GEMM.Ranks, r.Rank)
	if len(r.GEMMMS) > 0 && plan != nil && !inGEMM {
		return signal.FieldErrorf("gemm_ms", "rank %d is not in the plan's GEMM list", r.Rank)
	}
	if len(r.P2P) > maxResultP2P {
		return signal.FieldErrorf("p2p", "has %d entries, at most %d", len(r.P2P), maxResultP2P)
	}
	for i, p := range r.P2P {
		f := "p2p[" + strconv.Itoa(i) + "]"
		if err := validateP2P(&p, f, r.Rank, plan); err != nil {
			return err
		}
	}
	// A GEMM-listed rank that neither missed the plan nor reports an
	// error must report its times: the first result of a rank is final.
	if inGEMM && len(r.GEMMMS) == 0 && !r.Missed && r.Error == "" {
		return signal.FieldErrorf("gemm_ms", "is required from rank %d (in the plan's GEMM list) unless missed or error is set", r.Rank)
	}
	return nil
}

func validateP2P(p *P2PResult, f string, rank int, plan *ValidationPlan) error {
	if p.Src == p.Dst {
		return signal.FieldErrorf(f+".dst", "equals src %d", p.Src)
	}
	if p.Src != rank && p.Dst != rank {
		return signal.FieldErrorf(f, "rank %d is neither src %d nor dst %d: a rank reports only its own sends and receives", rank, p.Src, p.Dst)
	}
	if p.Bytes <= 0 {
		return signal.FieldErrorf(f+".bytes", "must be > 0, got %d", p.Bytes)
	}
	if err := checkMS(f+".ms", p.MS); err != nil {
		return err
	}
	if len(p.MS) == 0 {
		return signal.FieldErrorf(f+".ms", "is empty")
	}
	if plan == nil {
		return nil
	}
	if plan.P2P == nil {
		return signal.FieldErrorf(f, "the plan has no P2P test")
	}
	if p.Pass < 0 || p.Pass >= len(plan.P2P.Passes) {
		return signal.FieldErrorf(f+".pass", "must be in [0, %d), got %d", len(plan.P2P.Passes), p.Pass)
	}
	if !slices.Contains(plan.P2P.Passes[p.Pass], Link{Src: p.Src, Dst: p.Dst}) {
		return signal.FieldErrorf(f, "pass %d has no link %d→%d", p.Pass, p.Src, p.Dst)
	}
	if !slices.Contains(plan.P2P.SizesBytes, p.Bytes) {
		return signal.FieldErrorf(f+".bytes", "%d is not one of the plan's sizes %v", p.Bytes, plan.P2P.SizesBytes)
	}
	return nil
}

func checkMS(f string, ms []float64) error {
	if len(ms) > maxResultReps {
		return signal.FieldErrorf(f, "has %d repetitions, at most %d", len(ms), maxResultReps)
	}
	for i, v := range ms {
		if math.IsNaN(v) || v <= 0 || v > maxResultMS {
			return signal.FieldErrorf(fmt.Sprintf("%s[%d]", f, i), "must be a time in (0, %g] ms, got %v", maxResultMS, v)
		}
	}
	return nil
}

// ParseValidationID reads a plan id "v-<seq>".
func ParseValidationID(id string) (uint32, error) {
	s, ok := strings.CutPrefix(id, "v-")
	n, err := strconv.ParseUint(s, 10, 32)
	if !ok || err != nil || n == 0 || strconv.FormatUint(n, 10) != s {
		return 0, signal.FieldErrorf("vid", "must be a plan id v-<n>, got %q", signal.Clip(id))
	}
	return uint32(n), nil
}

// ValidationID is the plan id of seq.
func ValidationID(seq uint32) string { return "v-" + strconv.FormatUint(uint64(seq), 10) }
