package laggardv1

import (
	"bytes"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// MaxBatchAbsent bounds the absent sources of one OS batch (there are a
// dozen sources; a node lists each at most once per device).
const MaxBatchAbsent = 1 << 10

// UnmarshalJSONOSStats decodes an osstat.Batch with the API's strict
// rules, caps points and absences before allocating them, and validates
// it. An omitted point "rank" or "cpu" means -1 (not a rank's / not a
// CPU's), never rank or CPU 0. Errors name the record: points[2].value.
func UnmarshalJSONOSStats(b []byte) (*osstat.Batch, error) {
	out, _, err := unmarshalJSONOSStats(b, nil)
	return out, err
}

// UnmarshalJSONOSStatsPartial is UnmarshalJSONOSStats keeping every valid
// point and absence; the ones that fail validation are named in the
// refusals. Malformed JSON or a bad batch field still refuses it whole.
func UnmarshalJSONOSStatsPartial(b []byte, rules Rules) (*osstat.Batch, []Refusal, error) {
	return unmarshalJSONOSStats(b, &rules)
}

func unmarshalJSONOSStats(b []byte, rules *Rules) (*osstat.Batch, []Refusal, error) {
	partial := rules != nil
	dec := jsontext.NewDecoder(bytes.NewBuffer(b))
	var out osstat.Batch
	err := walkObject(dec, func(name string) error {
		var err error
		switch name {
		case "points":
			out.Points, err = decodeArray(dec, "points", osstat.MaxPoints, func(p *osstat.Point) { p.Rank, p.CPU = -1, -1 })
			return err
		case "absent":
			out.Absent, err = decodeArray[osstat.Absence](dec, "absent", MaxBatchAbsent, nil)
			return err
		case "node":
			return scalar(dec, &out.Node)
		case "start_ns":
			return scalar(dec, &out.StartNS)
		case "end_ns":
			return scalar(dec, &out.EndNS)
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
		if err := sv.siftOS(&out); err != nil {
			return nil, nil, err
		}
		return &out, sv.refused, nil
	}
	if err := out.Validate(); err != nil {
		return nil, nil, prefix("", err)
	}
	return &out, nil, nil
}

// MarshalJSONOSStats encodes b as UnmarshalJSONOSStats reads it.
func MarshalJSONOSStats(b *osstat.Batch) ([]byte, error) { return json.Marshal(b) }
