"""The Hugging Face and Lightning callbacks, driven through the hook
sequences those trainers call (their packages are not installed here; a
fake module stands in where the base class matters), on a fake clock."""

import importlib
import importlib.util
import logging
import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import helpers  # noqa: E402
import laggard  # noqa: E402
from envutil import module_fixture  # noqa: E402
from helpers import CaptureSink  # noqa: E402
from laggard import perf as perf_mod  # noqa: E402
from laggard.integrations import huggingface as hf  # noqa: E402
from laggard.integrations import lightning as pl  # noqa: E402

D, F, B, C, O, R = range(6)  # positions in durations_ms


setUpModule, tearDownModule = module_fixture()


class Handle:
    def __init__(self, hooks, fn):
        self.hooks, self.fn = hooks, fn

    def remove(self):
        self.hooks.remove(self.fn)


class FakeModel:
    """Calls forward hooks like torch.nn.Module.__call__ does."""

    def __init__(self, clock, forward_ms):
        self.clock, self.forward_ms = clock, forward_ms
        self.pre, self.post = [], []

    def register_forward_pre_hook(self, fn):
        self.pre.append(fn)
        return Handle(self.pre, fn)

    def register_forward_hook(self, fn):
        self.post.append(fn)
        return Handle(self.post, fn)

    def __call__(self, x):
        for h in list(self.pre):
            assert h(self, (x,)) is None
        self.clock.advance_ms(self.forward_ms)
        out = x * 2
        for h in list(self.post):
            assert h(self, (x,), out) is None
        return out


class Args:
    def __init__(self, gradient_accumulation_steps=1):
        self.gradient_accumulation_steps = gradient_accumulation_steps


class State:
    def __init__(self):
        self.global_step = 0


class ClockedTest(helpers.ClockedTest):

    def ms(self, ms):
        self.clock.advance_ms(ms)


class HuggingFaceTest(ClockedTest):
    def run_trainer(self, cb, steps=2, accum=1, model=None, pre_optimizer_hook=True, log_every=1):
        """Replays transformers.Trainer's inner loop (4.46+ order)."""
        args, state, control = Args(accum), State(), object()
        cb.on_init_end(args, state, control)
        cb.on_train_begin(args, state, control, model=model)
        cb.on_epoch_begin(args, state, control)
        for _ in range(steps):
            self.ms(5)  # get_batch_samples: the data wait
            for i in range(accum):
                if i == 0:
                    cb.on_step_begin(args, state, control)
                self.ms(1)  # _prepare_inputs
                if model is not None:
                    model(1)  # forward: model.forward_ms
                else:
                    self.ms(3)
                self.ms(4)  # backward
                if i < accum - 1:
                    cb.on_substep_end(args, state, control)
            self.ms(0.5)  # clip grads
            if pre_optimizer_hook:
                cb.on_pre_optimizer_step(args, state, control)
            self.ms(2)  # optimizer.step
            cb.on_optimizer_step(args, state, control)
            self.ms(0.5)  # scheduler, zero_grad
            state.global_step += 1
            cb.on_step_end(args, state, control)
            if state.global_step % log_every == 0:
                self.ms(6)  # _maybe_log_save_evaluate
                cb.on_log(args, state, control, logs={})
        cb.on_epoch_end(args, state, control)
        cb.on_train_end(args, state, control)

    def test_stages_from_hooks_and_forward_hook(self):
        model = FakeModel(self.clock, forward_ms=3)
        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        self.run_trainer(cb, steps=3, model=model)
        vs = self.sink.vectors
        self.assertEqual([v["step"] for v in vs], [0, 1, 2])
        for v in vs:
            # data 5, fwd = prepare 1 + forward 3, bwd 4 + clip 0.5, optim 2 + 0.5, callbacks 6 (on_log)
            self.assertEqual(v["durations_ms"], [5.0, 4.0, 4.5, 6.0, 2.5, 0.0], v)
            self.assertEqual(v["wall_ms"], 22.0)
        self.assertTrue(cb.perf.closed)
        self.assertEqual(model.pre + model.post, [])  # hooks removed at train end
        self.assertEqual(self.sink.job["accumulation"], 1)
        self.assertEqual(cb.hook_errors, 0)

    def test_without_model_forward_and_backward_are_reported_together(self):
        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        self.run_trainer(cb, steps=1, model=None)
        self.assertEqual(self.sink.vectors[0]["durations_ms"], [5.0, 0.0, 8.5, 6.0, 2.5, 0.0])

    def test_gradient_accumulation_microsteps(self):
        model = FakeModel(self.clock, forward_ms=3)
        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        self.run_trainer(cb, steps=1, accum=3, model=model)
        vs = self.sink.vectors
        self.assertEqual(self.sink.job["accumulation"], 3)
        self.assertEqual([v.get("micro", 0) for v in vs], [0, 1, 2])
        self.assertEqual(vs[0]["durations_ms"], [5.0, 4.0, 4.0, 0.0, 0.0, 0.0])
        # microbatch k > 0: input preparation until its forward begins is data
        self.assertEqual(vs[1]["durations_ms"], [1.0, 3.0, 4.0, 0.0, 0.0, 0.0])
        self.assertEqual(vs[2]["durations_ms"], [1.0, 3.0, 4.5, 6.0, 2.5, 0.0])
        self.assertEqual(sum(v["wall_ms"] for v in vs), 5 + 3 * 8 + 0.5 + 2.5 + 6)

    def test_old_transformers_without_pre_optimizer_hook(self):
        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        self.run_trainer(cb, steps=1, model=FakeModel(self.clock, 3), pre_optimizer_hook=False)
        # the optimizer step itself falls into backward; only what follows it is optimizer
        self.assertEqual(self.sink.vectors[0]["durations_ms"], [5.0, 4.0, 6.5, 6.0, 0.5, 0.0])

    def test_no_log_step_charges_the_whole_gap_to_data(self):
        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        self.run_trainer(cb, steps=2, model=FakeModel(self.clock, 3), log_every=2)
        v0, v1 = self.sink.vectors
        self.assertEqual((v0["durations_ms"][C], v1["durations_ms"][D]), (0.0, 5.0))
        self.assertEqual(v1["durations_ms"][C], 6.0)

    def test_forward_hook_that_never_fires_falls_back(self):
        class Wrapped(FakeModel):
            def __call__(self, x):  # a wrapper calling the inner forward without hooks
                self.clock.advance_ms(self.forward_ms)
                return x

        cb = hf.LaggardCallback(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        with self.assertLogs("laggard", logging.WARNING) as cm:
            self.run_trainer(cb, steps=2, model=Wrapped(self.clock, 3))
        self.assertTrue(any("forward hook did not fire" in m for m in cm.output))
        v0, v1 = self.sink.vectors
        self.assertEqual(v0["durations_ms"][F], 8.5)  # first step: hook trusted, wrongly all forward
        self.assertEqual((v1["durations_ms"][F], v1["durations_ms"][B]), (0.0, 8.5))

    def test_lazy_perf_from_environment(self):
        d = os.path.join(os.environ.get("TMPDIR", "/tmp"), "laggard-hf-%d" % os.getpid())
        os.environ["LAGGARD_OUT"] = os.path.join(d, "{job}.jsonl")
        os.environ["LAGGARD_JOB"] = "hf-env"
        try:
            cb = hf.LaggardCallback(rank=0, world_size=1, flush_interval=0.01)
            self.run_trainer(cb, steps=2, accum=2)
        finally:
            os.environ.pop("LAGGARD_OUT")
            os.environ.pop("LAGGARD_JOB")
        with open(os.path.join(d, "hf-env.jsonl")) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1 + 4)
        self.assertIn('"accumulation":2', lines[0])

    def test_disabled_is_noop(self):
        os.environ["LAGGARD_DISABLED"] = "1"
        try:
            cb = hf.LaggardCallback()
            self.run_trainer(cb, steps=2, model=FakeModel(self.clock, 3))
        finally:
            os.environ.pop("LAGGARD_DISABLED")
        self.assertIsInstance(cb.perf, laggard.NullPerf)
        self.assertEqual(cb.hook_errors, 0)

    def test_hook_failures_never_reach_the_trainer(self):
        class Broken:
            accumulation = 1
            enabled = True
            closed = False
            schema = laggard.default_schema()

            def clock(self):
                raise RuntimeError("boom")

            def __getattr__(self, name):
                raise RuntimeError("boom")

        cb = hf.LaggardCallback(perf=Broken())
        self.run_trainer(cb, steps=2, model=FakeModel(self.clock, 3))
        self.assertGreater(cb.hook_errors, 0)

    def test_user_perf_with_too_little_accumulation_merges_microsteps(self):
        p = laggard.Perf(sink=self.sink, job="hf", rank=0, world_size=1, flush_interval=0.01)
        cb = hf.LaggardCallback(perf=p, close_on_end=False)
        self.run_trainer(cb, steps=1, accum=2, model=FakeModel(self.clock, 3))
        self.assertFalse(p.closed)
        p.close(5)
        self.assertEqual(len(self.sink.vectors), 1)
        self.assertEqual(p.stats()["rejected"], 0)
        v = self.sink.vectors[0]
        self.assertEqual(v["durations_ms"], [6.0, 7.0, 8.5, 6.0, 2.5, 0.0])


@unittest.skipUnless(importlib.util.find_spec("torch"), "needs torch (run with /usr/bin/python3)")
class HuggingFaceTorchTest(ClockedTest):
    def test_real_module_hooks_split_forward_and_leave_outputs_alone(self):
        import torch
        perf_mod._now = self._saved  # real time: torch runs for real
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        x = torch.randn(32, 64)
        want = model(x).detach().clone()
        cb = hf.LaggardCallback(sink=self.sink, job="hft", rank=0, world_size=1, flush_interval=0.01)
        args, state, control = Args(), State(), object()
        cb.on_train_begin(args, state, control, model=model)
        for _ in range(3):
            cb.on_step_begin(args, state, control)
            out = model(x)
            self.assertTrue(torch.equal(out, want))
            out.sum().backward()
            cb.on_pre_optimizer_step(args, state, control)
            model.zero_grad()
            state.global_step += 1
            cb.on_step_end(args, state, control)
        cb.on_train_end(args, state, control)
        self.assertEqual(len(self.sink.vectors), 3)
        for v in self.sink.vectors:
            self.assertGreater(v["durations_ms"][F], 0)
            self.assertGreater(v["durations_ms"][B], 0)
        self.assertEqual(len(model._forward_hooks) + len(model._forward_pre_hooks), 0)


class LightningTest(ClockedTest):
    def run_fit(self, cb, batches=4, accum=1, val_every=None, ckpt_at=None, fail_at=None):
        """Replays Lightning 2.x's automatic-optimization loop."""
        trainer = types.SimpleNamespace(accumulate_grad_batches=accum, global_step=0)
        module = object()
        cb.on_train_start(trainer, module)
        try:
            for i in range(batches):
                self.ms(5)  # fetch
                cb.on_train_batch_start(trainer, module, "batch", i)
                self.ms(3)  # training_step
                if fail_at == i:
                    raise RuntimeError("loss is nan")
                last = (i + 1) % accum == 0
                if i % accum == 0:
                    cb.on_before_zero_grad(trainer, module, "opt")
                    self.ms(0.5)
                cb.on_before_backward(trainer, module, "loss")
                self.ms(4)
                cb.on_after_backward(trainer, module)
                self.ms(0.25)  # closure bookkeeping
                if last:
                    cb.on_before_optimizer_step(trainer, module, "opt")
                    self.ms(2)
                    trainer.global_step += 1
                cb.on_train_batch_end(trainer, module, {}, "batch", i)
                if ckpt_at == i:
                    cb.on_save_checkpoint(trainer, module, {})
                    self.ms(7)
                if val_every and (i + 1) % val_every == 0:
                    self.ms(9)
                    cb.on_validation_end(trainer, module)
        except RuntimeError:
            cb.on_exception(trainer, module, RuntimeError("loss is nan"))
            return
        cb.on_train_epoch_end(trainer, module)
        cb.on_train_end(trainer, module)

    def cb(self, **kw):
        return pl.LaggardCallback(sink=self.sink, job="pl", rank=0, world_size=1, flush_interval=0.01, **kw)

    def test_stages_from_hooks(self):
        cb = self.cb()
        self.run_fit(cb, batches=3, val_every=2)
        vs = self.sink.vectors
        self.assertEqual([v["step"] for v in vs], [0, 1, 2])
        self.assertEqual(vs[0]["durations_ms"], [5.0, 3.0, 4.0, 0.0, 2.5, 0.25])
        self.assertEqual(vs[1]["durations_ms"], [5.0, 3.0, 4.0, 9.0, 2.5, 0.25])  # validation after batch 1
        self.assertTrue(cb.perf.closed)
        self.assertEqual(cb.hook_errors, 0)

    def test_accumulation(self):
        cb = self.cb()
        self.run_fit(cb, batches=4, accum=2)
        vs = self.sink.vectors
        self.assertEqual(self.sink.job["accumulation"], 2)
        self.assertEqual([(v["step"], v.get("micro", 0)) for v in vs], [(0, 0), (0, 1), (1, 0), (1, 1)])
        self.assertEqual(vs[0]["durations_ms"], [5.0, 3.0, 4.0, 0.0, 0.5, 0.25])
        self.assertEqual(vs[1]["durations_ms"], [5.0, 3.0, 4.0, 0.0, 2.0, 0.25])

    def test_checkpoint_gap_is_callbacks_not_data(self):
        cb = self.cb()
        self.run_fit(cb, batches=2, ckpt_at=0)
        v0, v1 = self.sink.vectors
        self.assertEqual(v0["durations_ms"][C], 12.0)  # save 7 + fetch 5, indistinguishable
        self.assertEqual(v1["durations_ms"][D], 0.0)

    def test_exception_discards_the_failed_step_and_flushes(self):
        cb = self.cb()
        self.run_fit(cb, batches=3, fail_at=2)
        self.assertEqual([v["step"] for v in self.sink.vectors], [0, 1])
        self.assertTrue(cb.perf.closed)

    def test_stalled_global_step_never_reuses_a_step_number(self):
        cb = self.cb()
        trainer = types.SimpleNamespace(accumulate_grad_batches=1, global_step=0)  # manual optimization, no step
        cb.on_train_start(trainer, None)
        for i in range(3):
            cb.on_train_batch_start(trainer, None, None, i)
            cb.on_train_batch_end(trainer, None, None, None, i)
        cb.on_train_end(trainer, None)
        self.assertEqual([v["step"] for v in self.sink.vectors], [0, 1, 2])


def importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


HAVE_HF = importable("transformers")
HAVE_LIGHTNING = importable("lightning") or importable("pytorch_lightning")


class BaseClassTest(unittest.TestCase):
    """With the framework importable, the callbacks subclass its callback
    base (a trainer checks isinstance); without it they are plain classes."""

    def setUp(self):
        self.fakes = []

    def tearDown(self):
        if self.fakes:  # undo the fake frameworks and rebuild the real classes
            for m in self.fakes:
                sys.modules.pop(m, None)
            importlib.reload(hf)
            importlib.reload(pl)

    def fake(self, name, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        self.fakes.append(name)
        return mod

    def test_framework_base_prefers_the_imported_package(self):
        from laggard.integrations._common import framework_base
        a = type("Callback", (), {})
        b = type("Callback", (), {})
        self.assertIs(framework_base(("laggard_no_such_pkg", "Callback")), object)
        self.fake("laggard_fake_b", Callback=b)
        self.assertIs(framework_base(("laggard_fake_a", "Callback"), ("laggard_fake_b", "Callback")), b)
        self.fake("laggard_fake_a", Callback=a)
        self.assertIs(framework_base(("laggard_fake_a", "Callback"), ("laggard_fake_b", "Callback")), a)
        self.assertTrue(issubclass(pl.callback_class(b), b))

    @unittest.skipIf(HAVE_HF, "transformers is installed")
    def test_plain_without_transformers(self):
        self.assertEqual(hf.LaggardCallback.__mro__[1:], (hf._HFHooks, hf.StepTimer, object))

    @unittest.skipIf(HAVE_LIGHTNING, "lightning is installed")
    def test_plain_without_lightning(self):
        self.assertEqual(pl.LaggardCallback.__mro__[1:], (pl._LightningHooks, pl.StepTimer, object))

    @unittest.skipIf(HAVE_HF, "transformers is installed")
    def test_fake_transformers_trainer_callback(self):
        class TrainerCallback:
            def on_substep_end(self, args, state, control, **kw):
                return "base"

        self.fake("transformers", TrainerCallback=TrainerCallback)
        mod = importlib.reload(hf)
        self.assertTrue(issubclass(mod.LaggardCallback, TrainerCallback))
        cb = mod.LaggardCallback(enabled=False)
        self.assertIsNone(cb.on_substep_end(Args(), State(), None))  # ours, not the base's

    @unittest.skipUnless(HAVE_HF, "needs transformers")
    def test_real_transformers_trainer_callback(self):
        import transformers
        self.assertTrue(issubclass(hf.LaggardCallback, transformers.TrainerCallback))

    @unittest.skipUnless(HAVE_LIGHTNING, "needs lightning")
    def test_real_lightning_callback(self):
        bases = [getattr(sys.modules.get(m), "Callback", None) for m in ("lightning.pytorch", "pytorch_lightning")]
        self.assertTrue(any(b is not None and issubclass(pl.LaggardCallback, b) for b in bases))


@unittest.skipUnless(HAVE_HF and importable("torch"), "needs transformers and torch")
class RealTrainerTest(unittest.TestCase):
    """transformers.Trainer itself, on a tiny model, with the callback."""

    def test_trainer_with_accumulation(self):
        import tempfile

        import torch
        import transformers

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 1)

            def forward(self, x, labels=None):
                out = self.lin(x).squeeze(-1)
                return {"loss": ((out - labels) ** 2).mean(), "logits": out}

        torch.manual_seed(0)
        ds = [{"x": torch.randn(8), "labels": torch.randn(())} for _ in range(64)]
        sink = CaptureSink()
        cb = hf.LaggardCallback(sink=sink, job="real-hf", rank=0, world_size=1, flush_interval=0.01)
        args = transformers.TrainingArguments(
            output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=5,
            logging_steps=2, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
            remove_unused_columns=False)
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=ds, callbacks=[cb])
        trainer.train()
        vs = sink.vectors
        self.assertEqual(cb.hook_errors, 0)
        self.assertEqual(sink.job["accumulation"], 2)
        self.assertEqual([(v["step"], v.get("micro", 0)) for v in vs], [(s, m) for s in range(5) for m in range(2)])
        for v in vs:
            self.assertGreater(v["durations_ms"][F], 0, v)  # the forward hook fired
            self.assertGreater(v["durations_ms"][B], 0, v)
        for v in vs[1::2]:
            self.assertGreater(v["durations_ms"][O], 0, v)
        self.assertTrue(cb.perf.closed)


@unittest.skipUnless(HAVE_LIGHTNING and importable("torch"), "needs lightning and torch")
class RealLightningTest(unittest.TestCase):
    """A Lightning Trainer itself, on a tiny module, with the callback."""

    def test_fit_with_accumulation(self):
        import tempfile

        import torch
        try:
            import lightning.pytorch as L
        except ImportError:
            import pytorch_lightning as L

        class Tiny(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return ((self.lin(x).squeeze(-1) - y) ** 2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64))
        sink = CaptureSink()
        cb = pl.LaggardCallback(sink=sink, job="real-pl", rank=0, world_size=1, flush_interval=0.01)
        trainer = L.Trainer(max_steps=3, accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=tempfile.mkdtemp(), callbacks=[cb])
        trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
        vs = sink.vectors
        self.assertEqual(cb.hook_errors, 0)
        self.assertEqual(sink.job["accumulation"], 2)
        self.assertEqual([(v["step"], v.get("micro", 0)) for v in vs], [(s, m) for s in range(3) for m in range(2)])
        for v in vs:
            self.assertGreater(v["durations_ms"][F], 0, v)
            self.assertGreater(v["durations_ms"][B], 0, v)
        for v in vs[1::2]:
            self.assertGreater(v["durations_ms"][O], 0, v)
        self.assertTrue(cb.perf.closed)


if __name__ == "__main__":
    unittest.main()
