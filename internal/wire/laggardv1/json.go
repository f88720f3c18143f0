package laggardv1

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// JSON bodies are decoded with github.com/go-json-experiment/json (the
// Go team's prototype of encoding/json/v2) rather than encoding/json:
//   - its decoder is linear in the input, while encoding/json's
//     Decoder rescans pending whitespace on every refill, which made a
//     slowly sent body of whitespace cost quadratic CPU (D6: 13 s for
//     8 MB);
//   - it rejects duplicate object names (D13: encoding/json lets the
//     last one win silently) and reports where, as a JSON Pointer.
//
// Bodies are read whole (bounded by the caller's limit, as protobuf
// bodies always were) and then decoded from memory, so the cost does not
// depend on how the client chunks its upload.

// MaxBatchVectors bounds one ingest batch. A tiny encoded vector ("{}")
// decodes to ~100 bytes, so without a count cap the byte limit alone would
// let a 64 MiB body allocate gigabytes.
const MaxBatchVectors = 1 << 16

// jsonOpts are the strict decoding options: unknown members are errors;
// duplicate names and invalid UTF-8 are rejected by jsontext's defaults.
var jsonOpts = json.JoinOptions(
	json.RejectUnknownMembers(true),
	// null leaves a role as it was (unknown), as an omitted role does,
	// rather than zeroing it to dp/tp/pp/ep 0.
	json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, r *signal.Role) error {
		if dec.PeekKind() == 'n' {
			_, err := dec.ReadToken()
			return err
		}
		return json.SkipFunc
	})),
)

// bodyBufs recycles body buffers: decoded values never alias the body
// (strings and slices are copied out), so a buffer is free again once
// its body is decoded. Buffers grown past maxPooledBuf are dropped rather
// than kept alive by the pool.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuf = 1 << 20

// ReadBody reads all of r, failing with ErrTooLarge past limit bytes
// (DefaultLimit if limit <= 0), and calls fn with the body. The buffer
// grows geometrically, so the cost is linear however small the reads
// are; b is valid only during fn.
func ReadBody(r io.Reader, limit int64, fn func(b []byte) error) error {
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBuf {
			buf.Reset()
			bodyBufs.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(newLimitReader(r, limit)); err != nil {
		if errors.Is(err, ErrTooLarge) {
			return err
		}
		return &signal.FieldError{Field: "body", Msg: "reading: " + clipMsg(err.Error())}
	}
	return fn(buf.Bytes())
}

// DecodeJSONBatch decodes {"vectors":[StageVector...]} from r, reading at
// most limit bytes (DefaultLimit if limit <= 0), and validates every vector
// against job. Errors name the vector's index: vectors[3].durations_ms.
func DecodeJSONBatch(r io.Reader, job *signal.Job, limit int64) ([]stagevec.Vector, error) {
	return decodeBatch(r, job, limit, UnmarshalJSONBatch)
}

// decodeBatch reads a whole body (ReadBody) and unmarshals it as a batch.
func decodeBatch(r io.Reader, job *signal.Job, limit int64, unmarshal func([]byte, *signal.Job) ([]stagevec.Vector, error)) ([]stagevec.Vector, error) {
	var vs []stagevec.Vector
	err := ReadBody(r, limit, func(b []byte) (err error) {
		vs, err = unmarshal(b, job)
		return err
	})
	return vs, err
}

// UnmarshalJSONBatch is DecodeJSONBatch over an in-memory body. It does
// not modify b. A batch naming an incarnation is read against job as
// well; the API reads it with UnmarshalJSONBatchAt.
func UnmarshalJSONBatch(b []byte, job *signal.Job) ([]stagevec.Vector, error) {
	bt, err := UnmarshalJSONBatchAt(b, func(int) (*signal.Job, error) { return job, nil })
	return bt.Vectors, err
}

// Batch is a decoded vector batch.
type Batch struct {
	// Incarnation is the job incarnation the client named
	// (docs/design/roles-and-runs.md), -1 when it named none: the job's
	// newest.
	Incarnation int
	Vectors     []stagevec.Vector
}

// JobAt returns the job as incarnation inc saw it (inc < 0: the newest) to
// validate vectors against, or an error (naming the field "incarnation")
// when inc cannot take vectors.
type JobAt func(inc int) (*signal.Job, error)

// UnmarshalJSONBatchAt decodes {"incarnation": N, "vectors": [...]} and
// validates every vector against the job as incarnation N saw it. The
// members may come in either order: a body naming an incarnation anywhere
// but first is scanned for it before the vectors are decoded (clients put
// it first, so that costs nothing).
func UnmarshalJSONBatchAt(b []byte, at JobAt) (Batch, error) {
	inc := -1
	// Not first: scan for it (a body without the name costs one memchr-fast search).
	if i := bytes.Index(b, incarnationName); i >= 0 && len(bytes.TrimLeft(b[:i], " \t\r\n{")) > 0 {
		n, err := findIncarnation(b)
		if err != nil {
			return Batch{Incarnation: -1}, err
		}
		inc = n
	}
	bt, redo, err := unmarshalJSONBatch(b, at, inc)
	if redo { // named with escapes the scan above does not see
		bt, _, err = unmarshalJSONBatch(b, at, bt.Incarnation)
	}
	if err != nil {
		bt.Vectors = nil // nothing of a refused batch is stored
	}
	return bt, err
}

var incarnationName = []byte(`"incarnation"`)

// findIncarnation returns the top-level "incarnation" of a batch body (-1
// when absent) without decoding the vectors.
func findIncarnation(b []byte) (int, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	if err := expectDelim(dec, '{'); err != nil {
		return -1, err
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return -1, jsonErr(err)
		}
		if tok.String() == "incarnation" {
			return decodeIncarnation(dec)
		}
		if err := dec.SkipValue(); err != nil {
			return -1, jsonErr(err)
		}
	}
	return -1, nil // the full decode reports what is wrong with the body
}

// unmarshalJSONBatch is one pass of UnmarshalJSONBatchAt with the
// incarnation inc (-1: not known yet). redo is true when the vectors were
// validated against another layout than the incarnation the body names.
func unmarshalJSONBatch(b []byte, at JobAt, inc int) (bt Batch, redo bool, err error) {
	bt.Incarnation = inc
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	if err := expectDelim(dec, '{'); err != nil {
		return bt, false, err
	}
	var used *signal.Job // the job the vectors were validated against
	for {
		k := dec.PeekKind()
		if k == '}' {
			break
		}
		if k != '"' { // a syntax error (or EOF) the read reports
			_, err := dec.ReadToken()
			return bt, false, jsonErr(err)
		}
		tok, err := dec.ReadToken() // a second "vectors" fails here: duplicate name
		if err != nil {
			return bt, false, jsonErr(err)
		}
		switch tok.String() {
		case "vectors":
			if used, err = at(bt.Incarnation); err != nil {
				return bt, false, err
			}
			if bt.Vectors, err = decodeVectors(dec, used); err != nil {
				return bt, false, err
			}
		case "incarnation":
			n, err := decodeIncarnation(dec)
			if err != nil {
				return bt, false, err
			}
			if inc >= 0 {
				continue // the second pass knows it already
			}
			bt.Incarnation = n
			if used != nil {
				j, err := at(n)
				if err != nil {
					return bt, false, err
				}
				redo = j != used
			}
		default:
			return bt, false, &signal.FieldError{Field: pathOf(dec.StackPointer()), Msg: "unknown field"}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bt, false, err
	}
	if err := expectEOF(dec); err != nil {
		return bt, false, err
	}
	if redo {
		return bt, true, nil
	}
	if used == nil && bt.Incarnation >= 0 {
		// No vectors, but the incarnation must still be one the job has.
		if _, err := at(bt.Incarnation); err != nil {
			return bt, false, err
		}
	}
	return bt, false, nil
}

// decodeIncarnation reads a batch's "incarnation": an integer in
// [0, signal.MaxIncarnation], or null for none (-1).
func decodeIncarnation(dec *jsontext.Decoder) (int, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return 0, jsonErr(err)
	}
	switch tok.Kind() {
	case 'n':
		return -1, nil
	case '0':
		if f := tok.Float(); f == float64(int64(f)) && f >= 0 && f <= signal.MaxIncarnation {
			return int(f), nil
		}
	}
	return 0, &signal.FieldError{Field: "incarnation", Msg: fmt.Sprintf("must be an integer in [0, %d], got %s", signal.MaxIncarnation, clipMsg(tok.String()))}
}

func decodeVectors(dec *jsontext.Decoder, job *signal.Job) ([]stagevec.Vector, error) {
	out := make([]stagevec.Vector, 0, 64)
	err := walkArray(dec, "vectors", MaxBatchVectors, func(i int, path string) error {
		var jv jsonVector
		if err := json.UnmarshalDecode(dec, &jv, jsonOpts); err != nil {
			return jsonErr(err)
		}
		if err := jv.resolveNames(job); err != nil {
			return prefix(path, err)
		}
		out = append(out, jv.Vector)
		if err := out[i].Validate(job); err != nil {
			return prefix(path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// walkArray walks the JSON array of objects at dec's position, calling
// each with dec at the i-th object (path names it: "field[i]"), so a cap
// of limit elements holds before more are decoded. null is an empty
// array ("vectors": null is an empty batch); a non-array or non-object
// element is a FieldError naming it.
func walkArray(dec *jsontext.Decoder, field string, limit int, each func(i int, path string) error) error {
	switch k := dec.PeekKind(); k {
	case 'n':
		_, err := dec.ReadToken()
		return jsonErr(err)
	case '[':
	case 0:
		_, err := dec.ReadToken()
		return jsonErr(err)
	default:
		return &signal.FieldError{Field: field, Msg: "must be an array, got " + kindName(k)}
	}
	if _, err := dec.ReadToken(); err != nil {
		return jsonErr(err)
	}
	for i := 0; ; i++ {
		k := dec.PeekKind()
		if k == ']' {
			break
		}
		if k == 0 {
			_, err := dec.ReadToken()
			return jsonErr(err)
		}
		if i == limit {
			return fmt.Errorf("%w: more than %d %s in one batch", ErrTooLarge, limit, field)
		}
		path := field + "[" + strconv.Itoa(i) + "]"
		if k != '{' {
			return &signal.FieldError{Field: path, Msg: "must be an object, got " + kindName(k)}
		}
		if err := each(i, path); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return jsonErr(err)
}

// jobRegistration is a job registration's body: the job and, beside it,
// the registering process (incarnations; docs/design/roles-and-runs.md).
type jobRegistration struct {
	signal.Job
	signal.Process
}

// rankJoin is a rank join's body: the rank and the joining process.
type rankJoin struct {
	signal.Rank
	signal.Process
}

// DecodeJob decodes a job registration and the process that sent it. The
// body's "id" may be omitted, in which case id (from the URL) is used; a
// different id is an error. An omitted schema means
// stagevec.DefaultSchema, as in stage-matrix files. Incarnations are the
// server's to describe: a body naming them is refused.
func DecodeJob(r io.Reader, id string, limit int64) (*signal.Job, signal.Process, error) {
	var reg jobRegistration
	if err := decodeStrict(r, limit, &reg); err != nil {
		return nil, signal.Process{}, err
	}
	j := &reg.Job
	switch {
	case j.ID == "":
		j.ID = id
	case id != "" && j.ID != id:
		return nil, signal.Process{}, &signal.FieldError{Field: "id", Msg: fmt.Sprintf("%q does not match the URL's job id %q", signal.Clip(j.ID), signal.Clip(id))}
	}
	if j.Incarnations != nil {
		return nil, signal.Process{}, &signal.FieldError{Field: "incarnations", Msg: "are kept by the server; send launch, process and started_ns instead"}
	}
	if j.Schema.Version == "" && len(j.Schema.Stages) == 0 && len(j.Schema.Probes) == 0 {
		j.Schema = stagevec.DefaultSchema()
	}
	if err := validateJob(j); err != nil {
		return nil, signal.Process{}, err
	}
	if err := reg.Process.Validate(); err != nil {
		return nil, signal.Process{}, err
	}
	return j, reg.Process, nil
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

// DecodeRank decodes a rank join and the process that sent it, and
// validates it against job's world size. An omitted role, or omitted role
// fields, mean unknown (-1).
func DecodeRank(r io.Reader, job *signal.Job, limit int64) (*signal.Rank, signal.Process, error) {
	jn := rankJoin{Rank: signal.Rank{Role: signal.UnknownRole}}
	if err := decodeStrict(r, limit, &jn); err != nil {
		return nil, signal.Process{}, err
	}
	rk := &jn.Rank
	if err := rk.Validate(job.WorldSize); err != nil {
		return nil, signal.Process{}, prefix("", err)
	}
	if len(rk.Role.Name) > 128 {
		return nil, signal.Process{}, &signal.FieldError{Field: "role.name", Msg: "longer than 128 bytes"}
	}
	if err := jn.Process.Validate(); err != nil {
		return nil, signal.Process{}, err
	}
	return rk, jn.Process, nil
}

// decodeStrict decodes exactly one JSON object into v.
func decodeStrict(r io.Reader, limit int64, v any) error {
	return ReadBody(r, limit, func(b []byte) error { return UnmarshalStrict(b, v) })
}

// UnmarshalStrict decodes b, exactly one JSON object, into v with the
// API's rules: unknown fields, duplicate keys, invalid UTF-8 and trailing
// data are errors, and every error is a *signal.FieldError naming the
// path (schema.stages[2]) and quoting none of the input beyond a short
// prefix. Stage-matrix files are read with it too.
func UnmarshalStrict(b []byte, v any) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	if k := dec.PeekKind(); k != '{' {
		if k == 0 {
			_, err := dec.ReadToken()
			return jsonErr(err)
		}
		return &signal.FieldError{Field: "body", Msg: "must be a JSON object, got " + kindName(k)}
	}
	if err := json.UnmarshalDecode(dec, v, jsonOpts); err != nil {
		return jsonErr(err)
	}
	return expectEOF(dec)
}

func expectDelim(dec *jsontext.Decoder, want jsontext.Kind) error {
	k := dec.PeekKind()
	if k == 0 {
		_, err := dec.ReadToken()
		return jsonErr(err)
	}
	if k != want {
		return &signal.FieldError{Field: pathOf(dec.StackPointer()), Msg: fmt.Sprintf("expected %q, got %s", want.String(), kindName(k))}
	}
	_, err := dec.ReadToken()
	return jsonErr(err)
}

func expectEOF(dec *jsontext.Decoder) error {
	_, err := dec.ReadToken()
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return jsonErr(err)
	}
	return &signal.FieldError{Field: "body", Msg: "trailing data after the JSON object"}
}

// kindName is a token kind with its article, as in "got a string".
func kindName(k jsontext.Kind) string {
	switch w := kindWord(k); w {
	case "null":
		return w
	case "object", "array":
		return "an " + w
	default:
		return "a " + w
	}
}

func kindWord(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{', '}':
		return "object"
	case '[', ']':
		return "array"
	}
	return strconv.Quote(k.String())
}

// jsonErr turns a decoding error into a FieldError on the path where it
// happened. Messages are built from the errors' fields, never from the
// input, so a huge bad value is not echoed back (D13).
func jsonErr(err error) error {
	var se *json.SemanticError
	var xe *jsontext.SyntacticError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTooLarge):
		return err
	case errors.As(err, &xe):
		switch {
		case xe.Err == jsontext.ErrDuplicateName:
			return &signal.FieldError{Field: pathOf(xe.JSONPointer), Msg: "duplicate key"}
		case errors.Is(xe.Err, io.ErrUnexpectedEOF):
			return &signal.FieldError{Field: pathOf(xe.JSONPointer), Msg: "truncated JSON"}
		}
		msg := "invalid JSON"
		if xe.Err != nil {
			msg = "invalid JSON: " + clipMsg(strings.TrimPrefix(xe.Err.Error(), "jsontext: "))
		}
		return &signal.FieldError{Field: pathOf(xe.JSONPointer), Msg: fmt.Sprintf("%s (at byte %d)", msg, xe.ByteOffset)}
	case errors.As(err, &se):
		if se.Err == json.ErrUnknownName {
			return &signal.FieldError{Field: pathOf(se.JSONPointer), Msg: "unknown field"}
		}
		if inner := new(jsontext.SyntacticError); errors.As(se.Err, &inner) {
			return jsonErr(inner)
		}
		msg := "cannot use a JSON value"
		if se.JSONKind != 0 {
			msg = "cannot use JSON " + kindWord(se.JSONKind)
		}
		if se.GoType != nil {
			msg += " as " + se.GoType.String()
		}
		if se.Err != nil {
			msg += ": " + clipMsg(strings.TrimPrefix(se.Err.Error(), "json: "))
		}
		return &signal.FieldError{Field: pathOf(se.JSONPointer), Msg: msg}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &signal.FieldError{Field: "body", Msg: "truncated JSON"}
	}
	return &signal.FieldError{Field: "body", Msg: clipMsg(err.Error())}
}

// clipMsg bounds a library error message quoted in a response; such
// messages may embed bits of the input.
func clipMsg(s string) string {
	const n = 160
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "…"
}

// arrayFields are the members whose values are arrays: a numeric pointer
// token below one is an index ("vectors[3]"), anywhere else a map key
// (stages_ms, probes, labels).
var arrayFields = map[string]bool{"vectors": true, "durations_ms": true, "ranks": true, "stages": true, "groups": true,
	"calls": true, "comms": true,
	"samples": true, "frames": true, "mappings": true, "points": true, "absent": true}

// pathOf turns a JSON Pointer (/vectors/3/stages_ms/forward) into the
// field path errors use (vectors[3].stages_ms.forward), each name
// clipped (a member name may be megabytes long).
func pathOf(p jsontext.Pointer) string {
	var sb strings.Builder
	prev, prevprev := "", ""
	for tok := range p.Tokens() {
		// schema.probes is a list of names; a vector's probes is a map.
		isArray := arrayFields[prev] || (prev == "probes" && prevprev == "schema")
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && isArray {
			sb.WriteString("[" + tok + "]")
		} else {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(fieldName(tok))
		}
		prevprev, prev = prev, tok
		if sb.Len() > 512 { // deeply nested junk: enough to find it
			sb.WriteString("…")
			break
		}
	}
	if sb.Len() == 0 {
		return "body"
	}
	return sb.String()
}

// fieldName is a member name as an error shows it: clipped, and quoted
// if it is empty or holds anything but printable ASCII.
func fieldName(s string) string {
	s = signal.Clip(s)
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
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
	by := make([]string, n) // the name each duration came from
	residual := false
	for name, ms := range v.StagesMS {
		st, ok := stagevec.Resolve(schema, name)
		if !ok {
			return signal.FieldErrorf("stages_ms", "unknown stage %q; rank %d's schema has %s", signal.Clip(name), v.Rank, strings.Join(schema.Stages, ", "))
		}
		i := schema.Index(st)
		if by[i] != "" { // a stage and its short alias: which one wins?
			a, b := min(by[i], name), max(by[i], name)
			return signal.FieldErrorf("stages_ms."+b, "duplicate key: %q and %q both name stage %s", a, b, st)
		}
		by[i] = name
		d[i] = ms
		residual = residual || i == n-1
	}
	if !residual { // derived from wall_ms, as with durations_ms
		d = d[:n-1]
	}
	v.Durations, v.StagesMS = d, nil
	return nil
}
