package laggardv1

import (
	"bytes"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// MaxBatchFrames bounds the frames of one stack batch summed over its
// samples, checked while decoding: a frame is ~60 bytes decoded from as
// little as 6 bytes of protobuf, so the body limit alone would let one
// request allocate gigabytes. 2^21 frames are 16,384 distinct stacks (the
// agent's in-kernel map, §4) of 128 frames each.
const MaxBatchFrames = 1 << 21

// UnmarshalJSONStacks decodes a stack.Batch (the json tags of
// internal/signal/stack) with the API's strict rules (unknown fields,
// duplicate keys, trailing data are errors), caps the samples, frames and
// mappings before allocating them, and validates the batch. Errors name
// the record: samples[3].frames[0].kind. An omitted frame "mapping" means
// -1 (none), never mapping 0. b is not modified.
func UnmarshalJSONStacks(b []byte) (*stack.Batch, error) {
	out, _, err := unmarshalJSONStacks(b, nil)
	return out, err
}

// UnmarshalJSONStacksPartial is UnmarshalJSONStacks keeping every valid
// sample: one that fails validation (or uses a refused mapping) is left
// out and named in the refusals. A body that is not well-formed JSON
// (invalid UTF-8 included: RFC 8259 §8.1) or breaks the batch's own
// fields and caps is still refused whole.
func UnmarshalJSONStacksPartial(b []byte, rules Rules) (*stack.Batch, []Refusal, error) {
	return unmarshalJSONStacks(b, &rules)
}

func unmarshalJSONStacks(b []byte, rules *Rules) (*stack.Batch, []Refusal, error) {
	partial := rules != nil
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	var out stack.Batch
	frames := 0
	err := walkObject(dec, func(name string) error {
		switch name {
		case "samples":
			out.Samples = make([]stack.Sample, 0, 64)
			return walkArray(dec, "samples", stack.MaxSamples, func(i int, path string) error {
				out.Samples = append(out.Samples, stack.Sample{})
				return decodeStackSample(dec, path, &out.Samples[i], &frames)
			})
		case "mappings":
			var err error
			out.Mappings, err = decodeArray[stack.Mapping](dec, "mappings", stack.MaxMappings, nil)
			return err
		case "node":
			return scalar(dec, &out.Node)
		case "start_ns":
			return scalar(dec, &out.StartNS)
		case "end_ns":
			return scalar(dec, &out.EndNS)
		case "hz":
			return scalar(dec, &out.Hz)
		case "ratio":
			return scalar(dec, &out.Ratio)
		case "dropped":
			return scalar(dec, &out.Dropped)
		case "unwind":
			return scalar(dec, &out.Unwind)
		}
		return unknownMember(dec)
	})
	if err != nil {
		return nil, nil, err
	}
	if err := expectEOF(dec); err != nil {
		return nil, nil, err
	}
	if partial {
		sv := sifter{rules: *rules}
		if err := sv.siftStacks(&out); err != nil {
			return nil, nil, err
		}
		return &out, sv.refused, nil
	}
	if err := checkFrameMappings(&out); err != nil {
		return nil, nil, err
	}
	if err := out.Validate(); err != nil {
		return nil, nil, prefix("", err)
	}
	return &out, nil, nil
}

// checkFrameMappings refuses a frame mapping outside [-1, len(mappings))
// whatever the frame's kind (Validate lets a named native frame point
// anywhere), so JSON accepts exactly what protobuf can carry.
func checkFrameMappings(b *stack.Batch) error {
	for i := range b.Samples {
		for j, f := range b.Samples[i].Frames {
			if f.Mapping < -1 || int(f.Mapping) >= len(b.Mappings) {
				return signal.FieldErrorf(fmt.Sprintf("samples[%d].frames[%d].mapping", i, j), "%d does not index the batch's %d mappings", f.Mapping, len(b.Mappings))
			}
		}
	}
	return nil
}

// decodeStackSample decodes one sample object, walking its frames so the
// per-sample (stack.MaxFrames) and per-batch (MaxBatchFrames) caps hold
// before the frames are allocated.
func decodeStackSample(dec *jsontext.Decoder, path string, s *stack.Sample, frames *int) error {
	return walkObject(dec, func(name string) error {
		switch name {
		case "frames":
			s.Frames = nil
			return walkArray(dec, path+".frames", stack.MaxFrames, func(i int, _ string) error {
				if *frames >= MaxBatchFrames {
					return fmt.Errorf("%w: more than %d frames in one batch", ErrTooLarge, MaxBatchFrames)
				}
				*frames++
				s.Frames = append(s.Frames, stack.Frame{Mapping: -1})
				return scalar(dec, &s.Frames[i])
			})
		case "rank":
			return scalar(dec, &s.Rank)
		case "pid":
			return scalar(dec, &s.PID)
		case "tid":
			return scalar(dec, &s.TID)
		case "comm":
			return scalar(dec, &s.Comm)
		case "thread":
			return scalar(dec, &s.Thread)
		case "foreign":
			return scalar(dec, &s.Foreign)
		case "count":
			return scalar(dec, &s.Count)
		case "truncated":
			return scalar(dec, &s.Truncated)
		}
		return unknownMember(dec)
	})
}

// MarshalJSONStacks encodes b as UnmarshalJSONStacks reads it.
func MarshalJSONStacks(b *stack.Batch) ([]byte, error) { return json.Marshal(b) }

// walkObject walks the JSON object at dec's position, calling member with
// dec at each member's value; member must consume the value.
func walkObject(dec *jsontext.Decoder, member func(name string) error) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for {
		k := dec.PeekKind()
		if k == '}' {
			break
		}
		if k != '"' {
			_, err := dec.ReadToken()
			return jsonErr(err)
		}
		tok, err := dec.ReadToken() // a repeated name fails here
		if err != nil {
			return jsonErr(err)
		}
		if err := member(tok.String()); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

// scalar decodes the value at dec's position into v.
func scalar(dec *jsontext.Decoder, v any) error {
	return jsonErr(json.UnmarshalDecode(dec, v, jsonOpts))
}

func unknownMember(dec *jsontext.Decoder) error {
	return &signal.FieldError{Field: pathOf(dec.StackPointer()), Msg: "unknown field"}
}
