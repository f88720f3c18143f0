"""Hugging Face transformers.Trainer callback.

    from laggard.integrations.huggingface import LaggardCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[LaggardCallback()])

With no `perf`, the callback calls laggard.init(accumulation=
args.gradient_accumulation_steps, **kwargs) in on_train_begin (so LAGGARD_*
configure it) and closes it in on_train_end.

What each stage measures — Trainer has no hook around the data fetch or
around forward alone, so the boundaries are these, and nothing is guessed:

* data.next_wait: from the end of the previous step's last observed work
  (its on_step_end, or a later on_log / on_evaluate / on_save /
  on_epoch_end) to on_step_begin. Trainer fetches the batch (all
  accumulation microbatches, in recent versions) in between; epoch
  rollover and the dataloader's re-iteration land here too.
* model.fwd_loss_cpu_wall: from on_step_begin to the end of the model's
  forward, seen by a forward hook the callback registers on the `model`
  Trainer passes to on_train_begin. It includes input preparation (moving
  the batch to the device) and DDP's pre-forward work.
* model.backward_cpu_wall: from the end of forward to on_pre_optimizer_step:
  loss post-processing, backward with its exposed gradient communication,
  and gradient clipping (Trainer clips before on_pre_optimizer_step).
  Without a forward hook (split_forward=False, no model, or a model whose
  forward hook never fires — detected after one step and warned about)
  forward and backward are reported together here and forward reads 0.
* optim.step_cpu_wall: from on_pre_optimizer_step through the optimizer
  step, the scheduler and zero_grad, to on_step_end. On versions without
  on_pre_optimizer_step it starts at on_optimizer_step, so the optimizer's
  own step is inside backward.
* callbacks.cpu_wall: from on_step_end to the last on_log / on_evaluate /
  on_save / on_epoch_end before the next step begins — logging (with its
  loss all-reduce), evaluation and checkpoint saving. It runs after the
  optimizer but is reported in schema order.
* step.other_cpu_wall: the rest (the residual).

Gradient accumulation: each on_substep_end starts the next microstep (the
Perf must have accumulation >= gradient_accumulation_steps, which it has
when the callback builds it). Microbatch k > 0 starts with a data stage
that lasts until its forward begins (on older versions that fetch per
microbatch, the fetch; otherwise only input preparation).

Step numbers are Trainer's global_step, so all ranks agree and a resumed
run continues its numbering. Every hook is guarded: a telemetry failure is
counted (hook_errors) and logged once, never raised into the Trainer.
"""

from ..schema import STAGE_BACKWARD, STAGE_DATA, STAGE_FORWARD, STAGE_OPTIM
from ._common import StepTimer, config, framework_base, safe

_Base = framework_base(("transformers", "TrainerCallback"))


class _HFHooks(StepTimer):
    def __init__(self, perf=None, *, split_forward=True, close_on_end=True, close_timeout=5.0, **init_kwargs):
        StepTimer.__init__(self, perf, close_on_end=close_on_end, close_timeout=close_timeout, **init_kwargs)
        self.split_forward = split_forward
        self._handles = []
        self._hooked = False  # forward hooks registered and trusted
        self._fwd_seen = False  # the forward hook fired during this step

    # --- forward hooks (the only way to split forward from backward) -------
    def _hook_model(self, model):
        self._unhook()
        pre = getattr(model, "register_forward_pre_hook", None)
        post = getattr(model, "register_forward_hook", None)
        if model is None or not callable(pre) or not callable(post):
            return
        self._handles = [pre(self._forward_begins), post(self._forward_ends)]
        self._hooked = True

    def _unhook(self):
        for h in self._handles:
            try:
                h.remove()
            except Exception:
                pass
        self._handles = []
        self._hooked = False

    # Both return None: a forward hook's return value would replace the
    # model's inputs or output.
    def _forward_begins(self, module, inputs):
        try:
            if self._open and self._phase == STAGE_DATA:
                self._mark(STAGE_FORWARD)
        except Exception:
            self.hook_errors += 1

    def _forward_ends(self, module, inputs, output):
        try:
            if self._open and self._phase == STAGE_FORWARD:
                self._fwd_seen = True
                self._mark(STAGE_BACKWARD)
        except Exception:
            self.hook_errors += 1

    def _after_data(self):
        return STAGE_FORWARD if self._hooked else STAGE_BACKWARD

    # --- TrainerCallback events ------------------------------------------
    @safe
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._ensure_perf(getattr(args, "gradient_accumulation_steps", 1))
        self._unhook()
        if self.split_forward and model is not None and self.perf.enabled:
            self._hook_model(model)

    @safe
    def on_step_begin(self, args, state, control, **kwargs):
        if self.perf is None:
            self._ensure_perf(getattr(args, "gradient_accumulation_steps", 1))
        now = self._boundary(True, getattr(state, "global_step", None))
        self._fwd_seen = False
        self._mark(self._after_data(), at=now)

    @safe
    def on_substep_end(self, args, state, control, **kwargs):
        if self._open:
            t = self.perf.clock()
            self._boundary(False, at=t)
            if not self._hooked:
                self._mark(STAGE_BACKWARD, at=t)

    @safe
    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._mark(STAGE_OPTIM)

    @safe
    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._phase != STAGE_OPTIM:  # no on_pre_optimizer_step in this version
            self._mark(STAGE_OPTIM)

    @safe
    def on_step_end(self, args, state, control, **kwargs):
        if self._open and self._hooked and not self._fwd_seen:
            # The hooked module is not what Trainer calls (a wrapper swapped
            # in after on_train_begin?): stop claiming a forward split.
            self._unhook()
            config.warn_once(("hf-forward-hook",), "laggard: the model's forward hook did not fire during a "
                             "training step; forward and backward are reported together as %s from now on",
                             STAGE_BACKWARD)
        self._step_done()

    @safe
    def on_log(self, args, state, control, **kwargs):
        self._work_done()

    @safe
    def on_evaluate(self, args, state, control, **kwargs):
        self._work_done()

    @safe
    def on_save(self, args, state, control, **kwargs):
        self._work_done()

    @safe
    def on_epoch_end(self, args, state, control, **kwargs):
        self._work_done()

    @safe
    def on_train_end(self, args, state, control, **kwargs):
        self._unhook()
        self._finish()


if _Base is object:
    class LaggardCallback(_HFHooks):
        """transformers.TrainerCallback timing the laggard stages (see the
        module docstring). transformers is not installed, so this is a
        plain class with the same hook methods."""

        def on_init_end(self, args, state, control, **kwargs):
            pass

        def on_epoch_begin(self, args, state, control, **kwargs):
            pass

        def on_predict(self, args, state, control, **kwargs):
            pass

        def on_prediction_step(self, args, state, control, **kwargs):
            pass
else:
    class LaggardCallback(_HFHooks, _Base):
        """transformers.TrainerCallback timing the laggard stages (see the
        module docstring)."""

        def __init__(self, perf=None, **kwargs):
            _HFHooks.__init__(self, perf, **kwargs)
