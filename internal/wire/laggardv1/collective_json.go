package laggardv1

import (
	"bytes"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Record caps of one collective batch, checked while decoding: a tiny
// encoded call ("{}") decodes to ~170 bytes, so without a count the byte
// limit alone would let a 64 MiB body allocate gigabytes (as
// MaxBatchVectors). 131,072 calls is ~30 s of a busy rank's NCCL calls;
// the agent ships far smaller batches.
const (
	MaxBatchCalls = 1 << 17
	MaxBatchComms = 1 << 14
)

// UnmarshalJSONCollectives decodes a collective.Batch
// ({"incarnation":N,"comms":[…],"calls":[…],"dropped":k}) with the API's
// strict rules (unknown fields, duplicate keys, trailing data are errors)
// and validates it against the job's world size (0: not known). Errors
// name the record: calls[3].enter_ns. b is not modified.
func UnmarshalJSONCollectives(b []byte, world int) (*collective.Batch, error) {
	return UnmarshalJSONCollectivesAt(b, fixedWorld(world))
}

// WorldAt returns the world size of the job as incarnation inc saw it
// (inc < 0: the newest; 0 when not known), or an error naming the field
// "incarnation" when the job has no such incarnation.
type WorldAt func(inc int) (int, error)

func fixedWorld(world int) WorldAt { return func(int) (int, error) { return world, nil } }

// UnmarshalJSONCollectivesAt is UnmarshalJSONCollectives validating the
// batch against the incarnation it names (anywhere in the object: the
// records are validated once the whole body is read).
func UnmarshalJSONCollectivesAt(b []byte, at WorldAt) (*collective.Batch, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var out collective.Batch
	for {
		k := dec.PeekKind()
		if k == '}' {
			break
		}
		if k != '"' {
			_, err := dec.ReadToken()
			return nil, jsonErr(err)
		}
		tok, err := dec.ReadToken() // a repeated name fails here
		if err != nil {
			return nil, jsonErr(err)
		}
		switch tok.String() {
		case "calls":
			// An absent peer, root or step means -1 (not applicable,
			// unknown), as in protobuf, never rank or step 0.
			out.Calls, err = decodeArray(dec, "calls", MaxBatchCalls, func(c *collective.Call) { c.Peer, c.Root, c.Step = -1, -1, -1 })
		case "comms":
			out.Comms, err = decodeArray[collective.Comm](dec, "comms", MaxBatchComms, nil)
		case "dropped":
			err = jsonErr(json.UnmarshalDecode(dec, &out.Dropped, jsonOpts))
		case "incarnation":
			var n int
			if n, err = decodeIncarnation(dec); err == nil && n >= 0 {
				out.Incarnation = &n
			}
		default:
			err = &signal.FieldError{Field: pathOf(dec.StackPointer()), Msg: "unknown field"}
		}
		if err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if err := expectEOF(dec); err != nil {
		return nil, err
	}
	return validateAt(&out, at)
}

// validateAt validates b against the world of the incarnation it names.
func validateAt(b *collective.Batch, at WorldAt) (*collective.Batch, error) {
	inc := -1
	if b.Incarnation != nil {
		inc = *b.Incarnation
	}
	world, err := at(inc)
	if err != nil {
		return nil, err
	}
	if err := b.Validate(world); err != nil {
		return nil, prefix("", err)
	}
	return b, nil
}

// decodeArray decodes the JSON array of objects at dec's position one
// element at a time, so its cap holds before the elements are allocated.
// null is an empty array. init, if set, presets each element's defaults.
func decodeArray[T any](dec *jsontext.Decoder, field string, limit int, init func(*T)) ([]T, error) {
	out := make([]T, 0, 64)
	err := walkArray(dec, field, limit, func(i int, _ string) error {
		out = append(out, *new(T))
		if init != nil {
			init(&out[i])
		}
		return jsonErr(json.UnmarshalDecode(dec, &out[i], jsonOpts))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MarshalJSONCollectives encodes b as UnmarshalJSONCollectives reads it,
// for clients and tests.
func MarshalJSONCollectives(b *collective.Batch) ([]byte, error) {
	return json.Marshal(b)
}
