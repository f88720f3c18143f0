package laggardv1

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// MaxBatchVectors bounds one ingest batch. A tiny encoded vector ("{}")
// decodes to ~100 bytes, so without a count cap the byte limit alone would
// let a 64 MiB body allocate gigabytes.
const MaxBatchVectors = 1 << 16

// DecodeJSONBatch decodes {"vectors":[StageVector...]} from r, reading at
// most limit bytes (DefaultLimit if limit <= 0), and validates every vector
// against job. The body is streamed one vector at a time so an error names
// the vector's index: vectors[3].durations_ms.
func DecodeJSONBatch(r io.Reader, job *signal.Job, limit int64) ([]stagevec.Vector, error) {
	dec := json.NewDecoder(newLimitReader(r, limit))
	dec.DisallowUnknownFields()
	if err := expectDelim(dec, '{', ""); err != nil {
		return nil, err
	}
	var out []stagevec.Vector
	seen := false
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		if key != "vectors" {
			return nil, prefix("", &signal.FieldError{Field: key, Msg: "unknown field"})
		}
		if seen {
			return nil, &signal.FieldError{Field: key, Msg: "appears twice"}
		}
		seen = true
		if out, err = decodeVectors(dec, job); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}', ""); err != nil {
		return nil, err
	}
	if err := expectEOF(dec); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeVectors(dec *json.Decoder, job *signal.Job) ([]stagevec.Vector, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr("vectors", err)
	}
	if tok == nil { // "vectors": null is an empty batch
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, &signal.FieldError{Field: "vectors", Msg: fmt.Sprintf("must be an array, got %v", tokenKind(tok))}
	}
	out := make([]stagevec.Vector, 0, 64)
	var jv jsonVector
	for i := 0; dec.More(); i++ {
		path := "vectors[" + strconv.Itoa(i) + "]"
		if i == MaxBatchVectors {
			return nil, fmt.Errorf("%w: more than %d vectors in one batch", ErrTooLarge, MaxBatchVectors)
		}
		jv = jsonVector{}
		if err := dec.Decode(&jv); err != nil {
			return nil, jsonErr(path, err)
		}
		if err := jv.resolveNames(job); err != nil {
			return nil, prefix(path, err)
		}
		out = append(out, jv.Vector)
		if err := out[i].Validate(job); err != nil {
			return nil, prefix(path, err)
		}
	}
	if err := expectDelim(dec, ']', "vectors"); err != nil {
		return nil, err
	}
	return out, nil
}

// DecodeJob decodes a job registration. The body's "id" may be omitted, in
// which case id (from the URL) is used; a different id is an error. An
// omitted schema means stagevec.DefaultSchema, as in stage-matrix files.
func DecodeJob(r io.Reader, id string, limit int64) (*signal.Job, error) {
	var j signal.Job
	if err := decodeStrict(r, limit, &j); err != nil {
		return nil, err
	}
	switch {
	case j.ID == "":
		j.ID = id
	case id != "" && j.ID != id:
		return nil, &signal.FieldError{Field: "id", Msg: fmt.Sprintf("%q does not match the URL's job id %q", j.ID, id)}
	}
	if j.Schema.Version == "" && len(j.Schema.Stages) == 0 && len(j.Schema.Probes) == 0 {
		j.Schema = stagevec.DefaultSchema()
	}
	if err := validateJob(&j); err != nil {
		return nil, err
	}
	return &j, nil
}

// validateJob is Job.Validate with rank errors rewritten to full paths
// (Validate wraps them as "ranks[i]: rank: ...").
func validateJob(j *signal.Job) error {
	for i := range j.Ranks {
		if err := j.Ranks[i].Validate(j.WorldSize); err != nil {
			return prefix("ranks["+strconv.Itoa(i)+"]", err)
		}
	}
	return prefix("", j.Validate())
}

// DecodeRank decodes a rank join and validates it against job's world
// size. An omitted role, or omitted role fields, mean unknown (-1).
func DecodeRank(r io.Reader, job *signal.Job, limit int64) (*signal.Rank, error) {
	rk := signal.Rank{Role: signal.UnknownRole}
	if err := decodeStrict(r, limit, &rk); err != nil {
		return nil, err
	}
	if err := rk.Validate(job.WorldSize); err != nil {
		return nil, prefix("", err)
	}
	if len(rk.Role.Name) > 128 {
		return nil, &signal.FieldError{Field: "role.name", Msg: "longer than 128 bytes"}
	}
	return &rk, nil
}

// decodeStrict decodes exactly one JSON object into v.
func decodeStrict(r io.Reader, limit int64, v any) error {
	dec := json.NewDecoder(newLimitReader(r, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErr("", err)
	}
	return expectEOF(dec)
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", jsonErr("", err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", prefix("", &signal.FieldError{Msg: fmt.Sprintf("expected an object key, got %v", tokenKind(tok))})
	}
	return key, nil
}

func expectDelim(dec *json.Decoder, want json.Delim, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return jsonErr(path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return prefix(path, &signal.FieldError{Msg: fmt.Sprintf("expected %q, got %v", want, tokenKind(tok))})
	}
	return nil
}

func expectEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return jsonErr("", err)
		}
		return prefix("", &signal.FieldError{Msg: "trailing data after the JSON object"})
	}
	return nil
}

func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return strconv.Quote(t.String())
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// jsonErr turns an encoding/json error into a FieldError under path.
func jsonErr(path string, err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.Is(err, ErrTooLarge):
		return err
	case errors.As(err, &te):
		// The embedded Vector of jsonVector shows up in the Go path.
		field := strings.TrimPrefix(te.Field, "Vector.")
		return prefix(path, &signal.FieldError{Field: field, Msg: fmt.Sprintf("cannot use JSON %s as %s", te.Value, te.Type)})
	case errors.As(err, &se):
		return prefix(path, &signal.FieldError{Msg: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)})
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return prefix(path, &signal.FieldError{Msg: "truncated JSON"})
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, `json: unknown field "`); ok {
		return prefix(path, &signal.FieldError{Field: strings.TrimSuffix(name, `"`), Msg: "unknown field"})
	}
	return prefix(path, &signal.FieldError{Msg: strings.TrimPrefix(msg, "json: ")})
}

// jsonVector is a stage vector as JSON carries it: durations in schema
// order (durations_ms), or by stage name (stages_ms, which also accepts
// the default stages' short aliases such as "data").
type jsonVector struct {
	stagevec.Vector
	StagesMS map[string]float64 `json:"stages_ms,omitempty"`
}

// resolveNames turns stages_ms into durations in the rank's schema order.
// An unknown name is refused, naming it and the schema's stages, so a
// typo or a legend name can never be dropped silently.
func (v *jsonVector) resolveNames(job *signal.Job) error {
	if v.StagesMS == nil {
		return nil
	}
	if v.Durations != nil {
		return signal.FieldErrorf("stages_ms", "send either durations_ms or stages_ms, not both")
	}
	if v.Rank < 0 || v.Rank >= job.WorldSize {
		return signal.FieldErrorf("rank", "must be in [0, %d), got %d", job.WorldSize, v.Rank)
	}
	schema := job.SchemaFor(v.Rank)
	n := len(schema.Stages)
	d := make([]float64, n)
	residual := false
	for name, ms := range v.StagesMS {
		st, ok := stagevec.Resolve(schema, name)
		if !ok {
			return signal.FieldErrorf("stages_ms", "unknown stage %q; rank %d's schema has %s", signal.Clip(name), v.Rank, strings.Join(schema.Stages, ", "))
		}
		i := schema.Index(st)
		d[i] = ms
		residual = residual || i == n-1
	}
	if !residual { // derived from wall_ms, as with durations_ms
		d = d[:n-1]
	}
	v.Durations, v.StagesMS = d, nil
	return nil
}
