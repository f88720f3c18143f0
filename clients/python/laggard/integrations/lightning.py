"""PyTorch Lightning callback (lightning.pytorch or pytorch_lightning).

    from laggard.integrations.lightning import LaggardCallback
    trainer = L.Trainer(..., callbacks=[LaggardCallback()])

With no `perf`, the callback calls laggard.init(accumulation=
trainer.accumulate_grad_batches, **kwargs) in on_train_start (so LAGGARD_*
configure it) and closes it in on_train_end. The class subclasses the
Callback of whichever Lightning package the program imported (else
lightning.pytorch, else pytorch_lightning; a plain class when neither is
installed); callback_class(base) makes one for another base.

What each stage measures, from Lightning's hooks (automatic optimization):

* data.next_wait: from the end of the previous batch's last observed work
  (its on_train_batch_end, or a later on_validation_end /
  on_train_epoch_end) to on_train_batch_start: Lightning fetches the batch
  in between. Callbacks that run their on_train_batch_end after this one
  are in here too, except a checkpoint save: when on_save_checkpoint was
  called since the last batch, the whole gap counts as callbacks and that
  step's data wait reads 0 (the save and the fetch cannot be told apart).
* model.fwd_loss_cpu_wall: on_train_batch_start to on_before_backward
  (training_step: forward and loss, and self.log calls in it).
* optim.step_cpu_wall: on_before_zero_grad to on_before_backward (Lightning
  zeroes gradients between training_step and backward), plus
  on_before_optimizer_step to on_train_batch_end: gradient clipping, the
  optimizer step, the LR scheduler and the loop's bookkeeping.
* model.backward_cpu_wall: on_before_backward to on_after_backward,
  including exposed gradient communication.
* callbacks.cpu_wall: from on_train_batch_end to the last on_validation_end
  / on_train_epoch_end before the next batch (validation loops), or the
  whole gap after a checkpoint save. Reported in schema order.
* step.other_cpu_wall: the rest, e.g. between on_after_backward and
  on_before_optimizer_step.

A step is one optimizer step: with accumulate_grad_batches = N, batch i is
microstep i % N. Step numbers are trainer.global_step (never reused).
Every hook is guarded: a failure is counted (hook_errors) and logged once,
never raised into the Trainer.
"""

from ..schema import STAGE_BACKWARD, STAGE_FORWARD, STAGE_OPTIM
from ._common import StepTimer, framework_base, safe


class _LightningHooks(StepTimer):
    def __init__(self, perf=None, *, close_on_end=True, close_timeout=5.0, **init_kwargs):
        StepTimer.__init__(self, perf, close_on_end=close_on_end, close_timeout=close_timeout, **init_kwargs)
        self._acc = 1
        self._ckpt = False

    @staticmethod
    def _accumulation(trainer):
        acc = getattr(trainer, "accumulate_grad_batches", 1)
        try:
            return max(1, int(acc))
        except (TypeError, ValueError):  # an old per-epoch schedule dict
            return 1

    @safe
    def on_train_start(self, trainer, pl_module):
        self._acc = self._accumulation(trainer)
        self._ensure_perf(self._acc)
        self._ckpt = False

    @safe
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args, **kwargs):
        if self.perf is None:
            self.on_train_start(trainer, pl_module)
        micro = batch_idx % self._acc if isinstance(batch_idx, int) else 0
        at = None
        if self._ckpt:
            # A checkpoint was saved since the last batch: the gap is
            # callbacks work, not data wait.
            self._ckpt = False
            at = self.perf.clock()
        now = self._boundary(micro == 0, getattr(trainer, "global_step", None), at=at)
        self._mark(STAGE_FORWARD, at=now)

    @safe
    def on_before_zero_grad(self, trainer, pl_module, optimizer, *args, **kwargs):
        self._mark(STAGE_OPTIM)

    @safe
    def on_before_backward(self, trainer, pl_module, loss, *args, **kwargs):
        self._mark(STAGE_BACKWARD)

    @safe
    def on_after_backward(self, trainer, pl_module, *args, **kwargs):
        self._mark(None)

    @safe
    def on_before_optimizer_step(self, trainer, pl_module, optimizer, *args, **kwargs):
        self._mark(STAGE_OPTIM)

    @safe
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args, **kwargs):
        self._step_done()

    @safe
    def on_validation_end(self, trainer, pl_module):
        self._work_done()

    @safe
    def on_train_epoch_end(self, trainer, pl_module, *args, **kwargs):
        self._work_done()

    @safe
    def on_save_checkpoint(self, trainer, pl_module, checkpoint, *args, **kwargs):
        if self._open:
            self._ckpt = True

    @safe
    def on_train_end(self, trainer, pl_module):
        self._finish()

    @safe
    def on_exception(self, trainer, pl_module, exception, *args, **kwargs):
        # The step that raised has no meaningful vector; flush the rest.
        self._finish(discard=True)


def callback_class(base):
    """A LaggardCallback subclassing `base` (e.g. pytorch_lightning.Callback
    when both Lightning packages are installed)."""
    if base is object:
        return type("LaggardCallback", (_LightningHooks,), {"__doc__": _LightningHooks.__doc__,
                                                             "__module__": __name__})

    def __init__(self, perf=None, **kwargs):
        _LightningHooks.__init__(self, perf, **kwargs)

    return type("LaggardCallback", (_LightningHooks, base), {"__init__": __init__, "__module__": __name__,
                                                              "__doc__": __doc__})


_LightningHooks.__doc__ = "Lightning callback timing the laggard stages; see laggard.integrations.lightning."
LaggardCallback = callback_class(framework_base(("lightning.pytorch", "Callback"), ("pytorch_lightning", "Callback")))
