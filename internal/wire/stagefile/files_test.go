package stagefile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// write puts files (name → content) in a fresh directory and returns
// their paths in the order of names.
func write(t *testing.T, files map[string][]byte, names ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// recorder is a sink that checks the Sink contract: Job once, first.
type recorder struct {
	t    *testing.T
	jobs int
	vs   []stagevec.Vector
}

func (r *recorder) sink() Sink {
	return Sink{
		Job: func(*signal.Job) error { r.jobs++; return nil },
		Vector: func(v *stagevec.Vector) error {
			if r.jobs != 1 {
				r.t.Fatalf("vector before the job (jobs=%d)", r.jobs)
			}
			r.vs = append(r.vs, *v)
			return nil
		},
	}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFormatAndJobIDOf(t *testing.T) {
	cases := []struct {
		path string
		f    Format
		id   string
	}{
		{"run.jsonl", JSONL, "run"},
		{"run.jsonl.gz", JSONL, "run"},
		{"dir/run42.csv", CSV, "run42"},
		{"run42.CSV.GZ", CSV, "run42"},
		{"x.csv.gz", CSV, "x"},
		{"-", JSONL, "stdin"},
		{"my run (2).csv", CSV, "my-run--2-"},
		{".csv", CSV, "job"},
		{"noext", JSONL, "noext"},
	}
	for _, c := range cases {
		if f, id := FormatOf(c.path), JobIDOf(c.path); f != c.f || id != c.id {
			t.Errorf("%q: format %q id %q, want %q %q", c.path, f, id, c.f, c.id)
		}
		if err := (&signal.Job{ID: JobIDOf(c.path), WorldSize: 1, Schema: stagevec.DefaultSchema()}).Validate(); err != nil {
			t.Errorf("%q: JobIDOf gives an invalid id: %v", c.path, err)
		}
	}
	for _, s := range []string{"jsonl", "JSON", "csv"} {
		if _, err := ParseFormat(s); err != nil {
			t.Errorf("ParseFormat(%q): %v", s, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("ParseFormat(xml) = %v", err)
	}
}

// Compressed input is recognised by its magic bytes, whatever its name;
// the format comes from the name without .gz.
func TestReadFilesGzip(t *testing.T) {
	jl, csv := fixture(t, "sync_wait.jsonl"), fixture(t, "sync_wait.csv")
	files := map[string][]byte{
		"a.jsonl.gz": gz(t, jl), "b.jsonl": gz(t, jl), "c.csv.gz": gz(t, csv), "d.jsonl.gz": jl, "e.csv": csv,
	}
	for _, name := range []string{"a.jsonl.gz", "b.jsonl", "c.csv.gz", "d.jsonl.gz", "e.csv"} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{t: t}
			job, err := ReadFiles(write(t, files, name), Options{}, rec.sink())
			if err != nil {
				t.Fatal(err)
			}
			if job.WorldSize != 3 || len(rec.vs) != 3 || rec.jobs != 1 {
				t.Fatalf("world %d, %d vectors, %d jobs", job.WorldSize, len(rec.vs), rec.jobs)
			}
		})
	}
	// Stdin, compressed, through the old single-reader API and ReadFiles.
	rec := &recorder{t: t}
	if _, err := ReadFiles([]string{"-"}, Options{Stdin: bytes.NewReader(gz(t, csv)), Format: CSV}, rec.sink()); err != nil || len(rec.vs) != 3 {
		t.Fatalf("gzipped CSV on stdin: %v, %d vectors", err, len(rec.vs))
	}
	if job, err := ReadJSONL(bytes.NewReader(gz(t, jl)), Sink{}); err != nil || job.WorldSize != 3 {
		t.Fatalf("ReadJSONL(gzip): %v", err)
	}
	if job, err := ReadCSV(bytes.NewReader(gz(t, csv)), "j", Sink{}); err != nil || job.WorldSize != 3 {
		t.Fatalf("ReadCSV(gzip): %v", err)
	}
}

// A truncated or corrupt gzip stream is a clear error naming the file,
// never a panic and never a silently shorter matrix.
func TestReadFilesTruncatedGzip(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"job":{"id":"j","world_size":2}}` + "\n")
	for s := range 2000 {
		fmt.Fprintf(&big, `{"step":%d,"rank":%d,"durations_ms":[1,2,3,4,5],"wall_ms":16}`+"\n", s/2, s%2)
	}
	full := gz(t, []byte(big.String()))
	csvFull := gz(t, fixture(t, "sync_wait.csv"))
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"cut.jsonl.gz", full[:len(full)/2]},
		{"nofooter.jsonl.gz", full[:len(full)-4]},
		{"header-only.jsonl.gz", full[:5]},
		{"badcrc.jsonl.gz", func() []byte { b := bytes.Clone(full); b[len(b)-6] ^= 0xff; return b }()},
		{"cut.csv.gz", csvFull[:len(csvFull)-3]},
	} {
		t.Run(c.name, func(t *testing.T) {
			paths := write(t, map[string][]byte{c.name: c.data}, c.name)
			_, err := ReadFiles(paths, Options{}, Sink{})
			var ce *CorruptError
			var fe *FileError
			if !errors.As(err, &ce) || !errors.As(err, &fe) || fe.Path != paths[0] || !strings.Contains(err.Error(), "gzip") {
				t.Fatalf("err = %v, want a CorruptError naming %s", err, paths[0])
			}
		})
	}
	// A flipped bit may decompress to garbage before the checksum is
	// reached: then the garbage line is named.
	flipped := bytes.Clone(full)
	flipped[len(flipped)/2] ^= 0xff
	paths := write(t, map[string][]byte{"flipped.jsonl.gz": flipped}, "flipped.jsonl.gz")
	if _, err := ReadFiles(paths, Options{}, Sink{}); err == nil || !strings.Contains(err.Error(), paths[0]+": line ") {
		t.Fatalf("flipped bit: err = %v", err)
	}
	// Every cut point: an error, never a panic. (A cut in the last 8
	// bytes may still yield every line; then the checksum is missing.)
	for n := 0; n < len(csvFull); n++ {
		if _, err := ReadCSV(bytes.NewReader(csvFull[:n]), "j", Sink{}); err == nil {
			t.Fatalf("cut at %d/%d bytes: no error", n, len(csvFull))
		}
	}
}

func rankPart(rank, world int, extra string) []byte {
	return []byte(fmt.Sprintf(`{"job":{"id":"run","world_size":%d,"ranks":[{"rank":%d,"host":"h%d","local_rank":0,"role":{"dp":%d,"tp":-1,"pp":-1,"ep":-1}}]%s}}`+"\n"+
		`{"step":1,"rank":%d,"durations_ms":[1,2,5,0,1],"wall_ms":9}`+"\n"+
		`{"step":2,"rank":%d,"durations_ms":[1,2,5,0,1],"wall_ms":9}`+"\n", world, rank, rank, rank, extra, rank, rank))
}

func TestReadFilesMergesRankParts(t *testing.T) {
	files := map[string][]byte{
		"part-0.jsonl":    rankPart(0, 3, `,"labels":{"a":"1"}`),
		"part-1.jsonl.gz": gz(t, rankPart(1, 3, `,"labels":{"b":"2"},"schema":{"version":"stagefrontier/v1","stages":["data.next_wait","model.fwd_loss_cpu_wall","model.backward_cpu_wall","callbacks.cpu_wall","optim.step_cpu_wall","step.other_cpu_wall"],"probes":["p"]}`)),
		"part-2.jsonl":    rankPart(2, 3, ""),
	}
	rec := &recorder{t: t}
	job, err := ReadFiles(write(t, files, "part-2.jsonl", "part-0.jsonl", "part-1.jsonl.gz"), Options{}, rec.sink())
	if err != nil {
		t.Fatal(err)
	}
	if job.ID != "run" || job.WorldSize != 3 || len(job.Ranks) != 3 || len(rec.vs) != 6 || rec.jobs != 1 {
		t.Fatalf("job %+v, %d vectors", job, len(rec.vs))
	}
	for i, r := range job.Ranks {
		if r.Rank != i || r.Host != fmt.Sprintf("h%d", i) {
			t.Fatalf("ranks not merged in order: %+v", job.Ranks)
		}
	}
	if job.Labels["a"] != "1" || job.Labels["b"] != "2" || !slices.Contains(job.Schema.Probes, "p") {
		t.Fatalf("labels %v probes %v not merged", job.Labels, job.Schema.Probes)
	}
}

// Per-rank CSV parts (and a JSONL header without world_size) leave the
// world size and accumulation to be inferred across every part, from
// regular files and from a stream that can only be read once.
func TestReadFilesInfersAcrossParts(t *testing.T) {
	head := "step,rank,micro,data.next_wait,model.fwd_loss_cpu_wall,model.backward_cpu_wall,callbacks.cpu_wall,optim.step_cpu_wall,wall_ms\n"
	files := map[string][]byte{
		"r0.csv":        []byte(head + "1,0,0,1,2,5,0,1,9\n1,0,1,1,2,5,0,1,9\n"),
		"r3.csv.gz":     gz(t, []byte(head+"1,3,0,1,2,5,0,1,9\n1,3,1,1,2,5,0,1,9\n")),
		"noworld.jsonl": []byte(`{"job":{"id":"j"}}` + "\n" + `{"step":1,"rank":5,"durations_ms":[1,1,1,1,1],"wall_ms":5}` + "\n"),
	}
	rec := &recorder{t: t}
	paths := write(t, files, "r0.csv", "r3.csv.gz")
	job, err := ReadFiles(paths, Options{}, rec.sink())
	if err != nil {
		t.Fatal(err)
	}
	if job.ID != "r0" || job.WorldSize != 4 || job.Accumulation != 2 || len(rec.vs) != 4 {
		t.Fatalf("job %+v, %d vectors", job, len(rec.vs))
	}
	// The same with the second part on stdin (buffered, not reread).
	rec = &recorder{t: t}
	job, err = ReadFiles([]string{paths[0], "-"}, Options{JobID: "given", Format: CSV, Stdin: bytes.NewReader(files["r3.csv.gz"])}, rec.sink())
	if err != nil || job.ID != "given" || job.WorldSize != 4 || len(rec.vs) != 4 {
		t.Fatalf("with stdin: %v, job %+v, %d vectors", err, job, len(rec.vs))
	}
	// A JSONL part declares the id and accumulation; the CSV parts must fit.
	rec = &recorder{t: t}
	job, err = ReadFiles(write(t, files, "r0.csv", "noworld.jsonl"), Options{}, rec.sink())
	if err == nil || !strings.Contains(err.Error(), "r0.csv: line 3: micro") {
		t.Fatalf("micro 1 against a header without accumulation: err = %v, job %+v", err, job)
	}
}

func TestReadFilesErrors(t *testing.T) {
	schema := func(stages string) string {
		return `,"schema":{"version":"stagefrontier/v1","stages":[` + stages + `]}`
	}
	files := map[string][]byte{
		"part-0.jsonl":   rankPart(0, 4, ""),
		"world8.jsonl":   rankPart(1, 8, ""),
		"order.jsonl":    rankPart(1, 4, schema(`"model.fwd_loss_cpu_wall","data.next_wait","model.backward_cpu_wall","callbacks.cpu_wall","optim.step_cpu_wall","step.other_cpu_wall"`)),
		"accum.jsonl":    rankPart(1, 4, `,"accumulation":4`),
		"run1.jsonl":     rankPart(1, 4, `,"run_id":"first"`),
		"run2.jsonl":     rankPart(2, 4, `,"run_id":"other"`),
		"id.jsonl":       bytes.Replace(rankPart(1, 4, ""), []byte(`"id":"run"`), []byte(`"id":"nur"`), 1),
		"rank0.jsonl":    bytes.Replace(rankPart(0, 4, ""), []byte(`"host":"h0"`), []byte(`"host":"elsewhere"`), 1),
		"label1.jsonl":   rankPart(1, 4, `,"labels":{"sync_model":"fits"}`),
		"label2.jsonl":   rankPart(2, 4, `,"labels":{"sync_model":"misfit"}`),
		"empty.jsonl":    nil,
		"blank.jsonl.gz": gz(t, []byte("\n\n")),
		"empty.csv":      nil,
		"order.csv":      []byte("step,rank,model.fwd_loss_cpu_wall,data.next_wait,wall_ms\n1,0,1,1,2\n"),
		"bad-line.jsonl": append(rankPart(1, 4, ""), `{"step":3,"rank":1,"durations_ms":[1,-2,3,4,5],"wall_ms":9}`+"\n"...),
		"rank9.jsonl":    append(rankPart(1, 4, ""), `{"step":3,"rank":9,"durations_ms":[1,2,3,4,5],"wall_ms":9}`+"\n"...),
	}
	cases := []struct {
		names []string
		want  []string // every one must appear in the error
	}{
		{[]string{"part-0.jsonl", "world8.jsonl"}, []string{"world8.jsonl: line 1: world_size: 8 here but 4 in ", "part-0.jsonl"}},
		{[]string{"part-0.jsonl", "order.jsonl"}, []string{"order.jsonl: line 1: schema:", "part-0.jsonl"}},
		{[]string{"part-0.jsonl", "accum.jsonl"}, []string{"accum.jsonl", "accumulation: 4 here but 0 in", "part-0.jsonl"}},
		{[]string{"run1.jsonl", "part-0.jsonl", "run2.jsonl"}, []string{"run2.jsonl", `run_id: "other" here but "first" in`, "run1.jsonl"}},
		{[]string{"part-0.jsonl", "id.jsonl"}, []string{"id.jsonl", `id: "nur" here but "run" in`, "part-0.jsonl"}},
		{[]string{"part-0.jsonl", "rank0.jsonl"}, []string{"rank0.jsonl", "ranks[rank 0]", "elsewhere", "part-0.jsonl"}},
		{[]string{"label1.jsonl", "label2.jsonl"}, []string{"label2.jsonl", "labels[sync_model]", "label1.jsonl"}},
		{[]string{"part-0.jsonl", "empty.jsonl"}, []string{"empty.jsonl: empty stage matrix: no job header"}},
		{[]string{"part-0.jsonl", "blank.jsonl.gz"}, []string{"blank.jsonl.gz: empty stage matrix"}},
		{[]string{"part-0.jsonl", "empty.csv"}, []string{"empty.csv: empty stage matrix"}},
		{[]string{"part-0.jsonl", "order.csv"}, []string{"order.csv: line 1: schema:", "part-0.jsonl"}},
		{[]string{"part-0.jsonl", "bad-line.jsonl"}, []string{"bad-line.jsonl: line 4: durations_ms: value 1"}},
		{[]string{"part-0.jsonl", "rank9.jsonl"}, []string{"rank9.jsonl: line 4: rank: must be in [0, 4), got 9"}},
		{[]string{"part-0.jsonl", "missing.jsonl"}, []string{"missing.jsonl: no such file"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.names, "+"), func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for _, n := range c.names {
				p := filepath.Join(dir, n)
				if b, ok := files[n]; ok {
					if err := os.WriteFile(p, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				paths = append(paths, p)
			}
			_, err := ReadFiles(paths, Options{}, Sink{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
	if _, err := ReadFiles(nil, Options{}, Sink{}); err == nil {
		t.Error("no files: no error")
	}
	if _, err := ReadFiles([]string{"-", "-"}, Options{Stdin: strings.NewReader("")}, Sink{}); err == nil || !strings.Contains(err.Error(), "stdin") {
		t.Errorf("stdin twice: %v", err)
	}
	if _, err := ReadFiles([]string{t.TempDir()}, Options{}, Sink{}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadFiles([]string{"x"}, Options{Format: "xml"}, Sink{}); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("bad format: %v", err)
	}
	// A sink's error is returned with the file and line it happened on.
	boom := errors.New("boom")
	paths := write(t, files, "part-0.jsonl")
	_, err := ReadFiles(paths, Options{}, Sink{Vector: func(*stagevec.Vector) error { return boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "part-0.jsonl: line 2: boom") {
		t.Errorf("sink error = %v", err)
	}
}
