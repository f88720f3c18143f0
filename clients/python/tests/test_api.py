"""The Perf API beyond the basic with-blocks: stage aliases and unknown
names, decorators, the explicit begin/mark/end form, the order hash and
role-group schemas, laggard.init() and the disabled NullPerf."""

import asyncio
import inspect
import logging
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import helpers  # noqa: E402
import laggard  # noqa: E402
from envutil import module_fixture  # noqa: E402
from laggard import schema as schema_mod  # noqa: E402


setUpModule, tearDownModule = module_fixture()


class ClockedTest(helpers.ClockedTest):

    def perf(self, **kw):
        kw.setdefault("rank", 0)
        kw.setdefault("world_size", 2)
        kw.setdefault("job", "api")
        return laggard.Perf(sink=self.sink, flush_interval=0.01, **kw)

    def ms(self, ms):
        self.clock.advance_ms(ms)


class StageNamesTest(ClockedTest):
    def test_short_aliases_time_the_schema_stages(self):
        p = self.perf()
        with p.step():
            for i, name in enumerate(("data", "forward", "backward", "callbacks", "optimizer")):
                with p.stage(name):
                    self.ms(i + 1)
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"], [1.0, 2.0, 3.0, 4.0, 5.0, 0.0])
        self.assertEqual(p.stats()["rejected"], 0)
        self.assertEqual(p.stats()["unknown_stages"], 0)

    def test_unknown_name_warns_once_per_name_and_is_counted(self):
        p = self.perf()
        with self.assertLogs("laggard", logging.WARNING) as cm:
            for _ in range(3):
                with p.step():
                    with p.stage("fwd"):  # not an alias: "forward" is
                        self.ms(2)
                    with p.stage("loss"):
                        self.ms(1)
        p.close(5)
        warnings = [m for m in cm.output if "unknown stage" in m]
        self.assertEqual(len(warnings), 2, cm.output)
        self.assertIn("'fwd'", warnings[0])
        for st in laggard.DEFAULT_STAGES[:-1]:
            self.assertIn(st, warnings[0])  # names what the schema does have
        st = p.stats()
        self.assertEqual(st["unknown_stages"], 6)
        self.assertEqual(st["rejected"], 6)
        self.assertEqual(st["unknown_stage_names"], ["fwd", "loss"])
        # the time is not lost: it stays in the residual
        self.assertEqual(self.sink.vectors[0]["durations_ms"][-1], 3.0)

    def test_aliases_follow_the_schema(self):
        p = self.perf(schema=["pp.recv_wait", "model.fwd_loss_cpu_wall"])
        with self.assertLogs("laggard", logging.WARNING) as cm:
            with p.step():
                with p.stage("forward"):
                    self.ms(4)
                with p.stage("data"):  # this schema has no data stage
                    self.ms(1)
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"], [0.0, 4.0, 1.0])
        self.assertEqual(p.stats()["unknown_stages"], 1)
        self.assertIn("pp.recv_wait", cm.output[0])

    def test_residual_is_rejected_not_unknown(self):
        p = self.perf()
        with p.step():
            with p.stage("other"):
                self.ms(1)
        p.close(5)
        self.assertEqual((p.stats()["rejected"], p.stats()["unknown_stages"]), (1, 0))
        self.assertEqual(p.stats()["unknown_stage_names"], [])

    def test_unhashable_name_never_raises(self):
        p = self.perf()
        with p.step():
            with p.stage(["data"]):
                self.ms(1)
            p.mark({"x": 1})
        p.close(5)
        self.assertEqual(p.stats()["unknown_stages"], 2)


class DecoratorTest(ClockedTest):
    def test_stage_decorator_times_each_call(self):
        p = self.perf()

        @p.stage("forward")
        def fwd(x, scale=1):
            self.ms(3)
            return x * scale

        with p.step():
            self.assertEqual(fwd(2, scale=5), 10)
            self.assertEqual(fwd(1), 1)
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][1], 6.0)
        self.assertEqual(fwd.__name__, "fwd")  # functools.wraps

    def test_step_decorator_makes_each_call_a_step(self):
        p = self.perf(start_step=7)

        @p.stage("backward")
        def backward():
            self.ms(2)

        @p.step()
        def train_step(batch):
            self.ms(1)
            backward()
            return batch + 1

        self.assertEqual([train_step(b) for b in range(3)], [1, 2, 3])
        p.close(5)
        self.assertEqual([v["step"] for v in self.sink.vectors], [7, 8, 9])
        self.assertTrue(all(v["durations_ms"][2] == 2.0 and v["wall_ms"] == 3.0 for v in self.sink.vectors))

    def test_decorated_step_that_raises_is_dropped_and_reraises(self):
        p = self.perf()

        @p.step()
        def bad():
            raise RuntimeError("oom")

        with self.assertRaises(RuntimeError):
            bad()
        p.close(5)
        self.assertEqual(self.sink.vectors, [])
        self.assertEqual(p.stats()["steps"], 0)

    def test_same_object_as_decorator_and_context(self):
        p = self.perf()
        fwd = p.stage("forward")

        @fwd
        def f():
            self.ms(1)

        with p.step():
            f()
            with fwd:
                self.ms(2)
            f()
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][1], 4.0)

    def test_recursive_decorated_stage_counts_nesting_not_double_time(self):
        p = self.perf()

        @p.stage("forward")
        def f(n):
            self.ms(1)
            if n:
                f(n - 1)

        with p.step():
            f(2)
        p.close(5)
        v = self.sink.vectors[0]
        self.assertEqual(v["durations_ms"][1], 3.0)
        self.assertEqual(v["nested"], 2)

    def test_async_function(self):
        p = self.perf()

        @p.stage("data")
        async def fetch():
            self.ms(5)
            await asyncio.sleep(0)
            return "batch"

        self.assertTrue(inspect.iscoroutinefunction(fetch))
        with p.step():
            self.assertEqual(asyncio.run(fetch()), "batch")
        p.close(5)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][0], 5.0)

    def test_nested_step_context_does_not_end_outer_step(self):
        p = self.perf()
        with p.step():
            with p.stage("data"):
                self.ms(1)
            with p.step():  # counted as nested, ignored
                self.ms(2)
            with p.stage("forward"):  # still inside the outer step
                self.ms(3)
        p.close(5)
        self.assertEqual(len(self.sink.vectors), 1)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][:2], [1.0, 3.0])
        self.assertEqual(self.sink.vectors[0]["wall_ms"], 6.0)
        self.assertEqual(p.stats()["nested"], 1)


class ExplicitAPITest(ClockedTest):
    def test_mark_partitions_the_step(self):
        p = self.perf()
        p.begin_step()
        self.assertTrue(p.begin_stage("data"))
        self.ms(2)
        p.mark("forward")
        self.ms(3)
        p.mark("backward")
        self.ms(4)
        p.mark(None)  # untimed: residual
        self.ms(1)
        p.mark("optimizer")
        self.ms(5)
        p.end_step()
        p.close(5)
        v = self.sink.vectors[0]
        self.assertEqual(v["durations_ms"], [2.0, 3.0, 4.0, 0.0, 5.0, 1.0])
        self.assertEqual(v["wall_ms"], 15.0)

    def test_begin_step_at_an_earlier_instant_charges_the_data_wait(self):
        p = self.perf()
        t_prev_end = p.clock()
        self.ms(7)  # the trainer fetches the batch before calling us
        now = p.clock()
        p.begin_step(at=t_prev_end)
        p.begin_stage("data", at=t_prev_end)
        p.mark("forward", at=now)
        self.ms(3)
        p.end_step()
        p.close(5)
        v = self.sink.vectors[0]
        self.assertEqual(v["durations_ms"][:2], [7.0, 3.0])
        self.assertEqual(v["wall_ms"], 10.0)

    def test_begin_step_ends_an_open_explicit_step(self):
        p = self.perf()
        for _ in range(3):
            p.begin_step()
            p.mark("forward")
            self.ms(1)
        p.end_step()
        p.close(5)
        self.assertEqual([v["step"] for v in self.sink.vectors], [0, 1, 2])
        self.assertEqual(p.stats()["nested"], 0)

    def test_end_step_discard_and_misuse(self):
        p = self.perf()
        p.end_step()  # nothing open: ignored
        self.assertFalse(p.end_stage())
        self.assertFalse(p.begin_stage("data"))  # outside a step: rejected
        p.begin_step()
        p.mark("data")
        self.assertFalse(p.begin_stage("forward"))  # one stage at a time
        p.end_step(discard=True)
        p.begin_step()
        with p.stage("data"):
            self.assertFalse(p.mark("forward"))  # a with-stage is active
            self.ms(1)
        p.end_step()
        p.close(5)
        st = p.stats()
        self.assertEqual(len(self.sink.vectors), 1)
        self.assertEqual(self.sink.vectors[0]["durations_ms"][0], 1.0)
        self.assertEqual((st["rejected"], st["nested"], st["steps"]), (1, 2, 1))

    def test_micro_ends_the_explicit_stage_at_the_boundary(self):
        p = self.perf(accumulation=2)
        p.begin_step()
        p.mark("backward")
        self.ms(4)
        t = p.clock()
        self.ms(1)
        p.micro(1, at=t)
        p.mark("data", at=t)
        self.ms(2)
        p.mark("backward")
        self.ms(3)
        p.end_step()
        p.close(5)
        v0, v1 = self.sink.vectors
        self.assertEqual((v0["durations_ms"][2], v0["wall_ms"]), (4.0, 4.0))
        self.assertEqual((v1["micro"], v1["durations_ms"][0], v1["durations_ms"][2], v1["wall_ms"]), (1, 3.0, 3.0, 6.0))

    def test_at_before_start_never_goes_negative(self):
        p = self.perf()
        p.begin_step()
        early = p.clock() - 5_000_000
        p.mark("data")
        p.end_stage(at=early)
        p.end_step(at=early)
        p.close(5)
        v = self.sink.vectors[0]
        self.assertEqual((v["durations_ms"][0], v["wall_ms"]), (0.0, 0.0))


class OrderHashTest(unittest.TestCase):
    # Values printed by internal/signal Schema.OrderHash (Go) for the same
    # schemas; the client must agree byte for byte.
    def test_matches_go(self):
        self.assertEqual(laggard.order_hash(laggard.default_schema()), "20c8b074ceccc24f")
        self.assertEqual(laggard.order_hash({"version": "stagefrontier/v1", "stages": [
            "pp.recv_wait", "model.fwd_loss_cpu_wall", "step.other_cpu_wall"]}), "43b68986dda8d625")
        self.assertEqual(laggard.order_hash({"version": "v2-ü", "stages": [
            "données.attente", "step.other_cpu_wall"]}), "b72c63a8d7446ba5")

    def test_order_matters(self):
        a = laggard.normalize_schema(["a", "b"])
        b = laggard.normalize_schema(["b", "a"])
        self.assertNotEqual(laggard.order_hash(a), laggard.order_hash(b))

    def test_role_group_mirrors_go(self):
        self.assertEqual(schema_mod.role_group(None), "default")
        self.assertEqual(schema_mod.role_group({"dp": 3, "tp": 1}), "default")
        self.assertEqual(schema_mod.role_group({"pp": 2}), "pp2")
        self.assertEqual(schema_mod.role_group({"pp": 1, "name": "decoder"}), "decoder/pp1")
        self.assertEqual(schema_mod.role_group({"name": "expert", "pp": -1}), "expert")

    def test_schema_constants_come_from_the_generated_vocabulary(self):
        from laggard import _vocab
        self.assertEqual(laggard.DEFAULT_STAGES, _vocab.DEFAULT_STAGES)
        self.assertEqual([laggard.STAGE_DATA, laggard.STAGE_FORWARD, laggard.STAGE_BACKWARD, laggard.STAGE_CALLBACK,
                          laggard.STAGE_OPTIM, laggard.STAGE_OTHER], list(_vocab.DEFAULT_STAGES))
        self.assertEqual(laggard.PROBE_FORWARD_CUDA, _vocab.PROBES[0])
        self.assertIs(schema_mod.SHORT_NAMES, _vocab.SHORT_NAMES)

    def test_schema_names_validated_like_go(self):
        for bad in (["a\rb"], ["x" * 129]):
            with self.assertRaises(ValueError):
                laggard.normalize_schema(bad)
        with self.assertRaises(ValueError):
            laggard.normalize_schema({"version": "v" * 129, "stages": ["a"]})


class RoleSchemaTest(ClockedTest):
    def test_pipeline_stage_declares_its_own_stage_list(self):
        p = self.perf(schema=["pp.recv_wait", "model.fwd_loss_cpu_wall"], role={"pp": 1, "name": "decoder"})
        with p.step():
            with p.stage("pp.recv_wait"):
                self.ms(2)
        p.close(5)
        # The job registers the default schema (so every role registers it
        # alike); the rank join carries the rank's own list.
        self.assertEqual(self.sink.job["schema"], laggard.default_schema())
        self.assertEqual(self.sink.rank["schema"]["stages"],
                         ["pp.recv_wait", "model.fwd_loss_cpu_wall", "step.other_cpu_wall"])
        self.assertEqual(self.sink.rank["role"]["pp"], 1)
        self.assertEqual(self.sink.vectors[0]["order_hash"], "43b68986dda8d625")
        self.assertEqual(p.group, "decoder/pp1")

    def test_default_group_rank_registers_its_schema_as_the_jobs(self):
        p = self.perf(schema=["a", "b"])
        with p.step():
            pass
        p.close(5)
        self.assertEqual(self.sink.job["schema"], self.sink.rank["schema"])
        self.assertEqual(self.sink.vectors[0]["order_hash"], laggard.order_hash(self.sink.rank["schema"]))

    def test_explicit_job_schema(self):
        p = self.perf(schema=["x"], role={"pp": 0}, job_schema=["a", "b"])
        with p.step():
            pass
        p.close(5)
        self.assertEqual(self.sink.job["schema"]["stages"], ["a", "b", "step.other_cpu_wall"])
        self.assertEqual(self.sink.rank["schema"]["stages"], ["x", "step.other_cpu_wall"])


class InitTest(ClockedTest):
    def test_init_returns_configured_perf(self):
        os.environ.update(LAGGARD_JOB="from-env", LAGGARD_LABELS="team=ml", LAGGARD_SYNC_MODEL="fsdp")
        try:
            p = laggard.init(sink=self.sink, rank=0, world_size=1, labels={"team": "infra"})
            self.assertIsInstance(p, laggard.Perf)
            with p.step():
                pass
            p.close(5)
        finally:
            for k in ("LAGGARD_JOB", "LAGGARD_LABELS", "LAGGARD_SYNC_MODEL"):
                os.environ.pop(k)
        self.assertEqual(self.sink.job["id"], "from-env")
        self.assertEqual(self.sink.job["labels"], {"team": "infra", "sync_model": "fsdp"})

    def test_disabled_returns_noop_with_same_api(self):
        for env in ({"LAGGARD_DISABLED": "1"}, {"LAGGARD_ENABLED": "0"}, {"LAGGARD_ENABLED": "false"}):
            with self.subTest(env=env):
                os.environ.update(env)
                try:
                    p = laggard.init(sink=self.sink)
                finally:
                    for k in env:
                        os.environ.pop(k)
                self.assertIsInstance(p, laggard.NullPerf)
        p = laggard.init(enabled=False)
        self.assertIsInstance(p, laggard.NullPerf)

        def f(x):
            return x

        self.assertIs(p.stage("forward")(f), f)  # decorators cost nothing
        self.assertIs(p.step()(f), f)
        with p.step():
            with p.stage("data"):
                p.begin_step()
                p.mark("forward")
                p.micro(1)
                with p.cuda_event_sample():
                    pass
        p.end_step()
        self.assertEqual(p.stats()["steps"], 0)
        self.assertFalse(p.stats()["enabled"])
        self.assertTrue(p.close())
        self.assertEqual(self.sink.vectors, [])

    def test_explicit_enabled_beats_env(self):
        os.environ["LAGGARD_DISABLED"] = "1"
        try:
            p = laggard.init(enabled=True, sink=self.sink, rank=0, world_size=1, job="x")
        finally:
            os.environ.pop("LAGGARD_DISABLED")
        self.assertIsInstance(p, laggard.Perf)
        p.close(5)

    def test_nullperf_has_every_public_perf_member(self):
        missing = [n for n in dir(laggard.Perf) if not n.startswith("_") and not hasattr(laggard.NullPerf, n)]
        self.assertEqual(missing, [])
        for n in ("begin_step", "end_step", "begin_stage", "end_stage", "mark", "micro", "step", "stage"):
            want = inspect.signature(getattr(laggard.Perf, n))
            got = inspect.signature(getattr(laggard.NullPerf, n))
            self.assertEqual(list(want.parameters), list(got.parameters), n)

    def test_log_level_from_env_and_argument(self):
        lg = logging.getLogger("laggard")
        saved = lg.level
        try:
            os.environ["LAGGARD_LOG_LEVEL"] = "debug"
            try:
                laggard.init(enabled=False)
            finally:
                os.environ.pop("LAGGARD_LOG_LEVEL")
            self.assertEqual(lg.level, logging.DEBUG)
            laggard.init(enabled=False, log_level="error")
            self.assertEqual(lg.level, logging.ERROR)
        finally:
            lg.setLevel(saved)


class ImportTest(unittest.TestCase):
    def test_import_pulls_in_no_framework(self):
        import subprocess
        code = ("import sys; sys.path.insert(0, %r); import laggard; "
                "bad = [m for m in ('torch', 'transformers', 'lightning', 'pytorch_lightning', "
                "'laggard.integrations') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
                % os.path.join(HERE, ".."))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
