package laggardv1

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Durations by stage name: schema names and the legend aliases resolve;
// an unknown name is refused naming it and the schema's stages.
func TestStagesByName(t *testing.T) {
	job := testJob()
	vs, err := DecodeJSONBatch(strings.NewReader(`{"vectors":[
		{"step":1,"rank":0,"stages_ms":{"data":4,"model.fwd_loss_cpu_wall":10,"backward":20},"wall_ms":40},
		{"step":1,"rank":1,"stages_ms":{"data.next_wait":1,"other":2},"wall_ms":3}]}`), job, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vs[0].Durations, []float64{4, 10, 20, 0, 0}) || !slices.Equal(vs[1].Durations, []float64{1, 0, 0, 0, 0, 2}) {
		t.Fatalf("durations %v %v", vs[0].Durations, vs[1].Durations)
	}
	cases := []struct{ body, field, want string }{
		{`{"vectors":[{"step":1,"rank":0,"stages_ms":{"fwd":3},"wall_ms":3}]}`, "vectors[0].stages_ms", `unknown stage "fwd"; rank 0's schema has data.next_wait, model.fwd_loss_cpu_wall`},
		{`{"vectors":[{"step":1,"rank":0,"stages_ms":{"data":3},"durations_ms":[1,2,3,4,5],"wall_ms":3}]}`, "vectors[0].stages_ms", "not both"},
		{`{"vectors":[{"step":1,"rank":9,"stages_ms":{"data":3},"wall_ms":3}]}`, "vectors[0].rank", "must be in"},
	}
	for _, c := range cases {
		_, err := DecodeJSONBatch(strings.NewReader(c.body), job, 0)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want field %s containing %q", c.body, err, c.field, c.want)
		}
	}
}

// A vector's order hash must match its rank's role-group schema: a
// mismatch is a conflict naming the rank and both hashes.
func TestOrderHashConflict(t *testing.T) {
	job := testJob()
	good := job.Schema.OrderHash()
	if _, err := DecodeJSONBatch(strings.NewReader(`{"vectors":[{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":15,"order_hash":"`+good+`"}]}`), job, 0); err != nil {
		t.Fatalf("matching hash: %v", err)
	}
	_, err := DecodeJSONBatch(strings.NewReader(`{"vectors":[{"step":1,"rank":2,"durations_ms":[1,2,3,4,5],"wall_ms":15,"order_hash":"deadbeefdeadbeef"}]}`), job, 0)
	var ce *signal.ConflictError
	if !errors.As(err, &ce) || ce.Field != "vectors[0].order_hash" || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), good) || !strings.Contains(err.Error(), "deadbeefdeadbeef") {
		t.Fatalf("mismatched hash: %v", err)
	}
}

// A rank join may carry the rank's own stage list; a job registration its
// run id.
func TestDecodeRankSchemaAndRunID(t *testing.T) {
	job := testJob()
	rk, _, err := DecodeRank(strings.NewReader(`{"rank":1,"role":{"dp":0,"tp":-1,"pp":1,"ep":-1},"schema":{"version":"pp/v1","stages":["recv.wait","step.other_cpu_wall"]}}`), job, 0)
	if err != nil || rk.Schema == nil || rk.Schema.Stages[0] != "recv.wait" || rk.Role.Group() != "pp1" {
		t.Fatalf("rank with schema: %+v %v", rk, err)
	}
	if _, _, err := DecodeRank(strings.NewReader(`{"rank":1,"schema":{"version":"v","stages":["a","b"]}}`), job, 0); err == nil || !strings.Contains(err.Error(), "residual") {
		t.Errorf("a rank schema without the residual: %v", err)
	}
	j, _, err := DecodeJob(strings.NewReader(`{"world_size":2,"run_id":"r-1"}`), "x", 0)
	if err != nil || j.RunID != "r-1" || j.Schema.OrderHash() != stagevec.DefaultSchema().OrderHash() {
		t.Fatalf("job with run id: %+v %v", j, err)
	}
	if _, _, err := DecodeJob(strings.NewReader(`{"world_size":2,"run_id":"`+strings.Repeat("r", 200)+`"}`), "x", 0); fieldOf(t, err) != "run_id" {
		t.Errorf("long run id: %v", err)
	}
}
