package laggardv1

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// incJobs is a job whose incarnation 0 had world 8 and whose newest (1)
// has world 2: a vector of rank 5 is valid only in incarnation 0.
func incJobs() JobAt {
	old := &signal.Job{ID: "j", WorldSize: 8, Schema: stagevec.DefaultSchema()}
	cur := &signal.Job{ID: "j", WorldSize: 2, Schema: stagevec.DefaultSchema()}
	return func(inc int) (*signal.Job, error) {
		switch inc {
		case -1, 1:
			return cur, nil
		case 0:
			return old, nil
		}
		return nil, &signal.FieldError{Field: "incarnation", Msg: "no such incarnation"}
	}
}

const rank5 = `{"step":1,"rank":5,"durations_ms":[1,2,3,4,5],"wall_ms":16}`

func TestBatchIncarnation(t *testing.T) {
	for _, c := range []struct {
		name, body string
		inc        int
		field      string
	}{
		{"none: the newest", `{"vectors":[{"step":1,"rank":1,"durations_ms":[1,2,3,4,5],"wall_ms":16}]}`, -1, ""},
		{"first, older layout", `{"incarnation":0,"vectors":[` + rank5 + `]}`, 0, ""},
		{"after the vectors: decoded again against its layout", `{"vectors":[` + rank5 + `],"incarnation":0}`, 0, ""},
		{"after the vectors, newest layout", `{"vectors":[` + rank5 + `],"incarnation":1}`, 0, "vectors[0].rank"},
		{"null", `{"incarnation":null,"vectors":[]}`, -1, ""},
		{"unknown", `{"incarnation":7,"vectors":[]}`, 0, "incarnation"},
		{"negative", `{"incarnation":-1,"vectors":[]}`, 0, "incarnation"},
		{"fraction", `{"incarnation":1.5,"vectors":[]}`, 0, "incarnation"},
		{"too large", `{"incarnation":65536,"vectors":[]}`, 0, "incarnation"},
		{"string", `{"incarnation":"1","vectors":[]}`, 0, "incarnation"},
		{"twice", `{"incarnation":0,"incarnation":0,"vectors":[]}`, 0, "incarnation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bt, err := UnmarshalJSONBatchAt([]byte(c.body), incJobs())
			if c.field != "" {
				var fe *signal.FieldError
				if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) || bt.Vectors != nil {
					t.Fatalf("err %v, vectors %v; want a field error on %s and nothing decoded", err, bt.Vectors, c.field)
				}
				return
			}
			if err != nil || bt.Incarnation != c.inc {
				t.Fatalf("incarnation %d, %v; want %d", bt.Incarnation, err, c.inc)
			}
		})
	}
}

func TestProtoBatchIncarnation(t *testing.T) {
	enc := func(inc *uint32, rank int32) []byte {
		b, err := proto.Marshal(&pb.VectorBatch{Incarnation: inc, Vectors: []*pb.Vector{{Step: 1, Rank: rank, DurationsMs: []float64{1, 2, 3, 4, 5}, WallMs: 16}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	zero, seven, huge := uint32(0), uint32(7), uint32(1<<16)
	if bt, err := UnmarshalProtoBatchAt(enc(&zero, 5), incJobs()); err != nil || bt.Incarnation != 0 || len(bt.Vectors) != 1 {
		t.Fatalf("incarnation 0: %+v %v", bt, err)
	}
	if bt, err := UnmarshalProtoBatchAt(enc(nil, 1), incJobs()); err != nil || bt.Incarnation != -1 {
		t.Fatalf("none: %+v %v", bt, err)
	}
	for _, c := range []struct {
		inc   *uint32
		rank  int32
		field string
	}{{nil, 5, "vectors[0].rank"}, {&seven, 1, "incarnation"}, {&huge, 1, "incarnation"}} {
		var fe *signal.FieldError
		if bt, err := UnmarshalProtoBatchAt(enc(c.inc, c.rank), incJobs()); !errors.As(err, &fe) || fe.Field != c.field || bt.Vectors != nil {
			t.Errorf("%v rank %d: %v, want a field error on %s", c.inc, c.rank, err, c.field)
		}
	}
}

func TestDecodeProcess(t *testing.T) {
	j, p, err := DecodeJob(strings.NewReader(`{"world_size":2,"launch":"te:r:1","process":"h/1/2","started_ns":5}`), "x", 0)
	if err != nil || j.WorldSize != 2 || p != (signal.Process{Launch: "te:r:1", ID: "h/1/2", StartNS: 5}) {
		t.Fatalf("%+v %+v %v", j, p, err)
	}
	if _, _, err := DecodeJob(strings.NewReader(`{"world_size":2,"incarnations":[{"n":3}]}`), "x", 0); fieldOf(t, err) != "incarnations" {
		t.Errorf("a client may not describe incarnations: %v", err)
	}
	if _, _, err := DecodeJob(strings.NewReader(`{"world_size":2,"process":"`+strings.Repeat("p", 200)+`"}`), "x", 0); fieldOf(t, err) != "process" {
		t.Errorf("long process id: %v", err)
	}
	rk, p, err := DecodeRank(strings.NewReader(`{"rank":1,"process":"h/1/2"}`), &signal.Job{WorldSize: 2}, 0)
	if err != nil || rk.Rank != 1 || p.ID != "h/1/2" {
		t.Fatalf("%+v %+v %v", rk, p, err)
	}
	if _, _, err := DecodeRank(strings.NewReader(`{"rank":1,"started_ns":-4}`), &signal.Job{WorldSize: 2}, 0); fieldOf(t, err) != "started_ns" {
		t.Errorf("negative start: %v", err)
	}
}
