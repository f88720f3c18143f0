"""Hot-path semantics of laggard.Perf with a fake clock and a capture sink:
ordering, residual, nesting, accumulation, data lead, CUDA-event probes."""

import os
import sys
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helpers  # noqa: E402
import laggard  # noqa: E402
from envutil import module_fixture  # noqa: E402
from helpers import FakeEvent  # noqa: E402


setUpModule, tearDownModule = module_fixture()


class PerfTest(helpers.ClockedTest):

    def perf(self, **kw):
        kw.setdefault("rank", 1)
        kw.setdefault("world_size", 4)
        return laggard.Perf(job="unit", sink=self.sink, flush_interval=0.01, **kw)

    def test_ordered_durations_and_residual(self):
        p = self.perf()
        with p.step():
            self.clock.advance_ms(1)  # untimed: goes to the residual
            with p.stage("data.next_wait"):
                self.clock.advance_ms(10)
            with p.stage("model.fwd_loss_cpu_wall"):
                self.clock.advance_ms(20)
            with p.stage("model.backward_cpu_wall"):
                self.clock.advance_ms(30)
            with p.stage("callbacks.cpu_wall"):
                self.clock.advance_ms(4)
            with p.stage("optim.step_cpu_wall"):
                self.clock.advance_ms(5)
            self.clock.advance_ms(2)
        self.assertTrue(p.close(5))
        self.assertEqual(len(self.sink.vectors), 1)
        v = self.sink.vectors[0]
        self.assertEqual(v["step"], 0)
        self.assertEqual(v["rank"], 1)
        self.assertEqual(v["durations_ms"], [10.0, 20.0, 30.0, 4.0, 5.0, 3.0])
        self.assertEqual(v["wall_ms"], 72.0)
        self.assertNotIn("nested", v)
        self.assertNotIn("dropped", v)

    def test_stage_order_follows_schema_not_call_order(self):
        p = self.perf()
        with p.step():
            with p.stage("optim.step_cpu_wall"):
                self.clock.advance_ms(5)
            with p.stage("data.next_wait"):
                self.clock.advance_ms(7)
            with p.stage("data.next_wait"):  # repeated stage accumulates
                self.clock.advance_ms(1)
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"], [8.0, 0.0, 0.0, 0.0, 5.0, 0.0])

    def test_steps_autoincrement_and_explicit(self):
        p = self.perf(start_step=5)
        for _ in range(2):
            with p.step():
                self.clock.advance_ms(1)
        with p.step(step=100):
            self.clock.advance_ms(1)
        with p.step():
            self.clock.advance_ms(1)
        p.close(5)
        self.assertEqual([v["step"] for v in self.sink.vectors], [5, 6, 100, 101])

    def test_nested_stage_rejected_and_counted(self):
        p = self.perf()
        with p.step():
            with p.stage("model.fwd_loss_cpu_wall"):
                self.clock.advance_ms(3)
                with p.stage("model.backward_cpu_wall"):
                    self.clock.advance_ms(4)
                    with p.stage("callbacks.cpu_wall"):
                        self.clock.advance_ms(1)
            with p.stage("model.backward_cpu_wall"):
                self.clock.advance_ms(2)
        p.close(5)
        v = self.sink.vectors[0]
        # The nested spans' time stays in the outer stage; nothing overlaps.
        self.assertEqual(v["durations_ms"], [0.0, 8.0, 2.0, 0.0, 0.0, 0.0])
        self.assertEqual(v["nested"], 2)
        self.assertEqual(p.stats()["nested"], 2)

    def test_never_raises_on_misuse(self):
        p = self.perf()
        with p.stage("data.next_wait"):  # outside a step
            pass
        with p.step():
            with p.stage("no.such.stage"):
                self.clock.advance_ms(1)
            with p.stage("step.other_cpu_wall"):  # residual is computed, not timed
                self.clock.advance_ms(1)
            with p.cuda_event_sample("not.declared"):
                pass
            p.micro(3)  # accumulation is 1
        p.close(5)
        self.assertEqual(p.stats()["rejected"], 4)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][-1], 2.0)

    def test_user_exception_propagates_and_drops_partial_step(self):
        p = self.perf()
        with self.assertRaises(KeyError):
            with p.step():
                with p.stage("data.next_wait"):
                    raise KeyError("boom")
        with p.step():
            with p.stage("data.next_wait"):
                self.clock.advance_ms(1)
        p.close(5)
        self.assertEqual(len(self.sink.vectors), 1)
        self.assertEqual(self.sink.vectors[0]["step"], 1)

    def test_accumulation_micro_partition(self):
        p = self.perf(accumulation=2)
        with p.step():
            for i in range(2):
                with p.micro(i):
                    with p.stage("data.next_wait"):
                        self.clock.advance_ms(1 + i)
                    with p.stage("model.backward_cpu_wall"):
                        self.clock.advance_ms(10)
            with p.stage("optim.step_cpu_wall"):  # after the last microstep
                self.clock.advance_ms(3)
        p.close(5)
        v0, v1 = self.sink.vectors
        self.assertNotIn("micro", v0)  # micro 0 is the JSON default
        self.assertEqual(v1["micro"], 1)
        self.assertEqual(v0["durations_ms"], [1.0, 0.0, 10.0, 0.0, 0.0, 0.0])
        self.assertEqual(v1["durations_ms"], [2.0, 0.0, 10.0, 0.0, 3.0, 0.0])
        self.assertEqual(v0["wall_ms"] + v1["wall_ms"], 26.0)
        self.assertEqual(self.sink.job["accumulation"], 2)

    def test_data_lead(self):
        p = self.perf()
        with p.step():
            with p.stage("data.next_wait", data_lead=2):
                self.clock.advance_ms(1)
        with p.step():
            with p.stage("data.next_wait"):
                self.clock.advance_ms(1)
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["data_lead"], 2)
        self.assertNotIn("data_lead", self.sink.vectors[1])

    def test_registration_payload(self):
        p = self.perf(role={"tp": 0, "name": "dense"}, labels={"team": "x"}, host="h1", local_rank=1)
        with p.step():
            pass
        p.close(5)
        self.assertEqual(self.sink.job["id"], "unit")
        self.assertEqual(self.sink.job["world_size"], 4)
        self.assertEqual(self.sink.job["schema"]["stages"], list(laggard.DEFAULT_STAGES))
        self.assertEqual(self.sink.job["labels"], {"team": "x"})
        self.assertEqual(self.sink.rank, {"rank": 1, "host": "h1", "local_rank": 1,
                                          "role": {"dp": 1, "tp": 0, "pp": -1, "ep": -1, "name": "dense"},
                                          "schema": laggard.default_schema()})

    def test_identity_from_env(self):
        old = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        os.environ.update(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1")
        try:
            p = laggard.Perf(job="env", sink=self.sink)
            with p.step():
                pass
            p.close(5)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.assertEqual((p.rank, p.world_size), (3, 8))
        self.assertEqual(self.sink.vectors[0]["rank"], 3)
        self.assertEqual(self.sink.rank["local_rank"], 1)

    def test_cuda_probe_noop_without_cuda(self):
        # A torch without CUDA, whatever this machine has (the probe only
        # looks at an already imported torch).
        no_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
        p = self.perf(event_fraction=1.0)
        with mock.patch.dict(sys.modules, {"torch": no_cuda}):
            with p.step():
                with p.stage("model.fwd_loss_cpu_wall"):
                    with p.cuda_event_sample("model.fwd_loss_cuda_event_ms"):
                        self.clock.advance_ms(1)
        p.close(5)
        self.assertNotIn("probes", self.sink.vectors[0])
        self.assertEqual(p.stats()["event_samples"], 0)

    def test_cuda_probe_sampled_and_polled(self):
        p = self.perf(event_fraction=0.5, event_polls=2)
        made = []

        def factory():
            # Every sample's end event becomes ready on its second query;
            # step 2's end event never does.
            e = FakeEvent(ready_after=1 if len(made) < 2 else 10**9, value=7.5)
            made.append(e)
            return e

        p._event_factory, p._event_factory_resolved = factory, True
        for _ in range(4):
            with p.step():
                with p.stage("model.fwd_loss_cpu_wall"):
                    with p.cuda_event_sample():
                        self.clock.advance_ms(1)
        p.close(5)
        by_step = {v["step"]: v for v in self.sink.vectors}
        self.assertEqual(sorted(by_step), [0, 1, 2, 3])
        # fraction 0.5 samples steps 1 and 3 (floor((s+1)f) > floor(s f)).
        self.assertNotIn("probes", by_step[0])
        self.assertNotIn("probes", by_step[2])
        self.assertEqual(by_step[1]["probes"], {"model.fwd_loss_cuda_event_ms": {"value_ms": 7.5, "ready": True}})
        self.assertEqual(by_step[3]["probes"], {"model.fwd_loss_cuda_event_ms": {"value_ms": 0.0, "ready": False}})
        self.assertEqual(p.stats()["event_samples"], 2)
        self.assertEqual(p.stats()["event_ready"], 1)
        self.assertTrue(all(e.recorded for e in made))


class SchemaTest(unittest.TestCase):
    def test_residual_appended(self):
        s = laggard.normalize_schema(["a", "b"])
        self.assertEqual(s["stages"], ["a", "b", "step.other_cpu_wall"])

    def test_bad_schemas_name_field(self):
        for bad, field in ((["a", "a"], "schema.stages"), (["a,b"], "schema.stages"),
                           ({"stages": ["a"], "probes": ["a"]}, "schema.probes"), (42, "schema")):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as cm:
                    laggard.normalize_schema(bad)
                self.assertTrue(str(cm.exception).startswith(field), str(cm.exception))


if __name__ == "__main__":
    unittest.main()
