package laggardv1

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Regression tests for issue 6 (D5, D6, D13) at the decoders.

// TestD5_HugeValuesRejected: 1e308 (and other out-of-range values) used
// to be accepted and then broke the analysis. Both decoders now refuse
// them, naming the vector and field.
func TestD5_HugeValuesRejected(t *testing.T) {
	const tail = `"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}`
	cases := []struct {
		name, vector, field string
	}{
		{"duration 1e308", `{"step":1,"rank":0,"durations_ms":[1,2,1e308,4,5],"wall_ms":21}`, "vectors[1].durations_ms"},
		{"duration over a day", `{"step":1,"rank":0,"durations_ms":[1,2,86400001,4,5],"wall_ms":21}`, "vectors[1].durations_ms"},
		{"wall 1e308", `{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":1e308}`, "vectors[1].wall_ms"},
		{"stage by name 1e308", `{"step":1,"rank":0,"stages_ms":{"forward":1e308},"wall_ms":21}`, "vectors[1].durations_ms"},
		{"step 2^62", `{"step":4611686018427387904,` + tail, "vectors[1].step"},
		{"step 2^63-1", `{"step":9223372036854775807,` + tail, "vectors[1].step"},
		{"step beyond int64", `{"step":9223372036854775808,` + tail, "vectors[1].step"},
		{"dropped 2^62", `{"step":1,"dropped":4611686018427387904,` + tail, "vectors[1].dropped"},
		{"probe 1e308", `{"step":1,"probes":{"model.fwd_loss_cuda_event_ms":{"value_ms":1e308,"ready":true}},` + tail, "vectors[1].probes"},
	}
	ok := `{"step":1,` + tail
	for _, c := range cases {
		t.Run("json/"+c.name, func(t *testing.T) {
			_, err := DecodeJSONBatch(strings.NewReader(`{"vectors":[`+ok+`,`+c.vector+`]}`), testJob(), 0)
			if f := fieldOf(t, err); f != c.field {
				t.Fatalf("field %q, want %q (%v)", f, c.field, err)
			}
		})
	}
	protoCases := []struct {
		name  string
		edit  func(*stagevec.Vector)
		field string
	}{
		{"duration 1e308", func(v *stagevec.Vector) { v.Durations[2] = 1e308 }, "vectors[1].durations_ms"},
		{"wall max float", func(v *stagevec.Vector) { v.WallMS = math.MaxFloat64 }, "vectors[1].wall_ms"},
		{"step 2^62", func(v *stagevec.Vector) { v.Step = 1 << 62 }, "vectors[1].step"},
		{"step max int64", func(v *stagevec.Vector) { v.Step = math.MaxInt64 }, "vectors[1].step"},
		{"dropped max int64", func(v *stagevec.Vector) { v.Dropped = math.MaxInt64 }, "vectors[1].dropped"},
		{"not-ready probe NaN", func(v *stagevec.Vector) {
			v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: math.NaN()}}
		}, "vectors[1].probes"},
	}
	for _, c := range protoCases {
		t.Run("proto/"+c.name, func(t *testing.T) {
			vs := goodVectors()
			c.edit(&vs[1])
			b, err := EncodeProtoBatch(vs)
			if err != nil {
				t.Fatal(err)
			}
			if f := fieldOf(t, decodeProto(b)); f != c.field {
				t.Fatalf("field %q, want %q (%v)", f, c.field, decodeProto(b))
			}
		})
	}
}

// TestD13_DuplicateKeysRejected: encoding/json let the last of two equal
// keys win silently; every decoder now refuses them, naming the path.
func TestD13_DuplicateKeysRejected(t *testing.T) {
	v := func(extra string) string {
		return `{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21` + extra + `}`
	}
	batches := []struct{ name, body, field string }{
		{"vectors twice", `{"vectors":[],"vectors":[` + v("") + `]}`, "vectors"},
		{"step twice", `{"vectors":[` + v("") + `,` + v(`,"step":2`) + `]}`, "vectors[1].step"},
		{"stage twice", `{"vectors":[` + v("") + `,` + v("") + `,` + v("") + `,{"step":1,"rank":0,"stages_ms":{"forward":1,"forward":2},"wall_ms":9}]}`, "vectors[3].stages_ms.forward"},
		{"stage and its alias", `{"vectors":[{"step":1,"rank":0,"stages_ms":{"forward":1,"model.fwd_loss_cpu_wall":2},"wall_ms":9}]}`, "vectors[0].stages_ms.model.fwd_loss_cpu_wall"},
		{"probe twice", `{"vectors":[` + v(`,"probes":{"model.fwd_loss_cuda_event_ms":{"value_ms":1,"ready":true},"model.fwd_loss_cuda_event_ms":{"value_ms":9,"ready":true}}`) + `]}`,
			"vectors[0].probes.model.fwd_loss_cuda_event_ms"},
		{"probe field twice", `{"vectors":[` + v(`,"probes":{"model.fwd_loss_cuda_event_ms":{"value_ms":1,"value_ms":2,"ready":true}}`) + `]}`,
			"vectors[0].probes.model.fwd_loss_cuda_event_ms.value_ms"},
	}
	for _, c := range batches {
		t.Run("batch/"+c.name, func(t *testing.T) {
			_, err := DecodeJSONBatch(strings.NewReader(c.body), testJob(), 0)
			if f := fieldOf(t, err); f != c.field || !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("field %q, want %q with \"duplicate key\" (%v)", f, c.field, err)
			}
		})
	}
	jobs := []struct{ name, body, field string }{
		{"world_size twice", `{"world_size":2,"world_size":4}`, "world_size"},
		{"label twice", `{"world_size":2,"labels":{"k":"a","k":"b"}}`, "labels.k"},
		{"schema field twice", `{"world_size":2,"schema":{"version":"v","stages":["a","step.other_cpu_wall"],"version":"w"}}`, "schema.version"},
		{"rank field twice", `{"world_size":2,"ranks":[{"rank":0},{"rank":1,"rank":0}]}`, "ranks[1].rank"},
	}
	for _, c := range jobs {
		t.Run("job/"+c.name, func(t *testing.T) {
			_, _, err := DecodeJob(strings.NewReader(c.body), "j1", 0)
			if f := fieldOf(t, err); f != c.field || !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("field %q, want %q with \"duplicate key\" (%v)", f, c.field, err)
			}
		})
	}
	ranks := []struct{ name, body, field string }{
		{"rank twice", `{"rank":0,"rank":3}`, "rank"},
		{"role field twice", `{"rank":0,"role":{"dp":0,"dp":1}}`, "role.dp"},
	}
	for _, c := range ranks {
		t.Run("rank/"+c.name, func(t *testing.T) {
			_, _, err := DecodeRank(strings.NewReader(c.body), testJob(), 0)
			if f := fieldOf(t, err); f != c.field || !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("field %q, want %q with \"duplicate key\" (%v)", f, c.field, err)
			}
		})
	}
}

// TestD13_ErrorsQuoteShortPrefix: a 10 MB bad value anywhere in a body
// gives an error of well under 1 KB (it used to be echoed whole).
func TestD13_ErrorsQuoteShortPrefix(t *testing.T) {
	big := strings.Repeat("x", 10<<20)
	v := `{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21`
	type decode func(string) error
	batch := func(b string) error { _, err := DecodeJSONBatch(strings.NewReader(b), testJob(), 0); return err }
	job := func(b string) error { _, _, err := DecodeJob(strings.NewReader(b), "j1", 0); return err }
	rank := func(b string) error { _, _, err := DecodeRank(strings.NewReader(b), testJob(), 0); return err }
	cases := []struct {
		name string
		dec  decode
		body string
	}{
		{"unknown top field", batch, `{"` + big + `":1}`},
		{"unknown vector field", batch, `{"vectors":[` + v + `,"` + big + `":1}]}`},
		{"string as step", batch, `{"vectors":[{"step":"` + big + `"}]}`},
		{"huge number as step", batch, `{"vectors":[{"step":1` + strings.Repeat("0", 10<<20) + `}]}`},
		{"unknown stage name", batch, `{"vectors":[{"step":1,"rank":0,"stages_ms":{"` + big + `":1},"wall_ms":1}]}`},
		{"duplicate long stage name", batch, `{"vectors":[{"step":1,"rank":0,"stages_ms":{"` + big + `":1,"` + big + `":2},"wall_ms":1}]}`},
		{"undeclared long probe", batch, `{"vectors":[` + v + `,"probes":{"` + big + `":{"value_ms":1,"ready":true}}}]}`},
		{"long order hash", batch, `{"vectors":[` + v + `,"order_hash":"` + big + `"}]}`},
		{"invalid UTF-8 in a long string", batch, `{"vectors":[` + v + `,"order_hash":"` + big + "\xff" + `"}]}`},
		{"syntax error after a long string", batch, `{"vectors":[` + v + `,"order_hash":"` + big + `" x}]}`},
		{"job id mismatch", job, `{"id":"` + big + `","world_size":2}`},
		{"job unknown field", job, `{"` + big + `":2}`},
		{"job long label", job, `{"world_size":2,"labels":{"` + big + `":"a","` + big + `":"b"}}`},
		{"job long stage", job, `{"world_size":2,"schema":{"version":"v","stages":["` + big + `","step.other_cpu_wall"]}}`},
		{"rank long host", rank, `{"rank":0,"host":"` + big + `"}`},
		{"rank wrong type", rank, `{"rank":"` + big + `"}`},
		{"rank long role name", rank, `{"rank":0,"role":{"name":"` + big + `"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.dec(c.body)
			if err == nil {
				t.Fatal("accepted")
			}
			if n := len(err.Error()); n >= 1024 {
				t.Fatalf("error of %d bytes (want < 1 KiB): %.200s…", n, err.Error())
			}
			var ce *signal.ConflictError
			if !errors.As(err, &ce) {
				fieldOf(t, err) // still names a field
			}
			t.Logf("%s", err)
		})
	}
}

// chunkReader hands out its input a few bytes per Read, as a slow
// client's body arrives, and counts the reads.
type chunkReader struct {
	b     []byte
	chunk int
	reads int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	r.reads++
	n := copy(p[:min(len(p), r.chunk)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func whitespaceBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"vectors":[`)
	b.Write(bytes.Repeat([]byte(" "), n))
	b.WriteString(`{"step":1,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}]}`)
	return b.Bytes()
}

// TestD6_WhitespaceLinear: encoding/json's Decoder rescanned pending
// whitespace on every refill, so a body of whitespace arriving in small
// reads cost time quadratic in its size (8 MB in 4 KiB reads: 5.8 s of
// CPU, 1 KiB reads: 23 s). The decoder must scale linearly: 8 MB in
// 64-byte reads costs about 8× 1 MB, not 64×. Timings are taken as the
// best of five runs and compared as a ratio, with a wide margin (linear
// is 8, quadratic 64); a generous deadline keeps the old code from
// hanging the suite.
func TestD6_WhitespaceLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing ratio; skipped in -short")
	}
	job := testJob()
	run := func(mb int) time.Duration {
		body := whitespaceBody(mb << 20)
		best := time.Duration(math.MaxInt64)
		for range 5 {
			r := &chunkReader{b: body, chunk: 64}
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				vs, err := DecodeJSONBatch(r, job, 64<<20)
				if err == nil && len(vs) != 1 {
					err = errors.New("want one vector")
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%d MB of whitespace in 64-byte reads: not decoded after 30 s", mb)
			}
			best = min(best, time.Since(start))
			if want := (len(body) + 63) / 64; r.reads != want {
				t.Fatalf("%d reads of the body, want %d", r.reads, want)
			}
		}
		return best
	}
	t1, t8 := run(1), run(8)
	ratio := float64(t8) / float64(t1)
	t.Logf("1 MB: %v, 8 MB: %v, ratio %.1f (linear 8, quadratic 64)", t1, t8, ratio)
	if ratio > 24 {
		t.Fatalf("8 MB of whitespace cost %.1f× 1 MB: not linear", ratio)
	}
}

// BenchmarkDecodeJSONWhitespace decodes a body that is mostly whitespace
// arriving in 512-byte reads; ns/op should grow 8× from 1 MB to 8 MB.
func BenchmarkDecodeJSONWhitespace(b *testing.B) {
	for _, mb := range []int{1, 8} {
		body := whitespaceBody(mb << 20)
		b.Run(strconv.Itoa(mb)+"MB", func(b *testing.B) {
			job := testJob()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := DecodeJSONBatch(&chunkReader{b: body, chunk: 512}, job, 64<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBodyBufferReuse: bodies are read into pooled buffers, which is only
// safe while decoded vectors share no memory with the body. A decode of
// another body must leave earlier results intact, in both encodings.
func TestBodyBufferReuse(t *testing.T) {
	job := testJob()
	want := goodVectors()
	hash := job.Schema.OrderHash()
	want[1].OrderHash = hash
	js := `{"vectors":[{"step":1,"rank":0,"durations_ms":[1,2,3,4,5,6],"wall_ms":21},` +
		`{"step":1,"rank":3,"micro":1,"durations_ms":[1,2,3,4,5],"wall_ms":16,"data_lead":2,"dropped":7,"nested":1,"order_hash":"` + hash + `",` +
		`"probes":{"model.fwd_loss_cuda_event_ms":{"value_ms":1.5,"ready":true}}}]}`
	pbb, err := EncodeProtoBatch(want)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := DecodeJSONBatch(strings.NewReader(js), job, 0)
	if err != nil {
		t.Fatal(err)
	}
	fromProto, err := DecodeProtoBatch(bytes.NewReader(pbb), job, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Overwrite the pooled buffers with other bodies of the same size.
	for range 4 {
		DecodeJSONBatch(strings.NewReader(strings.Repeat("#", len(js))), job, 0)
		DecodeProtoBatch(bytes.NewReader(bytes.Repeat([]byte{0xff}, len(pbb))), job, 0)
	}
	for name, got := range map[string][]stagevec.Vector{"json": fromJSON, "proto": fromProto} {
		if !sameVectors(got, want) || got[1].OrderHash != hash {
			t.Fatalf("%s: decoded vectors changed after the buffer was reused:\n%+v\nwant %+v", name, got, want)
		}
		for name := range got[1].Probes {
			if name != stagevec.ProbeForwardCUDA {
				t.Fatalf("probe name changed to %q", name)
			}
		}
	}
}
