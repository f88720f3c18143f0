package nccl_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/nccl"
	"github.com/laggard-dev/laggard/internal/agent/nccl/ringtest"
)

const t0 = int64(1_700_000_000_000_000_000)

func call(id uint64, seq int64, op uint16) nccl.Record {
	return nccl.Record{Op: op, Dtype: 7, CommID: id, CommRank: 1, NRanks: 2, Seq: seq, Count: 10, Bytes: 40, Peer: -1, Root: -1,
		EnterNS: t0 + seq*1000, ReturnNS: t0 + seq*1000 + 500}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	return cmd.Process.Pid
}

func TestCollectorDrainsLiveRing(t *testing.T) {
	dir := t.TempDir()
	w, err := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 3, World: 4, LocalRank: 1, Job: "run42", Host: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Append(nccl.Record{Op: nccl.OpCommInit, CommID: 0xab, CommRank: 1, NRanks: 2, Seq: -1})
	for i := range int64(5) {
		w.Append(call(0xab, i, 1))
	}
	c := nccl.NewCollector(nccl.Config{Dir: dir})
	defer c.Close()
	jobs, err := c.Poll()
	if err != nil || len(jobs) != 1 {
		t.Fatalf("poll: %v %d jobs", err, len(jobs))
	}
	j := jobs[0]
	if j.Job != "run42" || j.World != 4 || len(j.Comms) != 1 || len(j.Calls) != 5 || j.Dropped != 0 {
		t.Fatalf("job %+v", j)
	}
	if m := j.Comms[0]; m.ID != "00000000000000ab" || m.Rank != 3 || m.CommRank != 1 || m.Size != 2 || m.Host != "n1" {
		t.Fatalf("comm %+v", m)
	}
	for i, cl := range j.Calls {
		if cl.Seq != int64(i) || cl.Rank != 3 || cl.PID != os.Getpid() || cl.Comm != "00000000000000ab" {
			t.Fatalf("call %d: %+v", i, cl)
		}
	}
	// the ring is full after 8 more: the writer counts drops, the
	// collector reports the delta once
	for i := int64(5); i < 20; i++ {
		w.Append(call(0xab, i, 2))
	}
	jobs, _ = c.Poll()
	if len(jobs[0].Calls) != 8 || jobs[0].Dropped != 7 || w.Dropped() != 7 {
		t.Fatalf("second poll: %d calls, dropped %d (ring %d)", len(jobs[0].Calls), jobs[0].Dropped, w.Dropped())
	}
	jobs, _ = c.Poll()
	if len(jobs) != 1 || len(jobs[0].Calls) != 0 || jobs[0].Dropped != 0 {
		t.Fatalf("third poll not empty: %+v", jobs)
	}
	// pause reaches the producer's header; Locals lists it
	if ls := c.Locals(); len(ls) != 1 || ls[0].Rank != 3 || ls[0].LocalRank != 1 {
		t.Fatalf("locals %+v", ls)
	}
	a := c.Arm("run42", 3, 1500*time.Millisecond)
	if a.Rings() != 1 {
		t.Fatalf("Arm trapped %d rings", a.Rings())
	}
	if on, ms := w.Pause(); !on || ms != 1500 || w.PauseGen() != 1 {
		t.Fatalf("pause %v %d gen %d", on, ms, w.PauseGen())
	}
	if c.Release(a) != 1 {
		t.Fatal("release")
	}
	if on, _ := w.Pause(); on || w.PauseGen() != 2 {
		t.Fatalf("pause not released: gen %d", w.PauseGen())
	}
	// R9: a late release of an older plan must not clear a newer one
	a1 := c.Arm("run42", 3, time.Second)
	a2 := c.Arm("run42", 3, time.Second)
	if c.Release(a1) != 0 {
		t.Fatal("an old generation released a newer one")
	}
	if on, _ := w.Pause(); !on {
		t.Fatal("the newer plan's trap was cleared")
	}
	_ = a2
	c.Close()
	if on, _ := w.Pause(); on {
		t.Fatal("Close left the trap armed")
	}
	if s := c.Stats(); s.Calls != 13 || s.RingDropped != 7 {
		t.Fatalf("stats %+v", s)
	}
}

// R1/B7: a slot reserved but not published is never skipped while the
// producer lives (skipping it could tear a record); once the producer is
// gone it is counted as lost at once and the records after it are read.
func TestCollectorStalledSlotWaitsForLiveProducer(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 16, PID: uint32(os.Getpid()), Rank: 0, World: 1, Job: "j"})
	defer w.Close()
	w.Append(call(1, 0, 1))
	w.Reserve() // a writer that stalls mid-record
	w.Append(call(1, 2, 1))
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Hour})
	defer c.Close()
	var calls, dropped int
	poll := func() {
		jobs, _ := c.Poll()
		for _, j := range jobs {
			calls += len(j.Calls)
			dropped += int(j.Dropped)
		}
	}
	for range 200 {
		poll()
	}
	if calls != 1 || dropped != 0 || c.Stats().Lost != 0 {
		t.Fatalf("live producer: calls %d dropped %d stats %+v", calls, dropped, c.Stats())
	}
	w.Exit() // the producer dies with the slot unwritten
	poll()
	if calls != 2 || dropped != 1 || c.Stats().Lost != 1 {
		t.Fatalf("dead producer: calls %d dropped %d stats %+v", calls, dropped, c.Stats())
	}
}

// B3: a pause armed by an agent that died is released when a new agent
// attaches; a pause this agent arms later works normally.
func TestCollectorClearsStalePauseOnAttach(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 0, World: 1, Job: "j"})
	defer w.Close()
	w.SetPauseGen(7) // armed by the previous agent
	c := nccl.NewCollector(nccl.Config{Dir: dir})
	defer c.Close()
	c.Poll()
	if on, _ := w.Pause(); on || w.PauseGen() != 8 || c.Stats().StaleCleared != 1 {
		t.Fatalf("stale pause kept: gen %d stats %+v", w.PauseGen(), c.Stats())
	}
	if a := c.Arm("j", 0, time.Second); a.Rings() != 1 || w.PauseGen() != 9 {
		t.Fatalf("arm after clear: gen %d", w.PauseGen())
	}
}

// B4a: liveness is the producer's flock, not its pid: a header pid that
// names no process here (another PID namespace) is still a live ring.
func TestCollectorLivenessIgnoresPID(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(deadPID(t)), Rank: 2, World: 4, Job: "j"})
	defer w.Close()
	now := time.Now()
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Second, Now: func() time.Time { return now }})
	defer c.Close()
	c.Poll()
	now = now.Add(time.Hour)
	c.Poll()
	if _, err := os.Stat(w.Path); err != nil {
		t.Fatalf("live ring removed: %v", err)
	}
	if ls := c.Locals(); len(ls) != 1 || ls[0].Rank != 2 {
		t.Fatalf("live ring not a validation target: %+v", ls)
	}
}

// B4b: a new ring that took a retired ring's path is not removed with it.
func TestCollectorNeverRemovesAReplacedFile(t *testing.T) {
	dir := t.TempDir()
	old, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: 1234, Rank: 0, World: 1, Job: "j"})
	now := time.Now()
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Minute, Now: func() time.Time { return now }})
	defer c.Close()
	c.Poll()
	old.Close() // producer gone
	c.Poll()
	// a new live ring appears at the very same path
	nw, _ := ringtest.Create(t.TempDir(), nccl.Header{Capacity: 8, PID: 1234, Rank: 0, World: 1, Job: "j"})
	defer nw.Close()
	if err := os.Rename(nw.Path, old.Path); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	c.Poll()
	if _, err := os.Stat(old.Path); err != nil {
		t.Fatalf("the new ring at the old path was removed: %v", err)
	}
	c.Poll()
	if ls := c.Locals(); len(ls) != 1 {
		t.Fatalf("the new ring is not mapped: %+v", ls)
	}
}

// R3: files writable by others and symlinks are refused; a ring whose
// file shrinks under the agent is dropped, not read (SIGBUS).
func TestCollectorRefusesUntrustedAndShrunkFiles(t *testing.T) {
	dir := t.TempDir()
	bad, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 0, World: 1, Job: "evil"})
	defer bad.Close()
	bad.Append(call(1, 0, 1))
	os.Chmod(bad.Path, 0o666)
	target, _ := ringtest.Create(t.TempDir(), nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 0, World: 1, Job: "evil"})
	defer target.Close()
	target.Append(call(1, 0, 1))
	os.Symlink(target.Path, filepath.Join(dir, nccl.FilePrefix+"77.1"))
	good, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 1, World: 2, Job: "ok"})
	defer good.Close()
	good.Append(call(1, 0, 1))
	c := nccl.NewCollector(nccl.Config{Dir: dir})
	defer c.Close()
	jobs, _ := c.Poll()
	if len(jobs) != 1 || jobs[0].Job != "ok" || c.Stats().Refused != 1 {
		t.Fatalf("jobs %+v stats %+v", jobs, c.Stats())
	}
	if err := os.Truncate(good.Path, 100); err != nil {
		t.Fatal(err)
	}
	jobs, _ = c.Poll()
	if (len(jobs) != 0 && len(jobs[0].Calls) != 0) || c.Stats().Broken != 1 || c.Stats().Rings != 0 {
		t.Fatalf("after truncation: jobs %+v stats %+v", jobs, c.Stats())
	}
}

// B1: Send/Recv translate to their directed pair's comm, announced once.
func TestCollectorP2PPairs(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 16, PID: uint32(os.Getpid()), Rank: 5, World: 8, Job: "j"})
	defer w.Close()
	send := call(0xab, 0, 7)
	send.Peer = 0
	recv := call(0xab, 0, 8)
	recv.Peer = 0
	send2 := send
	send2.Seq = 1
	w.Append(send)
	w.Append(recv)
	w.Append(send2)
	w.Append(call(0xab, 0, 1))
	c := nccl.NewCollector(nccl.Config{Dir: dir})
	defer c.Close()
	jobs, _ := c.Poll()
	if len(jobs) != 1 || len(jobs[0].Calls) != 4 {
		t.Fatalf("jobs %+v", jobs)
	}
	got := []string{}
	for _, cl := range jobs[0].Calls {
		got = append(got, fmt.Sprintf("%s/%d", cl.Comm, cl.Seq))
	}
	want := []string{"00000000000000ab-p2p-1-0/0", "00000000000000ab-p2p-0-1/0", "00000000000000ab-p2p-1-0/1", "00000000000000ab/0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	cs := jobs[0].Comms
	if len(cs) != 2 || cs[0].ID != want[0][:len(want[0])-2] || cs[0].CommRank != 0 || cs[1].CommRank != 1 || cs[0].Size != 2 || cs[0].Parent != "00000000000000ab" || cs[0].Rank != 5 {
		t.Fatalf("pair comms %+v", cs)
	}
}

func TestCollectorRetiresDeadProducer(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: 1, World: 2, Job: "j"})
	w.Append(call(1, 0, 1))
	w.Close() // drops the producer's flock
	// junk that is not a ring, and a half-created ring nobody holds
	os.WriteFile(filepath.Join(dir, "other-file"), nil, 0o600)
	half := filepath.Join(dir, nccl.FilePrefix+"4194301.1")
	os.WriteFile(half, make([]byte, 100), 0o600)
	now := time.Now()
	c := nccl.NewCollector(nccl.Config{Dir: dir, Grace: time.Minute, Now: func() time.Time { return now }})
	defer c.Close()
	jobs, _ := c.Poll()
	if len(jobs) != 1 || len(jobs[0].Calls) != 1 {
		t.Fatalf("dead producer's records not drained: %+v", jobs)
	}
	if len(c.Locals()) != 0 {
		t.Fatal("a dead producer is not a validation target")
	}
	if _, err := os.Stat(w.Path); err != nil {
		t.Fatal("removed before the grace")
	}
	now = now.Add(2 * time.Minute)
	os.Chtimes(half, now.Add(-time.Hour), now.Add(-time.Hour))
	c.Poll()
	if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
		t.Fatalf("stale ring kept: %v", err)
	}
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Fatalf("stale half ring kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other-file")); err != nil {
		t.Fatal("removed a file that is not a ring")
	}
	if c.Stats().Removed != 2 {
		t.Fatalf("stats %+v", c.Stats())
	}
}

func TestCollectorJobFallback(t *testing.T) {
	dir := t.TempDir()
	w, _ := ringtest.Create(dir, nccl.Header{Capacity: 8, PID: uint32(os.Getpid()), Rank: -1, World: -1})
	defer w.Close()
	w.Append(nccl.Record{Op: nccl.OpCommInitAll, CommID: 5, CommRank: 1, NRanks: 3, Seq: -1})
	w.Append(call(5, 0, 1))
	c := nccl.NewCollector(nccl.Config{Dir: dir})
	jobs, _ := c.Poll()
	c.Close()
	if len(jobs) != 0 || c.Stats().Unattributed != 2 {
		t.Fatalf("no job: %+v %+v", jobs, c.Stats())
	}
	w.Append(call(5, 1, 1))
	c = nccl.NewCollector(nccl.Config{Dir: dir, DefaultJob: "fallback"})
	defer c.Close()
	jobs, _ = c.Poll()
	if len(jobs) != 1 || jobs[0].Job != "fallback" || len(jobs[0].Calls) != 1 || jobs[0].Calls[0].Rank != 1 || jobs[0].World != 0 {
		t.Fatalf("fallback job: %+v", jobs)
	}
}

func TestCollectorMissingDir(t *testing.T) {
	c := nccl.NewCollector(nccl.Config{Dir: filepath.Join(t.TempDir(), "nope")})
	if _, err := c.Poll(); err == nil {
		t.Fatal("missing dir: no error")
	}
}
