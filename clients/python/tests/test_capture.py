"""KAIR operator-trace captures (laggard.capture, contracts C/D): plan
checks, the poller's stop rules and heartbeats, the env switches, and — with
torch (run with /usr/bin/python3) — real torch.profiler captures against
the fake server: the plan is picked up, exactly the sampled steps are
recorded under their training step numbers, the upload's body and headers,
the trace's time base, and failures (a 500 then success, a 413, an export or
profiler failure) reported without touching training."""

import gzip
import importlib.util
import json
import os
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from laggard import capture as cap_mod  # noqa: E402
from laggard import config  # noqa: E402
from laggard.capture import Capturer, PlanError, parse_plan  # noqa: E402
from laggard.sinks import ShipError  # noqa: E402
from envutil import module_fixture  # noqa: E402
from fakeserver import FakeServer  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None

setUpModule, tearDownModule = module_fixture()


class ParsePlanTest(unittest.TestCase):
    def test_defaults_and_fields(self):
        p = parse_plan({"id": "c0123456789ab", "start_step": 40})
        self.assertEqual(p, {"id": "c0123456789ab", "start_step": 40, "steps": 5, "every": 1, "state": "pending"})

    def test_refusals_name_the_field(self):
        ok = {"id": "c1", "start_step": 3, "steps": 5, "every": 2}
        cases = [
            ([], "capture"),
            (dict(ok, id="../x"), "id"),
            (dict(ok, id=""), "id"),
            (dict(ok, start_step=-1), "start_step"),
            (dict(ok, start_step="3"), "start_step"),
            (dict(ok, steps=0), "steps"),
            (dict(ok, steps=65), "steps"),
            (dict(ok, every=0), "every"),
            (dict(ok, every=True), "every"),
        ]
        for plan, field in cases:
            with self.subTest(field=field, plan=plan):
                with self.assertRaises(PlanError) as cm:
                    parse_plan(plan)
                self.assertTrue(str(cm.exception).startswith(field), str(cm.exception))

    def test_clean_error_is_a_header_value(self):
        s = cap_mod.clean_error("boom\r\nX-Evil: 1 \u00e9" + "x" * 900)
        self.assertNotIn("\n", s)
        self.assertTrue(all(" " <= c <= "~" for c in s))
        self.assertLessEqual(len(s), 500)


class FakePollSink:
    """poll_capture answers from a list: ShipError instances raise."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.posts = []
        self.steps = []  # the step each poll reported

    def poll_capture(self, rank, step=None):
        self.steps.append(step)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    def post_capture_trace(self, cid, rank, body, size, headers):
        self.posts.append((cid, rank, body.read() if body is not None else None, dict(headers)))

    def clone(self, timeout=None):
        return self  # one object: the tests read .posts from either

    def close(self):
        pass


class PollerTest(unittest.TestCase):
    def capturer(self, answers):
        c = Capturer("job", directory=tempfile.mkdtemp(), backoff_s=0.01)
        self.assertTrue(c.attach(FakePollSink(answers), 3))
        return c

    def test_three_404s_stop_polling(self):
        e404 = ShipError("x", status=404)
        c = self.capturer([e404, e404, (None, None), e404, e404, e404])
        for _ in range(5):
            c.poll()
        self.assertFalse(c.poll_dead)  # a success in between resets the count
        c.poll()
        self.assertTrue(c.poll_dead)
        self.assertFalse(c.stats()["polling"])
        self.assertEqual(c.stats()["poll_errors"], 5)

    def test_401_stops_at_once_500_does_not(self):
        c = self.capturer([ShipError("x", status=500), ShipError("x", status=403)])
        c.poll()
        self.assertFalse(c.poll_dead)
        c.poll()
        self.assertTrue(c.poll_dead)

    def test_keeps_last_16_heartbeats(self):
        c = self.capturer([(None, (i, i + 10, i + 11, i + 20)) for i in range(20)])
        for _ in range(20):
            c.poll()
        hb = c.heartbeats()
        self.assertEqual(len(hb), 16)
        self.assertEqual(hb[0], [4, 14, 15, 24])
        self.assertEqual(hb[-1], [19, 29, 30, 39])

    def test_polls_report_the_step_last_begun(self):
        # Issue 16 item 7b: the server picks a plan's start step from the
        # steps the ranks report; begin() never waits on anything for it.
        c = self.capturer([(None, None)] * 3)
        c.poll()
        c.begin(41)
        c.poll()
        c.begin(42)
        c.begin(43)
        c.poll()
        self.assertEqual(c._sink.steps, [-1, 41, 43])

    def test_plan_picked_up_once_and_withdrawn(self):
        plan = {"id": "c1", "start_step": 10, "steps": 2, "every": 1, "state": "pending"}
        c = self.capturer([(plan, None), (plan, None), (None, None)])
        c.poll()
        self.assertEqual(c.plan["id"], "c1")
        c.plan = None  # as if started
        c.poll()
        self.assertIsNone(c.plan)  # the same id is not taken twice
        self.assertEqual(c.stats()["plans"], 1)
        c.plan = parse_plan(plan)
        c.poll()  # the server no longer lists it: cancelled before it started here
        self.assertIsNone(c.plan)
        self.assertEqual(c.stats()["cancelled"], 1)

    def test_refused_plan_is_reported(self):
        c = self.capturer([({"id": "c2", "start_step": 1, "steps": 999}, None)])
        c.poll()
        self.assertIsNone(c.plan)
        self.assertTrue(c.close(5))
        (cid, rank, body, headers), = c._up_sink.posts
        self.assertEqual((cid, rank, body), ("c2", 3, None))
        self.assertTrue(headers["X-Laggard-Capture-Error"].startswith("plan refused: steps"), headers)

    def test_no_torch_reports_failure(self):
        c = self.capturer([])
        c.offer({"id": "c3", "start_step": 0, "steps": 1})
        with mock.patch.dict(sys.modules, {"torch": None}):
            c.begin(0)
        self.assertFalse(c.recording)
        self.assertEqual(c.stats()["failed"], 1)
        self.assertTrue(c.close(5))
        self.assertIn("torch is not imported", c._up_sink.posts[0][3]["X-Laggard-Capture-Error"])


class EnvTest(unittest.TestCase):
    def test_from_env(self):
        c = config.from_env({"LAGGARD_CAPTURE": "0", "LAGGARD_CAPTURE_POLL_S": "0.5", "LAGGARD_CAPTURE_DIR": "/x"})
        self.assertEqual(c, {"capture": False, "capture_poll_s": 0.5, "capture_dir": "/x"})
        self.assertEqual(config.from_env({"LAGGARD_CAPTURE_POLL_S": "0"}), {})
        self.assertEqual(config.from_env({"LAGGARD_CAPTURE_POLL_S": "soon"}), {})
        self.assertEqual(config.from_env({"LAGGARD_CAPTURE": "on"}), {"capture": True})

    def test_perf_switches(self):
        with mock.patch.dict(os.environ, {"LAGGARD_CAPTURE": "0"}):
            p = laggard.Perf(server="http://127.0.0.1:9", job="j")
        self.assertIsNone(p._kair)
        self.assertNotIn("capture", p.stats())
        p.close(0.1)
        with mock.patch.dict(os.environ, {"LAGGARD_CAPTURE_POLL_S": "0.25", "LAGGARD_CAPTURE_DIR": "/tmp/lcd"}):
            p = laggard.Perf(server="http://127.0.0.1:9", job="j", capture=True)
        self.assertEqual((p._kair.poll_s, p._kair.dir), (0.25, "/tmp/lcd"))
        p.close(0.1)
        p = laggard.Perf(out=os.path.join(tempfile.mkdtemp(), "x.jsonl"), job="j")
        self.assertIsNone(p._kair)  # a file has no server to take traces
        p.close(0.1)
        p = laggard.Perf(server="http://127.0.0.1:9", job="j")
        self.assertEqual(p._kair is not None, HAVE_TORCH)  # default: on with a server, where torch is installed
        p.close(0.1)


class Scheduled:
    """The fake server's pending capture: start_step a few steps past the
    newest step it has seen when first asked (as the server's lead does)."""

    def __init__(self, srv, steps=3, every=1, lead=30, cid="c0123456789ab"):
        self.srv, self.plan = srv, None
        self.args = dict(id=cid, steps=steps, every=every, state="pending")
        self.lead = lead

    def __call__(self, rank, n):
        if self.plan is None:
            seen = [v["step"] for v in self.srv.vectors()] or [0]
            self.plan = dict(self.args, start_step=max(seen) + self.lead, ranks=[0], job="j")
        return dict(self.plan)


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class CaptureJobTest(unittest.TestCase):
    def run_job(self, steps=3, every=1, behaviour=None, n=150, patch=None, until=None):
        srv = FakeServer(behaviour=behaviour)
        self.addCleanup(srv.close)
        sched = Scheduled(srv, steps=steps, every=every)
        srv.captures["j"] = sched
        self.dir = os.path.join(tempfile.mkdtemp(), "not-yet")  # created when needed
        p = laggard.Perf(server=srv.url, job="j", rank=0, world_size=1, flush_interval=0.05, capture_poll_s=0.05,
                         capture_dir=self.dir)
        p._kair.backoff_s = 0.02
        import torch
        x = torch.randn(64, 64)
        self.starts = {}
        ran = 0
        with (patch or mock.patch.dict({}, {})):
            for i in range(n):
                self.starts[i] = time.time_ns()
                with p.step():
                    x = torch.tanh(x @ x)
                    x = torch.tanh(x @ x)
                    time.sleep(0.008)
                ran += 1
                st = p.stats()["capture"]
                if (until or (lambda s: s["uploaded"] or s["failed"]))(st) and st["state"] == "idle":
                    break
        self.assertTrue(p.close(5))
        self.ran = ran
        return srv, sched, p

    def trace(self, srv, cid="c0123456789ab"):
        (post,) = srv.traces[("j", cid, 0)]
        return json.loads(post["body"]), post["headers"]

    def steps_in(self, events):
        return [int(e["name"].split("#")[1]) for e in events if e["name"].startswith("ProfilerStep#")]

    def test_every_step(self):
        self.check_every_step(None)

    def test_every_step_torch_export(self):
        # torch.profiler's own stop + export_chrome_trace (the path Kineto builds take)
        self.check_every_step(mock.patch.object(cap_mod, "_FAST_LEGACY", False))

    def check_every_step(self, patch):
        t0 = time.time_ns()
        srv, sched, p = self.run_job(steps=3, every=1, patch=patch)
        events, h = self.trace(srv)
        s0 = sched.plan["start_step"]
        self.assertEqual(self.steps_in(events), [s0, s0 + 1, s0 + 2])
        self.assertEqual(sum(e["name"] == "aten::mm" for e in events), 3 * 2)  # exactly the sampled steps
        st = p.stats()["capture"]
        self.assertEqual((st["uploaded"], st["steps_recorded"], st["failed"]), (1, 3, 0))
        self.assertGreater(st["upload_bytes"], 0)
        self.assertEqual(h["content-encoding"], "gzip")
        clock = json.loads(h["x-laggard-clock"])
        self.assertTrue(1 <= len(clock) <= 16)
        for cs, sr, ss, cr in clock:
            self.assertTrue(t0 <= cs <= sr <= ss <= cr, (cs, sr, ss, cr))  # one host: the clocks agree
        # ts are µs since the trace start; base + ts is the step's epoch start.
        base = int(h["x-laggard-trace-base-ns"])
        for e in events:
            if e["name"].startswith("ProfilerStep#"):
                s = int(e["name"].split("#")[1])
                lag = base + int(e["ts"]) * 1000 - self.starts[s]
                self.assertTrue(0 <= lag < 20_000_000, lag)  # after the loop's stamp, within 20 ms
        self.assertEqual(os.listdir(self.dir), [])  # nothing left behind

    def test_every_third_step_merged(self):
        self.check_every_third(None)

    def test_every_third_step_merged_torch_export(self):
        self.check_every_third(mock.patch.object(cap_mod, "_FAST_LEGACY", False))

    def check_every_third(self, patch):
        srv, sched, p = self.run_job(steps=3, every=3, patch=patch)
        events, h = self.trace(srv)
        s0 = sched.plan["start_step"]
        self.assertEqual(self.steps_in(events), [s0, s0 + 3, s0 + 6])
        self.assertEqual(sum(e["name"] == "aten::mm" for e in events), 3 * 2)  # steps in between not recorded
        ts = [e["ts"] for e in events if e["name"].startswith("ProfilerStep#")]
        # One time base: the sampled steps are ~3 steps (>= 24 ms) apart.
        self.assertTrue(all(b - a >= 20_000 for a, b in zip(ts, ts[1:])), ts)
        base = int(h["x-laggard-trace-base-ns"])
        for e in events:
            if e["name"].startswith("ProfilerStep#"):
                lag = base + int(e["ts"]) * 1000 - self.starts[int(e["name"].split("#")[1])]
                self.assertTrue(0 <= lag < 20_000_000, lag)

    def test_server_500_then_success(self):
        def beh(method, path, n):
            if "/traces" in path and n == 0:
                return (500, {}, {"error": "busy"}, 0)
            return None
        srv, _, p = self.run_job(behaviour=beh)
        st = p.stats()["capture"]
        self.assertEqual((st["uploaded"], st["failed"]), (1, 0))
        self.assertGreaterEqual(st["upload_retries"], 1)
        events, _ = self.trace(srv)
        self.assertEqual(len(self.steps_in(events)), 3)

    def test_413_reports_error(self):
        def beh(method, path, n):
            if "/traces" in path and n == 0:
                return (413, {}, {"error": "trace larger than 1 GiB"}, 0)
            return None
        srv, _, p = self.run_job(behaviour=beh)
        st = p.stats()["capture"]
        self.assertEqual((st["uploaded"], st["failed"], st["reported"]), (0, 1, 1))
        posts = [r for r in srv.requests if "/traces" in r["path"]]
        self.assertEqual([r["status"] for r in posts], [413, 201])  # no retry of a 413
        (rep,) = srv.traces[("j", "c0123456789ab", 0)]
        self.assertEqual(rep["body"], b"")
        self.assertIn("HTTP 413", rep["headers"]["x-laggard-capture-error"])
        self.assertEqual(os.listdir(self.dir), [])

    def test_export_failure_reported_training_continues(self):
        def broken(torch):
            s = cap_mod._Session(torch)

            def export(path):
                raise RuntimeError("disk on fire")
            s.p.export_chrome_trace = export
            return s
        srv, _, p = self.run_job(patch=mock.patch.object(cap_mod, "_start_profiler", broken))
        st = p.stats()["capture"]
        self.assertEqual((st["failed"], st["profiler_errors"], st["uploaded"]), (1, 1, 0))
        (rep,) = srv.traces[("j", "c0123456789ab", 0)]
        self.assertIn("disk on fire", rep["headers"]["x-laggard-capture-error"])
        self.assertEqual(p.stats()["errors"], 0)
        self.assertFalse(p._kair.recording)
        import torch.autograd.profiler as ap
        self.assertFalse(torch_profiler_enabled(ap))  # the session was stopped

    def test_profiler_stop_failure(self):
        real = cap_mod._LegacySession.stop

        def stop(self, path):
            real(self, path)
            raise RuntimeError("stop went wrong")
        srv, _, p = self.run_job(patch=mock.patch.object(cap_mod._LegacySession, "stop", stop))
        st = p.stats()["capture"]
        self.assertEqual((st["failed"], st["profiler_errors"], st["uploaded"]), (1, 1, 0))
        (rep,) = srv.traces[("j", "c0123456789ab", 0)]
        self.assertIn("profiler stop: RuntimeError: stop went wrong", rep["headers"]["x-laggard-capture-error"])
        self.assertFalse(torch_profiler_enabled(None))

    def test_profiler_start_failure(self):
        def broken(torch):
            raise RuntimeError("profiler already enabled")
        srv, _, p = self.run_job(patch=mock.patch.object(cap_mod, "_start_profiler", broken))
        st = p.stats()["capture"]
        self.assertEqual((st["failed"], st["profiler_errors"], st["steps_recorded"]), (1, 1, 0))
        (rep,) = srv.traces[("j", "c0123456789ab", 0)]
        self.assertIn("profiler start at step", rep["headers"]["x-laggard-capture-error"])
        self.assertEqual(p.stats()["steps"], self.ran)

    def test_close_mid_capture_uploads_what_was_recorded(self):
        srv, sched, p = self.run_job(steps=20, every=1, until=lambda s: s["steps_recorded"] >= 2)
        events, _ = self.trace(srv)
        s0 = sched.plan["start_step"]
        self.assertEqual(self.steps_in(events)[:2], [s0, s0 + 1])
        self.assertEqual(p.stats()["capture"]["uploaded"], 1)

    def test_disabled_by_env_never_polls(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        srv.captures["j"] = Scheduled(srv)
        with mock.patch.dict(os.environ, {"LAGGARD_CAPTURE": "0"}):
            p = laggard.init(server=srv.url, job="j", rank=0, world_size=1, flush_interval=0.02)
        for _ in range(30):
            with p.step():
                time.sleep(0.005)
        self.assertTrue(p.close(5))
        self.assertFalse([r for r in srv.requests if "/captures" in r["path"]])
        self.assertNotIn("capture", p.stats())


def torch_profiler_enabled(_):
    try:
        import torch
        return bool(torch.autograd._profiler_enabled())
    except Exception:
        return False


class GzipBodyTest(unittest.TestCase):
    """write_body on hand-made segments: the time base decision and the
    merge of several sessions (no torch needed)."""

    def seg(self, doc):
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        self.addCleanup(lambda: os.path.exists(path) and os.remove(path))
        return path

    def body(self, segs):
        out = tempfile.mktemp(suffix=".gz")
        self.addCleanup(lambda: os.path.exists(out) and os.remove(out))
        base = cap_mod.write_body(out, segs)
        with gzip.open(out) as f:
            return base, json.loads(f.read())

    def test_legacy_single_is_relative(self):
        doc = [{"name": "ProfilerStep#4", "ph": "X", "ts": 10, "dur": 5}]
        base, got = self.body([("file", self.seg(doc), 1_700_000_000_000_000_000)])
        self.assertEqual((base, got), (1_700_000_000_000_000_000, doc))

    def test_absolute_or_based_traces_need_no_header(self):
        doc = {"traceEvents": [{"name": "a", "ph": "X", "ts": 1_700_000_000_000_000, "dur": 1}]}
        self.assertIsNone(self.body([("file", self.seg(doc), 5)])[0])
        doc = {"traceEvents": [{"name": "a", "ph": "X", "ts": 3, "dur": 1}], "baseTimeNanoseconds": 7}
        self.assertIsNone(self.body([("file", self.seg(doc), 5)])[0])

    def test_merge_legacy_shifts_to_first_base(self):
        a = [{"name": "ProfilerStep#3", "ph": "X", "ts": 10, "dur": 5}]
        b = [{"name": "ProfilerStep#6", "ph": "X", "ts": 12, "dur": 5}]
        base, got = self.body([("file", self.seg(a), 1_000_000_000), ("file", self.seg(b), 1_040_000_000)])
        self.assertEqual(base, 1_000_000_000)
        self.assertEqual([e["ts"] for e in got], [10, 40_012])

    def test_events_sorted_parents_first_on_first_base(self):
        class Ev:
            def __init__(self, name, start, dur, tid=1):
                self.v = (name, start, dur, tid)

            def name(self):
                return self.v[0]

            def start_us(self):
                return self.v[1]

            def duration_us(self):
                return self.v[2]

            def start_thread_id(self):
                return self.v[3]

        class Res:
            def __init__(self, evs):
                self.evs = evs

            def events(self):
                return self.evs
        a = Res([Ev("aten::mm", 1_000_010, 3), Ev("ProfilerStep#5", 1_000_010, 9), Ev("[memory]", 1_000_011, 0)])
        b = Res([Ev("ProfilerStep#8", 1_050_000, 9), Ev("aten::mm", 1_050_001, 2, 7)])
        base, got = self.body([("events", a, 1_000_000_000), ("events", b, 1_049_990_000)])
        self.assertEqual(base, 1_000_000_000)
        self.assertEqual([(e["name"], e["ts"], e["dur"], e["tid"]) for e in got],
                         [("ProfilerStep#5", 10, 9, 1), ("aten::mm", 10, 3, 1), ("ProfilerStep#8", 50_000, 9, 1),
                          ("aten::mm", 50_001, 2, 7)])
        out = tempfile.mktemp(suffix=".gz")
        self.addCleanup(lambda: os.path.exists(out) and os.remove(out))
        with self.assertRaises(OSError):
            cap_mod.write_body(out, [("events", a, 1_000_000_000)], limit=10)

    def test_merge_kineto_keeps_file_base(self):
        a = {"schemaVersion": 1, "traceEvents": [{"name": "x", "ph": "X", "ts": 1.5, "dur": 1}],
             "baseTimeNanoseconds": 2_000_000}
        b = {"schemaVersion": 1, "traceEvents": [{"name": "y", "ph": "X", "ts": 1.5, "dur": 1}],
             "baseTimeNanoseconds": 2_500_500}
        base, got = self.body([("file", self.seg(a), 0), ("file", self.seg(b), 0)])
        self.assertIsNone(base)
        self.assertEqual(got["baseTimeNanoseconds"], 2_000_000)
        self.assertEqual(got["schemaVersion"], 1)
        self.assertEqual([e["ts"] for e in got["traceEvents"]], [1.5, 502.0])


if __name__ == "__main__":
    unittest.main()


# --- review fixes (issue 9): fork, size cap, temp files, heartbeats, threads ---

def _ops(torch, x, n=3):
    for _ in range(n):
        x = torch.tanh(x @ x)
    return x


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class DirectCaptureTest(unittest.TestCase):
    """A Capturer driven by hand (begin/end as Perf calls them) against a
    FakePollSink: what was uploaded, with which headers."""

    def setUp(self):
        import torch
        self.torch = torch
        self.x = torch.randn(16, 16)
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        self.assertFalse(self.torch.autograd._profiler_enabled())  # no test leaves a profiler on

    def capturer(self, steps=3, every=1, **kw):
        c = Capturer("job", directory=self.dir, backoff_s=0.01, **kw)
        self.assertTrue(c.attach(FakePollSink([]), 0))
        c.offer({"id": "c9", "start_step": 10, "steps": steps, "every": every})
        return c

    def run_steps(self, c, steps, n_ops=3):
        for s in steps:
            c.begin(s)
            self.x = _ops(self.torch, self.x, n_ops)
            c.end(s)

    def upload(self, c):
        self.assertTrue(c.close(5))
        (cid, rank, body, headers), = [p for p in c._up_sink.posts if p[2] is not None]
        events = json.loads(gzip.decompress(body))
        return [int(e["name"].split("#")[1]) for e in events if e["name"].startswith("ProfilerStep#")], headers

    def test_event_cap_stops_early_and_says_truncated(self):
        c = self.capturer(steps=10)
        c.max_events = 1  # sized after the first step: more than it, so only steps that fit are taken
        # the first step alone is over the cap: the capture fails, named
        self.run_steps(c, range(10, 13))
        self.assertEqual(c.stats()["failed"], 1)
        self.assertIn("LAGGARD_CAPTURE_MAX_EVENTS", c.last_error)
        self.assertTrue(c.close(5))
        c = self.capturer(steps=10)
        self.run_steps(c, [10])
        per_step = c._cur["events"]  # the first step is its own session: its count is known
        c._abort(c._cur["plan"], "calibrated")
        self.assertTrue(c.close(5))
        c = self.capturer(steps=10, max_events=per_step * 3 + per_step // 2)
        self.run_steps(c, range(10, 20))
        steps, h = self.upload(c)
        self.assertEqual(steps, [10, 11, 12])  # 3.5 steps' worth: 3 whole steps
        self.assertEqual(h["X-Laggard-Capture-Truncated"], "7")
        st = c.stats()
        self.assertEqual((st["truncated"], st["uploaded"], st["steps_recorded"]), (1, 1, 3))

    def test_env_sets_the_cap(self):
        with mock.patch.dict(os.environ, {"LAGGARD_CAPTURE_MAX_EVENTS": "1234"}):
            self.assertEqual(Capturer("j").max_events, 1234)
        with mock.patch.dict(os.environ, {"LAGGARD_CAPTURE_MAX_EVENTS": "lots"}):
            self.assertEqual(Capturer("j").max_events, cap_mod.MAX_EVENTS)

    def test_sessions_are_bounded_and_merged_in_order(self):
        segs = []
        real = cap_mod.write_body

        def spy(out, s, *a, **kw):
            segs.append(len(s))
            return real(out, s, *a, **kw)
        # the upload starts as the last step ends: spy from the start
        with mock.patch.object(cap_mod, "_SEG_EVENTS", 1), mock.patch.object(cap_mod, "write_body", spy):
            c = self.capturer(steps=4)  # one step per session
            self.run_steps(c, range(10, 14))
            steps, h = self.upload(c)
        self.assertEqual(segs, [4])
        self.assertEqual(steps, [10, 11, 12, 13])
        self.assertNotIn("X-Laggard-Capture-Truncated", h)

    def test_fork_mid_capture_child_never_records(self):
        c = self.capturer(steps=2)
        c.begin(10)
        self.assertTrue(self.torch.autograd._profiler_enabled())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a DataLoader worker forked mid-step
            try:
                ok = (not self.torch.autograd._profiler_enabled() and not c.recording and c._forked
                      and c._cur is None and c.plan is None)
                c.offer({"id": "c10", "start_step": 0, "steps": 1})
                c.begin(11)
                c.end(11)
                ok = ok and not self.torch.autograd._profiler_enabled() and not c._jobs and c._up_thread is None
                os.write(w, b"ok" if ok else b"no")
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 2)
        os.close(r)
        os.waitpid(pid, 0)
        self.assertEqual(got, b"ok")
        self.assertTrue(self.torch.autograd._profiler_enabled())  # the parent records on
        self.x = _ops(self.torch, self.x)
        c.end(10)
        self.run_steps(c, [11])
        steps, _ = self.upload(c)
        self.assertEqual(steps, [10, 11])

    def test_close_on_the_training_thread_mid_step(self):
        c = self.capturer(steps=5)
        self.run_steps(c, [10])
        c.begin(11)
        self.x = _ops(self.torch, self.x)
        steps, _ = self.upload(c)  # close() here ends step 11's range and uploads both
        self.assertEqual(steps, [10, 11])

    def test_close_from_another_thread_hands_over(self):
        import threading
        c = self.capturer(steps=50)
        go, done = threading.Event(), threading.Event()
        state = {}

        def train():
            step = 10
            while not done.is_set():
                c.begin(step)
                self.x = _ops(self.torch, self.x)
                c.end(step)
                step += 1
                if step == 12:
                    go.set()
                time.sleep(0.002)
            state["on"] = self.torch.autograd._profiler_enabled()
        t = threading.Thread(target=train)
        t.start()
        go.wait(5)
        ok = c.close(5)  # main thread: the training thread ends the capture at its next boundary
        done.set()
        t.join()
        self.assertTrue(ok)
        self.assertFalse(state["on"])
        (cid, _, body, h), = c._up_sink.posts
        self.assertIsNotNone(body)
        self.assertEqual(c.stats()["uploaded"], 1)

    def test_close_from_another_thread_reports_when_training_is_gone(self):
        import threading
        c = self.capturer(steps=50)
        parked, resume = threading.Event(), threading.Event()
        state = {}

        def train():
            c.begin(10)
            self.x = _ops(self.torch, self.x)
            c.end(10)
            c.begin(11)
            parked.set()
            resume.wait(10)  # stuck in a long step while close() runs
            c.end(11)
            state["on"] = self.torch.autograd._profiler_enabled()
        t = threading.Thread(target=train)
        t.start()
        parked.wait(5)
        self.assertTrue(c.close(0.4))  # touches no torch state on this thread
        resume.set()
        t.join()
        self.assertFalse(state["on"])  # stopped by its own thread when it came back
        (cid, _, body, h), = c._up_sink.posts
        self.assertIsNone(body)
        self.assertIn("closed from another thread", h["X-Laggard-Capture-Error"])
        self.assertEqual((c.stats()["failed"], c.stats()["uploaded"]), (1, 0))
        self.assertIsNone(c._cur)

    def test_step_counter_going_back_ends_the_capture(self):
        c = self.capturer(steps=5)
        self.run_steps(c, [10, 11, 0])  # a new epoch restarts the count: 12.. never come
        self.assertFalse(c.recording)
        steps, _ = self.upload(c)
        self.assertEqual(steps, [10, 11])
        c = self.capturer(steps=5)
        self.run_steps(c, [10])
        c.begin(10 + 65)  # far past the sampled steps
        self.assertFalse(c.recording)
        self.assertTrue(c.close(5))

    def test_keyboard_interrupt_turns_the_profiler_off(self):
        c = self.capturer(steps=5)
        self.run_steps(c, [10])
        with mock.patch.object(self.torch.autograd.profiler, "record_function", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                c.begin(11)
        self.assertFalse(self.torch.autograd._profiler_enabled())
        self.assertFalse(c.recording)
        self.assertIsNone(c._cur)
        self.assertTrue(c.close(5))


class FixesNoTorchTest(unittest.TestCase):
    def test_unordered_heartbeats_are_dropped(self):
        c = Capturer("job", directory=tempfile.mkdtemp())
        c.attach(FakePollSink([(None, (100, 5, 6, 90)), (None, (100, 7, 6, 110)), (None, (100, 5, 6, 110))]), 0)
        for _ in range(3):
            c.poll()
        self.assertEqual(c.heartbeats(), [[100, 5, 6, 110]])

    def test_http_sink_drops_a_clock_step_back(self):
        from laggard.sinks import HTTPSink
        srv = FakeServer()
        self.addCleanup(srv.close)
        sink = HTTPSink(srv.url, "j")
        clock = mock.Mock(wraps=time)
        clock.time_ns.side_effect = [2_000, 1_000]  # stepped back mid-poll
        with mock.patch("laggard.sinks.time", clock):
            cap, hb = sink.poll_capture(0)
        self.assertIsNone(hb)
        cap, hb = sink.poll_capture(0, 17)
        self.assertIsNotNone(hb)
        sink.poll_capture(0, -1)  # no step yet: none sent
        self.assertEqual(srv.poll_steps, {("j", 0): [17]})
        sink.close()

    def test_sink_without_clone_is_not_attached(self):
        class NoClone:
            def poll_capture(self, rank, step=None):
                return None, None
        c = Capturer("job")
        self.assertFalse(c.attach(NoClone(), 0))
        self.assertFalse(c.attached)

    def test_409_sends_no_error_report(self):
        class Sink(FakePollSink):
            def post_capture_trace(self, cid, rank, body, size, headers):
                self.posts.append(body is not None)
                raise ShipError("closed", status=409)
        d = tempfile.mkdtemp()
        c = Capturer("job", directory=d, backoff_s=0.01)
        c.attach(Sink([]), 0)
        seg = os.path.join(d, "s.json")
        with open(seg, "w") as f:
            json.dump([{"name": "ProfilerStep#1", "ph": "X", "ts": 1, "dur": 1}], f)
        c._enqueue(("trace", "c1", [("file", seg, 1)], {"seg_steps": [1], "cut": 0}))
        self.assertTrue(c.close(5))
        self.assertEqual(c._up_sink.posts, [True])  # the trace only: no report that would 409 too
        self.assertEqual(os.listdir(d), [])

    def test_uploader_restarts_after_an_exiting_thread(self):
        class Alive:
            def is_alive(self):
                return True  # an uploader that has decided to exit, not yet gone
        c = Capturer("job", directory=tempfile.mkdtemp(), backoff_s=0.01)
        c.attach(FakePollSink([]), 0)
        c._up_thread = Alive()
        c._report("c1", "x")
        self.assertTrue(c.close(5))  # a new thread took the job
        self.assertEqual(len(c._up_sink.posts), 1)

    def test_sweep_removes_own_leftovers_of_dead_or_old_processes(self):
        d = tempfile.mkdtemp()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)  # a pid that is gone
        me, parent = os.getpid(), os.getppid()
        names = {
            "laggard-j-c1-rank0-%d-seg0.json" % pid: False,  # dead process: removed
            "laggard-j-c1-rank0-%d.json.gz" % pid: False,
            "laggard-a-b-c-c1-rank3-%d-seg2.json" % parent: True,  # live, recent: kept
            "laggard-j-c2-rank1-%d.json.gz" % parent: False,  # live but old: removed
            "laggard-j-c3-rank0-%d-seg0.json" % me: True,  # this process: kept
            "notes-%d.json" % pid: True,  # not ours: kept
            "laggard-j-c1-rank0-%d-seg0.json.bak" % pid: True,
        }
        for n in names:
            with open(os.path.join(d, n), "w") as f:
                f.write("x")
        old = time.time() - 2 * 3600
        os.utime(os.path.join(d, "laggard-j-c2-rank1-%d.json.gz" % parent), (old, old))
        c = Capturer("job", directory=d)
        c.attach(FakePollSink([]), 0)
        c.offer({"id": "c5", "start_step": 0, "steps": 1})
        self.assertEqual(sorted(os.listdir(d)), sorted(n for n, keep in names.items() if keep))
        self.assertEqual(c.stats()["swept"], 3)
        for n in os.listdir(d):
            os.remove(os.path.join(d, n))
        c.offer({"id": "c6", "start_step": 0, "steps": 1})  # once per directory and process
        with open(os.path.join(d, "laggard-j-c1-rank0-%d-seg0.json" % pid), "w") as f:
            f.write("x")
        c2 = Capturer("job", directory=d)
        c2.attach(FakePollSink([]), 0)
        c2.offer({"id": "c7", "start_step": 0, "steps": 1})
        self.assertEqual(len(os.listdir(d)), 1)


class WriterCapTest(unittest.TestCase):
    class Ev:
        def __init__(self, name, start, dur):
            self.v = (name, start, dur)

        def name(self):
            return self.v[0]

        def start_us(self):
            return self.v[1]

        def duration_us(self):
            return self.v[2]

        def start_thread_id(self):
            return 1

    def steps(self, first, n, ops=3, t0=1_000_000):
        out = []
        for s in range(first, first + n):
            t = t0 + (s - first) * 100
            out.append(self.Ev("ProfilerStep#%d" % s, t, 50))
            out += [self.Ev("aten::mm", t + 1 + i, 1) for i in range(ops)]
        return out

    def test_cut_at_a_step_boundary_and_counted(self):
        out = tempfile.mktemp(suffix=".gz")
        self.addCleanup(lambda: os.path.exists(out) and os.remove(out))
        a = self.steps(1, 1)
        b = self.steps(2, 3, t0=2_000_000)
        c = self.steps(5, 2, t0=3_000_000)
        info = {"seg_steps": [1, 3, 2]}
        cap_mod.write_body(out, [("events", a, 1_000_000_000), ("events", b, 2_000_000_000),
                                 ("events", c, 3_000_000_000)], max_events=11, info=info)
        with gzip.open(out) as f:
            got = json.loads(f.read())
        self.assertEqual([e["name"] for e in got if e["name"].startswith("P")], ["ProfilerStep#1", "ProfilerStep#2"])
        self.assertEqual(len(got), 8)  # two whole steps of 4 events; the third would make 12 > 11
        self.assertEqual((info["dropped_steps"], info["events"]), (4, 8))
        self.assertEqual(a, [])  # the writer emptied the lists it was given
        with self.assertRaises(OSError):
            cap_mod.write_body(out, [("events", self.steps(1, 1), 0)], max_events=2)
