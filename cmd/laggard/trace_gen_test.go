package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A synthetic 4-rank DDP capture in Kineto's Chrome-trace shape, the
// input of the golden `laggard trace` report (testdata/kair/). Each step:
// a data copy, 3 forward linears, 12 backward matmuls, an all-reduce and
// the optimizer, every kernel on one compute stream, the host blocking on
// the all-reduce. The injected fault: on rank 2 the second backward
// kernel (sgemm_bwd#1) runs 5× long (1.5 ms) in every step, so the rest
// of rank 2's backward completes late (its rhythm shifts), it reaches the
// all-reduce late and its peers wait in it (victims) — Stage 1 should
// single out rank 2, Stage 2 flag sgemm_bwd on it, Stage 3 blame the op
// and not the all-reduce.
//
// The files exercise the importer's paths: rank 0 has distributedInfo
// and relative ts with baseTimeNanoseconds; rank 1 distributedInfo and
// absolute ts; rank-2.json.gz and trace_rank_3.json have no
// distributedInfo (rank from the name) and rank 2 is gzipped. Rank 1's
// clock runs 120 µs behind, rank 3's 250 µs ahead, for clock alignment.

const (
	genSteps     = 5
	genFirstStep = 10
	genRanks     = 4
	genSlowRank  = 2
	genBwdOps    = 12
	genEpochNS   = int64(1_751_371_200_000_000_000) // 2025-07-01 12:00:00 UTC
)

var genSkewNS = [genRanks]int64{0, -120_000, 0, 250_000}

type genEvent struct {
	ph, cat, name string
	tid           int64 // host tid, or the stream for device events
	dev           bool
	ts, dur       int64 // ns on the true clock
	args          string
	flow          int64 // correlation id for s/f
}

func genTraceFiles(t *testing.T, dir string) []string {
	t.Helper()
	host := make([][]genEvent, genRanks)
	devs := make([][]genEvent, genRanks)
	now := make([]int64, genRanks)    // host time per rank
	stream := make([]int64, genRanks) // compute stream free time
	corr := make([]int64, genRanks)
	ext := make([]int64, genRanks)
	for r := range now {
		now[r] = genEpochNS + 1_000_000
		stream[r] = now[r]
		corr[r] = 1000
	}
	for s := int64(genFirstStep); s < genFirstStep+genSteps; s++ {
		arrive := make([]int64, genRanks)
		stepStart := make([]int64, genRanks)
		rngs := make([]*rand.Rand, genRanks)
		for r := 0; r < genRanks; r++ {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(s)))
			rngs[r] = rng
			jit := func(ns int64) int64 { return ns + int64(float64(ns)*0.02*(2*rng.Float64()-1)) }
			stepStart[r] = now[r]
			h := now[r] + jit(5_000)
			op := func(name string, dur int64, kernel string, kdur int64) {
				ext[r]++
				host[r] = append(host[r], genEvent{ph: "X", cat: "cpu_op", name: name, tid: 100, ts: h, dur: jit(dur), args: fmt.Sprintf(`"External id": %d`, ext[r])})
				if kernel != "" {
					corr[r]++
					l := h + jit(10_000)
					host[r] = append(host[r], genEvent{ph: "X", cat: "cuda_runtime", name: "cudaLaunchKernel", tid: 100, ts: l, dur: 4_000,
						args: fmt.Sprintf(`"cbid": 211, "correlation": %d, "External id": %d`, corr[r], ext[r]), flow: corr[r]})
					k := max(l+8_000, stream[r])
					kd := jit(kdur)
					devs[r] = append(devs[r], genEvent{ph: "X", cat: "kernel", name: kernel, tid: 7, dev: true, ts: k, dur: kd,
						args: fmt.Sprintf(`"device": 0, "stream": 7, "correlation": %d, "External id": %d`, corr[r], ext[r]), flow: corr[r]})
					stream[r] = k + kd
				}
				h += jit(dur) + jit(15_000)
			}
			op("aten::copy_", 150_000, "elementwise_copy_kernel", 60_000)
			for i := 0; i < 3; i++ {
				op("aten::linear", 40_000, "sgemm_fwd", 400_000)
			}
			for i := 0; i < genBwdOps; i++ {
				kd := int64(300_000)
				if r == genSlowRank && i == 1 {
					kd = 1_500_000 // the injected fault
				}
				op("aten::mm_backward", 40_000, "sgemm_bwd", kd)
			}
			// The all-reduce: the host op launches the NCCL kernel on the
			// compute stream; it starts when the stream reaches it.
			ext[r]++
			corr[r]++
			host[r] = append(host[r], genEvent{ph: "X", cat: "cpu_op", name: "record_param_comms", tid: 100, ts: h, dur: 30_000,
				args: fmt.Sprintf(`"External id": %d, "Collective name": "allreduce", "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]", "Group size": 4, "Seq": %d`, ext[r], s)})
			l := h + 10_000
			host[r] = append(host[r], genEvent{ph: "X", cat: "cuda_runtime", name: "cudaLaunchKernel", tid: 100, ts: l, dur: 4_000,
				args: fmt.Sprintf(`"cbid": 211, "correlation": %d, "External id": %d`, corr[r], ext[r]), flow: corr[r]})
			arrive[r] = max(l+8_000, stream[r])
			now[r] = h + 40_000
		}
		end := slices.Max(arrive) + 300_000 // the ring finishes after the last member arrives
		for r := 0; r < genRanks; r++ {
			devs[r] = append(devs[r], genEvent{ph: "X", cat: "kernel", name: "ncclKernel_AllReduce_RING_LL_Sum_float", tid: 7, dev: true, ts: arrive[r], dur: end - arrive[r],
				args: fmt.Sprintf(`"device": 0, "stream": 7, "correlation": %d, "Process Group Name": "0", "Seq": %d`, corr[r], s), flow: corr[r]})
			stream[r] = end
			// The host blocks until the all-reduce is done, then steps the optimizer.
			host[r] = append(host[r], genEvent{ph: "X", cat: "cuda_runtime", name: "cudaStreamSynchronize", tid: 100, ts: now[r], dur: max(end-now[r], 1_000),
				args: `"cbid": 131`})
			h := max(end, now[r]) + 10_000
			ext[r]++
			host[r] = append(host[r], genEvent{ph: "X", cat: "cpu_op", name: "Optimizer.step#SGD.step", tid: 100, ts: h, dur: 100_000 + int64(rngs[r].IntN(4_000)),
				args: fmt.Sprintf(`"External id": %d`, ext[r])})
			now[r] = h + 120_000
			// ProfilerStep#N encloses the step's host events and precedes them.
			host[r] = slices.Insert(host[r], indexFrom(host[r], stepStart[r]), genEvent{ph: "X", cat: "user_annotation", name: fmt.Sprintf("ProfilerStep#%d", s), tid: 100,
				ts: stepStart[r], dur: now[r] - stepStart[r], args: `"External id": 0`})
		}
	}
	names := []string{"rank0.json", "rank1.json", "rank-2.json.gz", "trace_rank_3.json"}
	var paths []string
	for r := 0; r < genRanks; r++ {
		var b bytes.Buffer
		b.WriteString("{\n  \"schemaVersion\": 1,\n")
		if r <= 1 {
			fmt.Fprintf(&b, "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": %d, \"world_size\": %d},\n", r, genRanks)
		}
		b.WriteString("  \"traceEvents\": [\n")
		base := int64(0)
		if r == 0 {
			base = genEpochNS // relative ts + baseTimeNanoseconds, as newer Kineto writes
		}
		first := true
		write := func(e genEvent) {
			if !first {
				b.WriteString(",\n")
			}
			first = false
			ts := e.ts + genSkewNS[r] - base
			pid, tid := "4121", fmt.Sprint(e.tid)
			if e.dev {
				pid = "0"
			}
			fmt.Fprintf(&b, `  {"ph": "X", "cat": %q, "name": %q, "pid": %s, "tid": %s, "ts": %s, "dur": %s, "args": {%s}}`, e.cat, e.name, pid, tid, usText(ts), usText(e.dur), e.args)
			if e.flow != 0 {
				if e.dev {
					fmt.Fprintf(&b, ",\n  {\"ph\": \"f\", \"id\": %d, \"pid\": %s, \"tid\": %s, \"ts\": %s, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}", e.flow, pid, tid, usText(ts))
				} else {
					fmt.Fprintf(&b, ",\n  {\"ph\": \"s\", \"id\": %d, \"pid\": %s, \"tid\": %s, \"ts\": %s, \"cat\": \"ac2g\", \"name\": \"ac2g\"}", e.flow, pid, tid, usText(ts))
				}
			}
		}
		for _, e := range host[r] {
			write(e)
		}
		for _, e := range devs[r] {
			write(e)
		}
		b.WriteString("\n  ],\n  \"traceName\": \"" + names[r] + "\"")
		if base != 0 {
			fmt.Fprintf(&b, ",\n  \"baseTimeNanoseconds\": %d", base)
		}
		b.WriteString("\n}\n")
		data := b.Bytes()
		if strings.HasSuffix(names[r], ".gz") {
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			_, _ = zw.Write(data)
			_ = zw.Close()
			data = z.Bytes()
		}
		p := filepath.Join(dir, names[r])
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// indexFrom is the first host event at or after ts (the step's start).
func indexFrom(evs []genEvent, ts int64) int {
	for i, e := range evs {
		if e.ts >= ts {
			return i
		}
	}
	return len(evs)
}

// usText prints ns as Chrome-trace µs with 3 decimals.
func usText(ns int64) string {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	return fmt.Sprintf("%s%d.%03d", sign, ns/1000, ns%1000)
}
