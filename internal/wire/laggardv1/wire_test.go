package laggardv1

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func testJob() *signal.Job {
	return &signal.Job{ID: "j1", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 2}
}

func goodVectors() []stagevec.Vector {
	return []stagevec.Vector{
		{Step: 1, Rank: 0, Durations: []float64{1, 2, 3, 4, 5, 6}, WallMS: 21},
		{Step: 1, Rank: 3, Micro: 1, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 16, DataLead: 2, Dropped: 7, Nested: 1,
			Probes: map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 1.5, Ready: true}}},
	}
}

// fieldOf returns the FieldError's field or fails.
func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var fe *signal.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want *signal.FieldError, got %T %v", err, err)
	}
	return fe.Field
}

func TestDecodeJSONBatch(t *testing.T) {
	const ok = `{"step":1,"rank":0,"durations_ms":[1,2,3,4,5,6],"wall_ms":21}`
	cases := []struct {
		name, body string
		n          int    // vectors on success
		field      string // FieldError.Field on failure
		tooLarge   bool
	}{
		{"one", `{"vectors":[` + ok + `]}`, 1, "", false},
		{"residual omitted", `{"vectors":[{"step":1,"rank":1,"durations_ms":[1,2,3,4,5],"wall_ms":21}]}`, 1, "", false},
		{"null", `{"vectors":null}`, 0, "", false},
		{"empty object", `{}`, 0, "", false},
		{"whitespace", " \n{ \"vectors\" : [ " + ok + " , " + ok + " ] }\n ", 2, "", false},
		{"bad durations len", `{"vectors":[` + ok + `,{"step":1,"rank":0,"durations_ms":[1],"wall_ms":1}]}`, 0, "vectors[1].durations_ms", false},
		{"negative duration", `{"vectors":[{"step":1,"rank":0,"durations_ms":[1,2,-3,4,5,6],"wall_ms":1}]}`, 0, "vectors[0].durations_ms", false},
		{"rank out of world", `{"vectors":[` + ok + `,` + ok + `,{"step":1,"rank":4,"durations_ms":[1,2,3,4,5,6],"wall_ms":1}]}`, 0, "vectors[2].rank", false},
		{"micro >= accumulation", `{"vectors":[{"step":1,"rank":0,"micro":2,"durations_ms":[1,2,3,4,5,6],"wall_ms":1}]}`, 0, "vectors[0].micro", false},
		{"undeclared probe", `{"vectors":[{"step":1,"rank":0,"durations_ms":[1,2,3,4,5,6],"wall_ms":1,"probes":{"x":{"value_ms":1,"ready":true}}}]}`, 0, "vectors[0].probes", false},
		{"wrong type", `{"vectors":[` + ok + `,{"step":"one","rank":0}]}`, 0, "vectors[1].step", false},
		{"float step", `{"vectors":[{"step":1.5}]}`, 0, "vectors[0].step", false},
		{"unknown vector field", `{"vectors":[{"step":1,"rank":0,"bogus":1}]}`, 0, "vectors[0].bogus", false},
		{"unknown top field", `{"vectors":[],"extra":1}`, 0, "extra", false},
		{"vectors twice", `{"vectors":[],"vectors":[]}`, 0, "vectors", false},
		{"vectors not array", `{"vectors":{}}`, 0, "vectors", false},
		{"not an object", `[1]`, 0, "body", false},
		{"truncated", `{"vectors":[` + ok, 0, "vectors", false},
		{"truncated inside vector", `{"vectors":[{"step":1,`, 0, "vectors[0]", false},
		{"syntax", `{"vectors":[{"step":1,,}]}`, 0, "vectors[0]", false},
		{"trailing", `{"vectors":[]} {}`, 0, "body", false},
		{"empty body", ``, 0, "body", false},
		{"too large", `{"vectors":[` + strings.Repeat(ok+",", 100) + ok + `]}`, 0, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs, err := DecodeJSONBatch(strings.NewReader(c.body), testJob(), 4096)
			switch {
			case c.tooLarge:
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("want ErrTooLarge, got %v", err)
				}
			case c.field != "":
				if f := fieldOf(t, err); f != c.field {
					t.Fatalf("field %q, want %q (err %v)", f, c.field, err)
				}
				if vs != nil {
					t.Fatalf("got vectors with an error")
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if len(vs) != c.n {
					t.Fatalf("got %d vectors, want %d", len(vs), c.n)
				}
			}
		})
	}
}

func TestLimitExact(t *testing.T) {
	body := `{"vectors":[]}`
	if _, err := DecodeJSONBatch(strings.NewReader(body), testJob(), int64(len(body))); err != nil {
		t.Fatalf("body of exactly the limit: %v", err)
	}
	if _, err := DecodeJSONBatch(strings.NewReader(body+" "), testJob(), int64(len(body))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: want ErrTooLarge, got %v", err)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	in := goodVectors()
	b, err := EncodeProtoBatch(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeProtoBatch(bytes.NewReader(b), testJob(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	if _, err := DecodeProtoBatch(bytes.NewReader(b), testJob(), int64(len(b)-1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

func TestProtoErrors(t *testing.T) {
	bad := goodVectors()
	bad = append(bad, stagevec.Vector{Step: 2, Rank: 1, Durations: []float64{1, math.NaN(), 3, 4, 5, 6}, WallMS: 1})
	b, _ := EncodeProtoBatch(bad)
	if f := fieldOf(t, decodeProto(b)); f != "vectors[2].durations_ms" {
		t.Fatalf("NaN duration: field %q", f)
	}

	// An unknown field number inside vector 0.
	good, _ := EncodeProtoBatch(goodVectors()[:1])
	vec := good[2:] // strip the outer tag+len (one short vector)
	vec = protowire.AppendTag(vec, 42, protowire.VarintType)
	vec = protowire.AppendVarint(vec, 1)
	withUnknown := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), vec)
	if f := fieldOf(t, decodeProto(withUnknown)); f != "vectors[0]" {
		t.Fatalf("unknown field: field %q", f)
	}
	top := protowire.AppendVarint(protowire.AppendTag(append([]byte{}, good...), 9, protowire.VarintType), 1)
	if f := fieldOf(t, decodeProto(top)); f != "body" {
		t.Fatalf("unknown top-level field: field %q", f)
	}
	if f := fieldOf(t, decodeProto([]byte{0x0a, 0x05, 0x01})); f != "body" {
		t.Fatalf("truncated: field %q", f)
	}
}

func decodeProto(b []byte) error {
	_, err := DecodeProtoBatch(bytes.NewReader(b), testJob(), 0)
	return err
}

func TestBatchVectorCap(t *testing.T) {
	var b []byte
	for range MaxBatchVectors + 1 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), nil)
	}
	if err := decodeProto(b); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("proto: want ErrTooLarge, got %v", err)
	}
	const v = `{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}`
	js := `{"vectors":[` + strings.Repeat(v+",", MaxBatchVectors) + v + `]}`
	if _, err := DecodeJSONBatch(strings.NewReader(js), testJob(), 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("json: want ErrTooLarge, got %v", err)
	}
}

func TestDecodeJob(t *testing.T) {
	cases := []struct {
		name, id, body string
		field          string
		check          func(*signal.Job) bool
	}{
		{"full", "j1", `{"id":"j1","name":"n","world_size":8,"schema":{"version":"v","stages":["a","step.other_cpu_wall"],"probes":["p"]},"accumulation":4,"labels":{"k":"v"}}`, "",
			func(j *signal.Job) bool {
				return j.WorldSize == 8 && j.Accumulation == 4 && j.Schema.Index("a") == 0 && j.Labels["k"] == "v"
			}},
		{"id from url, default schema", "j2", `{"world_size":2}`, "",
			func(j *signal.Job) bool {
				return j.ID == "j2" && j.Schema.OrderHash() == stagevec.DefaultSchema().OrderHash()
			}},
		{"id mismatch", "j1", `{"id":"other","world_size":2}`, "id", nil},
		{"bad id", "", `{"id":"-x","world_size":2}`, "id", nil},
		{"world size", "j1", `{"world_size":0}`, "world_size", nil},
		{"residual not last", "j1", `{"world_size":2,"schema":{"version":"v","stages":["step.other_cpu_wall","a"]}}`, "schema.stages", nil},
		{"rank out of world", "j1", `{"world_size":2,"ranks":[{"rank":0},{"rank":5}]}`, "ranks[1].rank", nil},
		{"unknown field", "j1", `{"world_size":2,"wrld":3}`, "wrld", nil},
		{"type", "j1", `{"world_size":"2"}`, "world_size", nil},
		{"nested type", "j1", `{"world_size":2,"schema":{"stages":"a"}}`, "schema.stages", nil},
		{"trailing", "j1", `{"world_size":2}x`, "body", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, _, err := DecodeJob(strings.NewReader(c.body), c.id, 0)
			if c.field != "" {
				if f := fieldOf(t, err); f != c.field {
					t.Fatalf("field %q, want %q (%v)", f, c.field, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(j) {
				t.Fatalf("unexpected job %+v", j)
			}
		})
	}
}

func TestDecodeRank(t *testing.T) {
	job := testJob()
	rk, _, err := DecodeRank(strings.NewReader(`{"rank":3,"host":"h","local_rank":1,"role":{"dp":3,"name":"dense"}}`), job, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := signal.Rank{Rank: 3, Host: "h", LocalRank: 1, Role: signal.Role{DP: 3, TP: -1, PP: -1, EP: -1, Name: "dense"}}
	if *rk != want {
		t.Fatalf("got %+v, want %+v", *rk, want)
	}
	// A null role is an unknown role, as an omitted one is.
	rk, _, err = DecodeRank(strings.NewReader(`{"rank":1,"role":null}`), job, 0)
	if err != nil || rk.Role != signal.UnknownRole {
		t.Fatalf("null role: %+v, %v; want the unknown role", rk, err)
	}
	for body, field := range map[string]string{
		`{"rank":4}`:                  "rank",
		`{"rank":0,"local_rank":-1}`:  "local_rank",
		`{"rank":0,"role":{"dq":1}}`:  "role.dq",
		`{"rank":0,"rank":1}`:         "rank", // D13: duplicate key
		`{"rank":0,"role":{"tp":""}}`: "role.tp",
		`{"rank":0}{"rank":1}`:        "body",
	} {
		_, _, err := DecodeRank(strings.NewReader(body), job, 0)
		if f := fieldOf(t, err); f != field {
			t.Errorf("%s: field %q, want %q (%v)", body, f, field, err)
		}
	}
}
