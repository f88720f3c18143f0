package kineto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// writeSynthetic writes a Kineto-shaped trace of about size bytes: per
// step a ProfilerStep range, then groups of aten op → cudaLaunchKernel
// (+ flow) → kernel (+ flow), an NCCL collective every 64 ops, with the
// args torch 2.x writes. Returns the bytes written.
func writeSynthetic(w io.Writer, size int64) int64 {
	bw := bufio.NewWriterSize(w, 1<<20)
	var n int64
	put := func(b []byte) { k, _ := bw.Write(b); n += int64(k) }
	put([]byte(`{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100"}],"distributedInfo":{"backend":"nccl","rank":3,"world_size":8},"traceEvents":[` + "\n"))
	var b []byte
	ts := int64(1_700_000_000_000_000) // µs
	corr := int64(1)
	names := []string{"aten::linear", "aten::addmm", "aten::relu", "aten::layer_norm", "aten::add_", "aten::mul", "aten::softmax", "aten::_flash_attention_forward"}
	kernels := []string{"ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"}
	first := true
	sep := func() {
		if !first {
			b = append(b, ",\n"...)
		}
		first = false
	}
	ev := func(cat, name string, pid, tid, ts, dur int64, args string) {
		sep()
		b = append(b, `{"ph":"X","cat":"`...)
		b = append(b, cat...)
		b = append(b, `","name":"`...)
		b = append(b, name...)
		b = append(b, `","pid":`...)
		b = strconv.AppendInt(b, pid, 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, tid, 10)
		b = append(b, `,"ts":`...)
		b = strconv.AppendInt(b, ts, 10)
		b = append(b, `.123,"dur":`...)
		b = strconv.AppendInt(b, dur, 10)
		b = append(b, `.5,"args":{`...)
		b = append(b, args...)
		b = append(b, "}}"...)
	}
	flow := func(ph string, id, pid, tid, ts int64) {
		sep()
		b = append(b, `{"ph":"`+ph+`","id":`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, pid, 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, tid, 10)
		b = append(b, `,"ts":`...)
		b = strconv.AppendInt(b, ts, 10)
		b = append(b, `.123,"cat":"ac2g","name":"ac2g"`...)
		if ph == "f" {
			b = append(b, `,"bp":"e"`...)
		}
		b = append(b, '}')
	}
	for step := int64(0); n < size; step++ {
		ev("user_annotation", "ProfilerStep#"+strconv.FormatInt(step, 10), 100, 100, ts, 1_000_000, `"External id": 1`)
		for i := 0; i < 2000 && n < size; i++ {
			t := ts + int64(i)*400
			args := `"External id": ` + strconv.FormatInt(corr, 10) + `, "Record function id": 0, "Sequence number": 7, "Fwd thread id": 0, "Ev Idx": 3`
			ev("cpu_op", names[i%len(names)], 100, 100, t, 30, args)
			ev("cuda_runtime", "cudaLaunchKernel", 100, 100, t+10, 5, `"cbid": 211, "correlation": `+strconv.FormatInt(corr, 10)+`, "External id": `+strconv.FormatInt(corr, 10))
			flow("s", corr, 100, 100, t+10)
			kn, cat := kernels[i%len(kernels)], "kernel"
			kargs := `"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": ` + strconv.FormatInt(corr, 10) + `, "registers per thread": 128, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0, "grid": [64, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12`
			if i%64 == 63 {
				kn = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
				kargs += `, "Process Group Name": "0", "Seq": ` + strconv.FormatInt(step*100+int64(i/64), 10)
			}
			ev(cat, kn, 0, 7, t+20, 100, kargs)
			flow("f", corr, 0, 7, t+20)
			corr++
			if len(b) > 1<<16 {
				put(b)
				b = b[:0]
			}
		}
		ts += 1_000_000
	}
	put(b)
	put([]byte("\n],\"traceName\":\"synthetic\",\"baseTimeNanoseconds\":1700000000000000000}\n"))
	bw.Flush()
	return n
}

func synthetic(tb testing.TB, size int64) []byte {
	var buf bytes.Buffer
	writeSynthetic(&buf, size)
	return buf.Bytes()
}

func BenchmarkDecode(b *testing.B) {
	data := synthetic(b, 32<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if _, err := Decode(bytes.NewReader(data), Options{}, func(*optrace.Event) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadTrace is the upload's and laggard trace's import of the
// same input: Decode, then linking steps, launches and flows over the
// whole trace and sorting it (issue 16 item 7d), events held in memory.
func BenchmarkReadTrace(b *testing.B) {
	data := synthetic(b, 32<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := ReadTrace(bytes.NewReader(data), ReadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdlibTokens walks the same input with encoding/json's token
// stream and does nothing else: the ceiling of the alternative tokenizer,
// for the choice documented in the package comment.
func BenchmarkStdlibTokens(b *testing.B) {
	data := synthetic(b, 32<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		for {
			if _, err := dec.Token(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodeLargeFile streams a 200 MB (KINETO_BENCH_MB) trace from a temp file and
// reports peak heap in use, sampled during decoding: it must stay flat
// whatever the file size (issue 9 acceptance).
func BenchmarkDecodeLargeFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.json")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	mb := int64(200)
	if v, err := strconv.ParseInt(os.Getenv("KINETO_BENCH_MB"), 10, 64); err == nil && v > 0 {
		mb = v // e.g. KINETO_BENCH_MB=1024 for the 1 GB figure
	}
	size := writeSynthetic(f, mb<<20)
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	var peak uint64
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		n := 0
		_, err = Decode(f, Options{}, func(*optrace.Event) error {
			n++
			if n%200_000 == 0 {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > base {
					peak = max(peak, ms.HeapInuse-base)
				}
			}
			return nil
		})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// BenchmarkDecodeGzip: same input gzipped; MB/s counts the JSON bytes,
// so the gap to BenchmarkDecode is compress/gzip's cost.
func BenchmarkDecodeGzip(b *testing.B) {
	data := synthetic(b, 32<<20)
	z := gz(b, data)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(z), Options{}, func(*optrace.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeFileForRSS decodes the file named by KINETO_RSS_FILE and does
// nothing else, so `/usr/bin/time -v` on the test binary reports the
// importer's peak RSS for that file (issue 9: memory independent of the
// file size). KINETO_RSS_WRITE_MB first writes a synthetic trace of that
// size there. Skipped unless set.
func TestDecodeFileForRSS(t *testing.T) {
	path := os.Getenv("KINETO_RSS_FILE")
	if path == "" {
		t.Skip("set KINETO_RSS_FILE (and KINETO_RSS_WRITE_MB to create it)")
	}
	if mb, err := strconv.ParseInt(os.Getenv("KINETO_RSS_WRITE_MB"), 10, 64); err == nil && mb > 0 {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		size := writeSynthetic(f, mb<<20)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d bytes", size)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	start := time.Now()
	meta, err := Decode(f, Options{}, func(*optrace.Event) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	t.Logf("%d events, %d elements, %d bytes in %v (%.0f MB/s)", n, meta.Elements, fi.Size(), time.Since(start),
		float64(fi.Size())/1e6/time.Since(start).Seconds())
}
