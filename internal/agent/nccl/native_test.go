package nccl_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/nccl"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// buildShim builds the real shim, the stub libnccl.so and the rank program
// with the system C compiler into a temp dir (skips without one).
func buildShim(t *testing.T) (shim, rankProg string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make: the native multi-process test needs a C toolchain")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc: the native multi-process test needs a C toolchain")
	}
	src, _ := filepath.Abs("../../../native/ncclshim")
	out := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", src, "OUT="+out, out+"/liblaggard_nccl.so", out+"/rank_main", out+"/threads_main")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the shim: %v\n%s", err, b)
	}
	return filepath.Join(out, "liblaggard_nccl.so"), filepath.Join(out, "rank_main")
}

// TestNativeMultiProcess runs N processes as the ranks of one NCCL
// communicator (shared ncclUniqueId, stub libnccl.so, the real shim under
// LD_PRELOAD), drains their rings while they run, and checks the calls.
func TestNativeMultiProcess(t *testing.T) {
	shim, prog := buildShim(t)
	dir := t.TempDir()
	const world, calls = 4, 200
	uid := make([]byte, 128)
	rand.Read(uid)
	procs := make([]*exec.Cmd, world)
	for r := range world {
		cmd := exec.Command(prog)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "LAGGARD_SHM_DIR="+dir, "LAGGARD_JOB=native-job",
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", world), fmt.Sprintf("LOCAL_RANK=%d", r),
			"LGTEST_UID="+hex.EncodeToString(uid), fmt.Sprintf("LGTEST_CALLS=%d", calls), "LGTEST_LINGER_MS=300",
			"LGSTUB_SLEEP_US=200", "LGSTUB_SPLIT_SIZE=2", "LAGGARD_NCCL_RING_SLOTS=64")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = cmd
	}
	done := make(chan error, world)
	for _, p := range procs {
		go func() { done <- p.Wait() }()
	}
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Hour})
	defer c.Close()
	var gotCalls []collective.Call
	var gotComms []collective.Comm
	var dropped int64
	poll := func() {
		jobs, err := c.Poll()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.Job != "native-job" || (j.World != 0 && j.World != world) {
				t.Fatalf("job %q world %d", j.Job, j.World)
			}
			gotCalls = append(gotCalls, j.Calls...)
			gotComms = append(gotComms, j.Comms...)
			dropped += j.Dropped
		}
	}
	// a 64-slot ring and a 200 µs collective: the agent must keep up
	// while the ranks run
	for exited := 0; exited < world; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("rank exited: %v", err)
			}
			exited++
		case <-time.After(2 * time.Millisecond):
			poll()
		}
	}
	poll()
	t.Logf("%d calls, %d comm records, %d dropped", len(gotCalls), len(gotComms), dropped)
	if dropped != 0 {
		t.Logf("the ring overflowed under load (%d dropped): checks below cover what was read", dropped)
	}

	// communicators: one world comm (same id on every rank) and two halves
	ids := map[string]map[int]collective.Comm{}
	pairs := map[string]map[int]collective.Comm{}
	for _, m := range gotComms {
		if strings.Contains(m.ID, "-p2p-") {
			if pairs[m.ID] == nil {
				pairs[m.ID] = map[int]collective.Comm{}
			}
			pairs[m.ID][m.Rank] = m
			continue
		}
		if ids[m.ID] == nil {
			ids[m.ID] = map[int]collective.Comm{}
		}
		ids[m.ID][m.Rank] = m
	}
	if dropped == 0 && (len(ids) != 3 || len(gotComms) != 4*world || len(pairs) != world) {
		t.Fatalf("comms: %d ids from %d records: %+v", len(ids), len(gotComms), ids)
	}
	var worldID string
	for id, members := range ids {
		if len(members) == world {
			worldID = id
			for r, m := range members {
				if m.CommRank != r || m.Size != world || m.Parent != "" {
					t.Errorf("world comm member %+v", m)
				}
			}
		}
	}
	if worldID == "" {
		t.Fatalf("no communicator with all %d ranks: %+v", world, ids)
	}
	for id, members := range ids {
		if id == worldID {
			continue
		}
		par := -1
		for r, m := range members {
			if m.Parent != worldID || m.Size != 2 {
				t.Errorf("split member %+v", m)
			}
			if par >= 0 && r%2 != par {
				t.Errorf("split comm %s mixes parities", id)
			}
			par = r % 2
		}
	}
	// calls: per (rank, comm) the seqs are 0..n-1 with no gap or repeat
	type key struct {
		rank int
		comm string
	}
	seqs := map[key][]int64{}
	for _, cl := range gotCalls {
		if err := cl.Validate(world); err != nil {
			t.Fatalf("call %+v: %v", cl, err)
		}
		seqs[key{cl.Rank, cl.Comm}] = append(seqs[key{cl.Rank, cl.Comm}], cl.Seq)
	}
	if dropped == 0 {
		for r := range world {
			got := seqs[key{r, worldID}]
			if len(got) != calls { // the AllReduces; Send/Recv are on pairs
				t.Errorf("rank %d: %d calls on the world comm, want %d", r, len(got), calls)
			}
			// B1: rank r sends to r+1 on the directed pair r→r+1, and
			// r+1 receives it there with the same seq
			pid := nccl.PairID(mustHex(t, worldID), r, (r+1)%world)
			if s, d := seqs[key{r, pid}], seqs[key{(r + 1) % world, pid}]; len(s) != 1 || len(d) != 1 || s[0] != 0 || d[0] != 0 {
				t.Errorf("pair %s: sender seqs %v, receiver seqs %v", pid, s, d)
			}
			if m := pairs[pid]; len(m) != 2 || m[r].CommRank != 0 || m[(r+1)%world].CommRank != 1 || m[r].Parent != worldID {
				t.Errorf("pair comm %s: %+v", pid, m)
			}
			for i, s := range got {
				if s != int64(i) {
					t.Errorf("rank %d: call %d has seq %d", r, i, s)
					break
				}
			}
		}
	}
	// the same instance (comm, seq) on every rank is the same op and size
	inst := map[string]collective.Call{}
	for _, cl := range gotCalls {
		k := fmt.Sprintf("%s/%d", cl.Comm, cl.Seq)
		prev, ok := inst[k]
		same := prev.Op == cl.Op
		if cl.Op.P2P() {
			same = prev.Op != cl.Op // a Send meets its Recv
		}
		if ok && (!same || prev.Bytes != cl.Bytes) {
			t.Fatalf("instance %s differs across ranks: %+v vs %+v", k, prev, cl)
		}
		inst[k] = cl
	}
}

func mustHex(t *testing.T, id string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNativeThreadsRace races a multi-threaded C producer (the real shim
// over the stub) against the Go reader on a small ring: every record read
// must be intact (its redundant fields agree, review N2), none twice, and
// read + dropped must equal written.
func TestNativeThreadsRace(t *testing.T) {
	shim, rankProg := buildShim(t)
	prog := filepath.Join(filepath.Dir(rankProg), "threads_main")
	dir := t.TempDir()
	const threads, calls = 6, 5000
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "LAGGARD_SHM_DIR="+dir, "LAGGARD_JOB=threads", "RANK=0", "WORLD_SIZE=1",
		fmt.Sprintf("LGTEST_THREADS=%d", threads), fmt.Sprintf("LGTEST_CALLS=%d", calls), "LAGGARD_NCCL_RING_SLOTS=256",
		"LGSTUB_SLEEP_US=1") // a few µs per call: the reader keeps up with part of it, slots wrap often
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Hour})
	defer c.Close()
	seen := map[int64]bool{}
	var read, dropped int64
	poll := func() {
		jobs, err := c.Poll()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			dropped += j.Dropped
			for _, cl := range j.Calls {
				read++
				if cl.Bytes != cl.Count*4 || cl.Stream != ^uint64(cl.Count) || cl.Dtype != "float32" {
					t.Fatalf("torn record: count %#x bytes %#x stream %#x", cl.Count, cl.Bytes, cl.Stream)
				}
				if seen[cl.Count] {
					t.Fatalf("record %#x read twice", cl.Count)
				}
				seen[cl.Count] = true
			}
		}
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("producer: %v", err)
			}
			running = false
		default:
			poll()
		}
	}
	poll()
	// written: the comm's init and destroy records and every call
	if st := c.Stats(); st.Records+st.RingDropped != threads*calls+2 || st.Lost != 0 || int64(st.RingDropped) != dropped {
		t.Fatalf("read %d calls, stats %+v: records + dropped != written %d", read, st, threads*calls+2)
	}
	t.Logf("%d records read intact, %d dropped", read, dropped)
}
