"""Collective capture (laggard.collectives) on real gloo jobs of 1-3
processes against the fake server: records per contract, the same
(comm, seq) instances on every member, comm membership, DDP buckets, the
step field, unpatching, and a dead server never blocking training.

The worker side lives in this file too (`python3 test_collectives.py
--worker SCENARIO RANK WORLD PORT SERVER JOB`); test_validation.py uses it.
Skipped without torch (run with /usr/bin/python3)."""

import importlib.util
import json
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

HAVE_TORCH = importlib.util.find_spec("torch") is not None

from envutil import module_fixture  # noqa: E402

setUpModule, tearDownModule = module_fixture()


# --- worker side -----------------------------------------------------------

def _worker(scenario, rank, world, port, server, job):
    import datetime
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import laggard
    from laggard import shipper as shipper_mod

    shipper_mod._VAL_POLL_S = 0.2  # tests do not wait 2 s per poll
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    originals = {n: getattr(dist, n) for n in ("all_reduce", "broadcast", "barrier", "isend", "send")}
    out = {"rank": rank}
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    validation = scenario.startswith("validation")
    perf = laggard.Perf(server=server, job=job, rank=rank, world_size=world, local_rank=rank, enabled=True,
                        flush_interval=0.2, timeout=1.0, collectives=True, ddp=model, validation=validation,
                        validation_timeout=20.0)
    out["patched"] = dist.all_reduce is not originals["all_reduce"]
    if validation:
        perf._validator._agree_timeout_s = 1.5  # the missed-plan case waits this long
        unable = os.environ.get("LAGGARD_TEST_UNABLE", "")  # "rank:vid": that rank cannot take part in vid
        if unable and int(unable.split(":")[0]) == rank:
            v, vid, real_run = perf._validator, unable.split(":", 1)[1], perf._validator.run
            v.run = lambda plan: v._unable(plan, "test: cannot take part") if plan["id"] == vid else real_run(plan)
    sub = dist.new_group([0, 1]) if world > 1 else None

    def train_step():
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    t0 = time.perf_counter()
    if scenario == "capture":
        sub2 = dist.new_group([1, 2])  # group ranks differ from global ranks here
        t = torch.ones(10)
        dist.all_reduce(t)  # outside a step: step -1
        for s in range(3):
            with perf.step():
                train_step()
                dist.broadcast(torch.zeros(5, dtype=torch.float64), src=1)
                gl = [torch.zeros(3) for _ in range(world)]
                dist.all_gather(gl, torch.ones(3))
                if rank in (0, 1):
                    dist.all_reduce(torch.ones(7), group=sub)
                    if rank == 0:
                        dist.send(torch.ones(4), dst=1)
                        dist.isend(torch.ones(6), dst=1).wait()
                    else:
                        dist.recv(torch.zeros(4), src=0)
                        dist.irecv(torch.zeros(6), src=0).wait()
                    # B2: both ranks send first (as pipeline stages do), 8
                    # floats 0->1 and 9 floats 1->0: each direction is its
                    # own comm, so (comm, seq) pairs a Send with its Recv.
                    peer = 1 - rank
                    w = dist.isend(torch.ones(8 + rank), dst=peer)
                    dist.recv(torch.zeros(9 - rank), src=peer)
                    w.wait()
                if rank == 2:
                    dist.send(torch.ones(3), dst=1, group=sub2)
                elif rank == 1:
                    dist.recv(torch.zeros(3), src=2, group=sub2)
                dist.all_reduce(torch.ones(2), async_op=True).wait()
                dist.barrier()
        out["capture"] = perf._capture.stats()
    elif scenario == "down":
        for s in range(20):
            with perf.step():
                train_step()
                dist.all_reduce(torch.ones(10))
    elif validation:
        # Until the test's server says every plan is done (a file appears),
        # decided by rank 0 and shared with one all_reduce so every rank
        # stops after the same step.
        stop_file = os.environ["LAGGARD_TEST_STOP"]
        for s in range(int(os.environ.get("LAGGARD_TEST_STEPS", "400"))):
            with perf.step():
                train_step()
                time.sleep(0.03)
                flag = torch.tensor([1.0 if rank == 0 and os.path.exists(stop_file) else 0.0])
                dist.all_reduce(flag)
            if flag.item() > 0:
                break
        out["steps"] = s + 1
        # Results are posted by the shipper; give it the time to do so.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (perf._validator._outbox or perf._shipper._vres):
            time.sleep(0.05)
        out["validation"] = perf._validator.stats()
    out["train_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    perf.close(timeout=3)
    out["close_s"] = time.perf_counter() - t1
    out["stats"] = perf.stats()
    out["restored"] = all(getattr(dist, n) is o for n, o in originals.items()) and \
        dist.distributed_c10d.all_reduce is originals["all_reduce"]
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(out, default=str), flush=True)


def run_job(scenario, world, server, job, timeout=50, env=None):
    """Starts `world` worker processes; returns their RESULT dicts (by rank)."""
    from fakeserver import free_port
    port = free_port()
    e = dict(os.environ, **(env or {}))
    for k in ("LAGGARD_COLLECTIVES", "LAGGARD_VALIDATION", "LAGGARD_DISABLED", "LAGGARD_ENABLED"):
        e.pop(k, None)
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", scenario, str(r), str(world),
                               str(port), server, job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=e) for r in range(world)]
    results, errs = {}, []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("worker timed out")
        for line in so.splitlines():
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["rank"]] = r
        if p.returncode != 0:
            errs.append(se[-3000:])
    if errs:
        raise AssertionError("worker failed:\n" + "\n".join(errs))
    return results


# --- tests -------------------------------------------------------------------

@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class CaptureJobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from fakeserver import FakeServer
        cls.srv = FakeServer()
        cls.world = 3
        cls.results = run_job("capture", cls.world, cls.srv.url, "coll-job")
        cls.calls = cls.srv.calls()
        cls.comms = cls.srv.comms()

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def test_batches_valid_and_nothing_dropped(self):
        self.assertEqual(self.srv.bad_collectives, [])
        self.assertTrue(self.calls)
        for r in self.results.values():
            self.assertTrue(r["patched"])
            st = r["stats"]["collectives"]
            self.assertEqual((st["dropped"], st["errors"]), (0, 0), st)
            self.assertEqual(st["sent"], st["captured"])
        posts = [r for r in self.srv.requests if "/collectives" in r["path"]]
        self.assertTrue(all(r["path"].endswith("?world=3") for r in posts))
        self.assertTrue(all(r["content_type"] == "application/json" for r in posts))

    def test_instances_agree_across_members(self):
        comm_members = {c["id"]: c["ranks"] for c in self.comms}
        inst = {}
        for c in self.calls:
            inst.setdefault((c["comm"], c["seq"]), {})[c["rank"]] = c
        self.assertTrue(inst)
        for (comm, seq), by_rank in inst.items():
            self.assertEqual(sorted(by_rank), sorted(comm_members[comm]), (comm, seq))
            if "-p2p-" in comm:  # B2: the Send at ranks[0], its Recv at ranks[1], the same message
                src, dst = comm_members[comm]
                self.assertEqual((by_rank[src]["op"], by_rank[dst]["op"]), ("Send", "Recv"), (comm, seq))
                self.assertEqual((by_rank[src]["peer"], by_rank[dst]["peer"]), (dst, src), (comm, seq))
                self.assertEqual(by_rank[src]["bytes"], by_rank[dst]["bytes"], (comm, seq))
            else:
                ops = {(c["op"], c["bytes"]) for c in by_rank.values()}
                self.assertEqual(len(ops), 1, (comm, seq, by_rank))
            steps = {c["step"] for c in by_rank.values()}
            self.assertEqual(len(steps), 1, (comm, seq, steps))
        for rank in range(self.world):  # seqs are dense per (rank, comm)
            per = {}
            for c in self.calls:
                if c["rank"] == rank:
                    per.setdefault(c["comm"], []).append(c["seq"])
            for comm, seqs in per.items():
                self.assertEqual(sorted(seqs), list(range(len(seqs))), (rank, comm))

    def test_comm_records(self):
        world = [c for c in self.comms if c["id"] == "pg0-world"]
        self.assertEqual(sorted(c["rank"] for c in world), [0, 1, 2])
        for c in world:
            self.assertEqual((c["size"], c["ranks"], c["comm_rank"], c["backend"]), (3, [0, 1, 2], c["rank"], "gloo"))
        sub = [c for c in self.comms if c["id"].startswith("pg") and c["ranks"] == [0, 1] and "p2p" not in c["id"]]
        self.assertEqual(sorted(c["rank"] for c in sub), [0, 1])
        self.assertEqual(len({c["id"] for c in sub}), 1)  # the same id on both members
        pair = [c for c in self.comms if c["id"] == "pg0-world-p2p-0-1"]
        self.assertEqual(sorted((c["rank"], c["comm_rank"], c["ranks"], c["parent"]) for c in pair),
                         [(0, 0, [0, 1], "pg0-world"), (1, 1, [0, 1], "pg0-world")])
        back = [c for c in self.comms if c["id"] == "pg0-world-p2p-1-0"]  # the other direction
        self.assertEqual(sorted((c["rank"], c["comm_rank"], c["ranks"], c["parent"]) for c in back),
                         [(0, 1, [1, 0], "pg0-world"), (1, 0, [1, 0], "pg0-world")])
        # On the [1, 2] group, 2 -> 1 is group ranks 1 -> 0: the id uses
        # group ranks (what the NCCL shim sees), the record global ones.
        sub2 = [c for c in self.comms if c.get("parent", "").startswith("pg") and c["ranks"] == [2, 1]]
        self.assertEqual(len(sub2), 2)
        parent = sub2[0]["parent"]
        self.assertEqual(sorted((c["id"], c["rank"], c["comm_rank"]) for c in sub2),
                         [(parent + "-p2p-1-0", 1, 1), (parent + "-p2p-1-0", 2, 0)])
        self.assertEqual(sorted(c["rank"] for c in self.comms if c["id"] == parent), [1, 2])
        self.assertEqual(len([c for c in self.comms if "-p2p-" in c["id"]]), 6)  # each sent once per rank

    def test_ops_fields_and_steps(self):
        mine = [c for c in self.calls if c["rank"] == 1 and c["comm"] == "pg0-world"]
        mine.sort(key=lambda c: c["seq"])
        self.assertEqual((mine[0]["op"], mine[0]["step"], mine[0]["bytes"], mine[0]["dtype"]),
                         ("AllReduce", -1, 40, "float32"))
        # Per step: DDP bucket, broadcast, all_gather, async all_reduce, barrier.
        per_step = [c["op"] for c in mine if c["step"] == 0]
        self.assertEqual(per_step, ["AllReduce", "Broadcast", "AllGather", "AllReduce", "Barrier"])
        self.assertEqual(sorted({c["step"] for c in mine}), [-1, 0, 1, 2])
        bc = [c for c in mine if c["op"] == "Broadcast"][0]
        self.assertEqual((bc["root"], bc["bytes"], bc["dtype"], bc["count"]), (1, 40, "float64", 5))
        ag = [c for c in mine if c["op"] == "AllGather"][0]
        self.assertEqual(ag["bytes"], 12)  # the send buffer (contracts §0)
        for c in self.calls:
            self.assertEqual(c["pid"] > 0, True)
            self.assertGreaterEqual(c["return_ns"], c["enter_ns"])
            if c["op"] not in ("Send", "Recv") or "dev_start_ns" in c:
                self.assertEqual(c["dev_start_ns"], c["enter_ns"])  # gloo: the host bracket
                self.assertGreaterEqual(c["dev_end_ns"], c["dev_start_ns"])

    def test_ddp_buckets_captured_async(self):
        params = 8 * 4 + 4
        buckets = [c for c in self.calls if c["op"] == "AllReduce" and c["bytes"] == params * 4 and c["step"] >= 0]
        self.assertEqual(sorted({(c["rank"], c["step"]) for c in buckets}),
                         [(r, s) for r in range(3) for s in range(3)])
        for c in buckets:
            self.assertGreater(c["dev_end_ns"], 0)  # completion from the work's future
            self.assertGreaterEqual(c["dev_end_ns"], c["return_ns"] - 1)

    def test_p2p_on_directed_comms(self):
        p2p = [c for c in self.calls if c["op"] in ("Send", "Recv")]
        self.assertEqual(sorted((c["rank"], c["comm"], c["seq"], c["op"], c["peer"], c["bytes"]) for c in p2p
                                if c["step"] == 0 and c["comm"].startswith("pg0-world")),
                         [(0, "pg0-world-p2p-0-1", 0, "Send", 1, 16), (0, "pg0-world-p2p-0-1", 1, "Send", 1, 24),
                          (0, "pg0-world-p2p-0-1", 2, "Send", 1, 32), (0, "pg0-world-p2p-1-0", 0, "Recv", 1, 36),
                          (1, "pg0-world-p2p-0-1", 0, "Recv", 0, 16), (1, "pg0-world-p2p-0-1", 1, "Recv", 0, 24),
                          (1, "pg0-world-p2p-0-1", 2, "Recv", 0, 32), (1, "pg0-world-p2p-1-0", 0, "Send", 0, 36)])
        self.assertTrue(all(c["root"] == -1 for c in p2p))
        on_sub2 = sorted((c["rank"], c["op"], c["peer"], c["seq"]) for c in p2p
                         if c["step"] == 1 and not c["comm"].startswith("pg0-world"))
        self.assertEqual(on_sub2, [(1, "Recv", 2, 1), (2, "Send", 1, 1)])
        sync = [c for c in p2p if c["bytes"] == 16]
        self.assertTrue(all("dev_end_ns" in c for c in sync))
        async_ = [c for c in p2p if c["bytes"] == 24]
        self.assertTrue(all("dev_end_ns" not in c for c in async_))  # no future for gloo send/recv works

    def test_unpatched_after_close(self):
        for r in self.results.values():
            self.assertTrue(r["restored"], r)


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class ServerDownTest(unittest.TestCase):
    def test_dead_server_never_blocks(self):
        from fakeserver import free_port
        url = "http://127.0.0.1:%d" % free_port()  # nothing listens
        res = run_job("down", 1, url, "down-job")[0]
        self.assertLess(res["train_s"], 10)
        self.assertLess(res["close_s"], 3.5)
        st = res["stats"]
        self.assertEqual(st["collectives"]["errors"], 0)
        self.assertGreater(st["collectives"]["captured"], 0)
        self.assertEqual(st["collectives"]["sent"], 0)
        self.assertTrue(res["restored"])


def _fake_record(seq, step=0):
    from laggard import collectives as c
    t = 1_700_000_000_000_000_000 + seq * 1000
    return [json.dumps("pg0-world"), seq, c.ALL_REDUCE, 400, 100, "float32", -1, -1, t, t + 500, t, t + 500, step]


class ShipperTest(unittest.TestCase):
    """The shipper side without torch: batches, drops carried in `dropped`,
    a server without the endpoint, env switches."""

    def make(self, behaviour=None, queue=10):
        from fakeserver import FakeServer
        from laggard import collectives as c
        from laggard.shipper import Shipper
        from laggard.sinks import HTTPSink
        srv = FakeServer(behaviour=behaviour)
        self.addCleanup(srv.close)
        cap = c.Capture(queue_size=queue)
        cap.rank = 0
        job = {"id": "sj", "name": "sj", "world_size": 2, "schema": __import__("laggard").default_schema(),
               "accumulation": 1, "labels": {}}
        rank = {"rank": 0, "host": "h", "local_rank": 0, "role": {"dp": 0, "tp": -1, "pp": -1, "ep": -1}}
        sh = Shipper(HTTPSink(srv.url, "sj", timeout=1.0), job, rank, flush_interval=0.05, collectives=cap)
        return srv, cap, sh

    def test_batch_and_queue_drops(self):
        srv, cap, sh = self.make()
        cap._add_comm(__import__("laggard").collectives._Comm("pg0-world", [0, 1], 0, "gloo"), None)
        for i in range(12):  # two over the queue's bound
            cap._put(_fake_record(i))
        self.assertTrue(sh.close(3))
        calls = srv.calls()
        self.assertEqual([c["seq"] for c in calls], list(range(10)))
        self.assertEqual(srv.bad_collectives, [])
        self.assertEqual(srv.comms()[0]["ranks"], [0, 1])
        self.assertEqual(sum(b.get("dropped", 0) for b in srv.collective_batches()), 2)
        self.assertEqual(sh.stats()["collectives_dropped"], 2)

    def test_failed_batch_counted_in_next(self):
        def behaviour(method, path, n):
            if "/collectives" in path and n == 0:
                return (500, {}, {"error": "boom"}, 0)
            return None
        srv, cap, sh = self.make(behaviour)
        for i in range(3):
            cap._put(_fake_record(i))
        deadline = time.monotonic() + 5
        while sh.coll_drops < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        for i in range(3, 5):
            cap._put(_fake_record(i))
        self.assertTrue(sh.close(5))
        got = srv.collective_batches()
        self.assertEqual([c["seq"] for c in srv.calls()], [3, 4])
        self.assertEqual(got[-1]["dropped"], 3)

    def test_missing_endpoint_stops_only_collectives(self):
        def behaviour(method, path, n):
            return (404, {}, {"error": "no route"}, 0) if "/collectives" in path else None
        srv, cap, sh = self.make(behaviour)
        for k in range(3):
            cap._put(_fake_record(k))
            deadline = time.monotonic() + 5
            while len(cap) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # past the backoff
        deadline = time.monotonic() + 5
        while not sh._coll_dead and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(sh._coll_dead)
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(sh.close(3))
        self.assertEqual(len(srv.vectors()), 1)

    def wait_for(self, cond, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.01)
        return cond()

    def test_refused_comm_dropped_others_kept(self):
        # B6: a 400 naming comms[i] drops that record (counted); the calls
        # and the other comms of the batch go again at once, and records
        # the server acknowledged are never re-sent.
        from laggard import collectives as c
        srv, cap, sh = self.make()
        srv.refuse_comm = lambda m: "unknown communicator" if m["id"] == "bad" else None
        cap._add_comm(c._Comm("pg0-world", [0, 1], 0, "gloo"), None)
        cap._add_comm(c._Comm("bad", [0, 1], 0, "gloo"), None)
        for i in range(3):
            cap._put(_fake_record(i))
        self.assertTrue(self.wait_for(lambda: len(srv.calls()) == 3))
        cap._add_comm(c._Comm("pg1-abc", [0, 1], 0, "gloo"), None)
        for i in range(3, 5):
            cap._put(_fake_record(i))
        self.assertTrue(self.wait_for(lambda: len(srv.calls()) == 5))
        for i in range(5, 7):  # a later batch carries no comm at all
            cap._put(_fake_record(i))
        self.assertTrue(sh.close(3))
        self.assertEqual([x["seq"] for x in srv.calls()], list(range(7)))
        self.assertEqual([m["id"] for m in srv.comms()], ["pg0-world", "pg1-abc"])  # each once
        refused = [r for r in srv.requests if "/collectives" in r["path"] and r["status"] == 400]
        self.assertEqual(len(refused), 1)
        self.assertTrue(all("_refused" not in m for b in srv.collective_batches(False) for m in b["comms"]))
        st = sh.stats()
        self.assertEqual((st["comms_dropped"], st["comms_sent"], st["collectives_dropped"]), (1, 2, 0))

    def test_unnamed_refusals_drop_comm_after_tries(self):
        # A 400 naming nothing: the comm record survives a few of them, then
        # it is dropped and counted, and later batches go through.
        from laggard import collectives as c
        from laggard import shipper as sm

        def behaviour(method, path, n):
            if "/collectives" in path and n < sm._COMM_TRIES:
                return (400, {}, {"error": "bad batch"}, 0)
            return None
        srv, cap, sh = self.make(behaviour)
        cap._add_comm(c._Comm("weird", [0, 1], 0, "gloo"), None)
        cap._put(_fake_record(0))
        self.assertTrue(self.wait_for(lambda: sh.comm_drops == 1))
        cap._put(_fake_record(1))
        cap._put(_fake_record(2))
        self.assertTrue(sh.close(3))
        self.assertEqual([x["seq"] for x in srv.calls()], [1, 2])
        self.assertEqual(srv.comms(), [])
        self.assertEqual(srv.collective_batches()[-1]["dropped"], 1)  # the first call, refused with it
        self.assertEqual(sh.stats()["comms_dropped"], 1)

    def test_collectives_backlog_does_not_starve_vectors(self):
        # R10: a slow server and a long collectives backlog (80 POSTs of
        # 50 ms); stage vectors offered now still ship within a second.
        srv, cap, sh = self.make(queue=1000)
        srv.coll_delay = 0.05
        sh._cbatch_size = 5
        for i in range(400):
            cap._put(_fake_record(i))
        self.assertTrue(self.wait_for(lambda: len(srv.collective_batches()) >= 2))
        t0 = time.monotonic()
        for s in range(3):
            sh.offer((s, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(self.wait_for(lambda: len(srv.vectors()) == 3, timeout=3.0))
        took = time.monotonic() - t0
        coll_posts = len(srv.collective_batches())
        self.assertLess(took, 1.5)
        self.assertLess(coll_posts, 60, "collectives drained first: vectors waited for the backlog")
        sh.close(0.5)

    def test_env_switches(self):
        from laggard import config
        self.assertEqual(config.from_env({"LAGGARD_COLLECTIVES": "1", "LAGGARD_VALIDATION": "no"}),
                         {"collectives": True, "validation": False})
        self.assertEqual(config.from_env({"LAGGARD_COLLECTIVES": "maybe"}), {})


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class InProcessTest(unittest.TestCase):
    """Single-process checks: ids, patch/unpatch, a session switch."""

    def test_group_ids(self):
        from laggard import collectives as c
        self.assertEqual(c.group_id("0", [0, 1, 2], default=True), "pg0-world")
        a, b = c.group_id("3", [2, 0]), c.group_id("3", [0, 2])
        self.assertEqual(a, b)
        self.assertRegex(a, r"^pg3-[0-9a-f]{8}$")
        self.assertNotEqual(c.group_id("3", [0, 1]), a)
        self.assertEqual(c.pair_id("pg0-world", 3, 1), "pg0-world-p2p-3-1")  # directed (B2)
        self.assertEqual(c.pair_id("pg0-world", 1, 3), "pg0-world-p2p-1-3")

    def test_shim_leaves_nccl_groups(self):
        # R7: under the NCCL shim a nccl group is the shim's (not captured
        # twice), a gloo group is still captured, a mixed group is captured
        # for CPU tensors only; said once in the log.
        from laggard import collectives as c
        self.assertTrue(c.shim_loaded({"LD_PRELOAD": "/opt/x/libfoo.so:/opt/laggard/liblaggard_nccl.so"}))
        self.assertFalse(c.shim_loaded({"LD_PRELOAD": "/opt/x/libfoo.so"}))
        self.assertFalse(c.shim_loaded({}))
        d = _StubDist({"nccl": "nccl", "gloo": "gloo", "mixed": "cpu:gloo,cuda:nccl"})
        for shim in (True, False):
            cap = c.Capture()
            cap.shim = shim
            with self.assertLogs("laggard", "INFO") if shim else _no_logs(self) as logs:
                got = {g: cap._resolve(d, g) for g in ("nccl", "gloo", "mixed")}
            self.assertIs(got["nccl"] is c._SKIP, shim)
            self.assertIsNot(got["gloo"], c._SKIP)
            self.assertIsNot(got["mixed"], c._SKIP)
            if shim:
                self.assertEqual(len([m for m in logs.output if "shim" in m]), 1)  # once
            spec, pos = c._SPECS["all_reduce"], {"tensor": 0, "op": 1, "group": 2, "async_op": 3}
            cap._comms.update(got)
            for g, dev, want in (("gloo", True, True), ("mixed", False, True), ("mixed", True, not shim),
                                 ("nccl", True, not shim)):
                rec = cap.enter(spec, pos, (_FakeTensor(dev),), {"group": g})
                self.assertEqual(rec is not None, want, (shim, g, dev))
            self.assertEqual(cap.errors, 0, cap.last_error)

    def test_patch_unpatch_and_no_torch_side_effects(self):
        import torch.distributed as dist
        from laggard import collectives as c
        orig = dist.all_reduce, dist.distributed_c10d.barrier
        cap = c.Capture()
        self.assertTrue(cap.start())
        self.assertIsNot(dist.all_reduce, orig[0])
        self.assertIs(dist.all_reduce.__wrapped__, orig[0])
        self.assertEqual(dist.all_reduce.__name__, "all_reduce")
        cap2 = c.Capture()
        cap2.start()  # the newer session takes over; patches stay once
        cap.stop()
        self.assertIsNot(dist.all_reduce, orig[0])
        cap2.stop()
        self.assertEqual((dist.all_reduce, dist.distributed_c10d.barrier), orig)
        self.assertFalse(c.is_installed())

    def test_uninitialised_pg_call_raises_torchs_error(self):
        import torch
        import torch.distributed as dist
        from laggard import collectives as c
        cap = c.Capture()
        cap.start()
        try:
            with self.assertRaises(RuntimeError):  # torch's own error passes through unchanged
                dist.all_reduce(torch.ones(1))
        finally:
            cap.stop()
        self.assertEqual(cap.captured, 0)


class _StubDist:
    """Just enough of torch.distributed for Capture._resolve: groups are
    names, each with a backend."""

    def __init__(self, backends):
        import types
        self._b = backends
        gm = types.SimpleNamespace(WORLD=object(), NON_GROUP_MEMBER=object())
        self.distributed_c10d = types.SimpleNamespace(GroupMember=gm, _pg_names={g: g for g in backends})

    def get_rank(self):
        return 0

    def get_world_size(self):
        return 2

    def get_backend(self, g):
        return self._b[g]

    def get_process_group_ranks(self, g):
        return [0, 1]


class _FakeTensor:
    dtype = "torch.float32"

    def __init__(self, cuda):
        self.is_cuda = cuda

    def numel(self):
        return 4

    def element_size(self):
        return 4


class _no_logs:
    def __init__(self, tc):
        pass

    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sc, r, w, port, server, job = sys.argv[2:8]
        _worker(sc, int(r), int(w), int(port), server, job)
    else:
        unittest.main()
