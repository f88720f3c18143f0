"""What the framework callbacks share: the Perf they drive, a step state
machine placed on hook times, and a guard that keeps every hook from
raising into the trainer."""

import functools
import logging

from .. import config
from ..perf import NullPerf
from ..schema import STAGE_CALLBACK, STAGE_DATA

log = logging.getLogger("laggard")


def safe(fn):
    """Wraps a hook: an exception is counted and logged once per hook and
    error type, and the hook returns None (which both trainers read as "no
    change to the control flow")."""

    @functools.wraps(fn)
    def hook(self, *args, **kwargs):
        try:
            fn(self, *args, **kwargs)
        except Exception as e:
            self.hook_errors += 1
            config.warn_once(("hook", type(self).__name__, fn.__name__, type(e).__name__),
                             "laggard: %s.%s failed (%s: %s); telemetry of this step may be incomplete, "
                             "training continues", type(self).__name__, fn.__name__, type(e).__name__, e)
        return None

    return hook


def framework_base(*candidates):
    """The first importable framework callback class among (module, attr)
    pairs, preferring one whose module the program already imported (a
    trainer only accepts callbacks of its own package); object if none."""
    import importlib
    import sys

    ordered = sorted(candidates, key=lambda c: c[0] not in sys.modules)
    for mod, attr in ordered:
        try:
            return getattr(importlib.import_module(mod), attr)
        except Exception:  # absent or broken install: try the next one
            continue
    return object


class StepTimer:
    """Drives a Perf from hook calls. A step opens at the first microbatch's
    start hook and stays open after the trainer's step-end hook, so work the
    trainer does after it (logging, evaluation, checkpoints) is charged to
    that step's callbacks stage; the next start hook ends it at the last such
    boundary seen and charges the time from there to itself as the next
    step's data wait (the trainer fetches the batch in between)."""

    def __init__(self, perf=None, close_on_end=True, close_timeout=5.0, **init_kwargs):
        self.perf = perf
        self._own = perf is None
        self._init_kwargs = init_kwargs
        self.close_on_end = close_on_end
        self.close_timeout = close_timeout
        self.hook_errors = 0
        self._open = False  # a step is open
        self._t_last = None  # clock() at the last end-of-work boundary
        self._phase = None  # the stage running now (None: residual)
        self._micro = 0
        self._last_step = None
        self._stages = frozenset()

    # --- lifecycle --------------------------------------------------------
    def _ensure_perf(self, accumulation):
        acc = max(1, int(accumulation or 1))
        if self.perf is None or (self._own and getattr(self.perf, "closed", False)):
            import laggard
            try:
                self.perf = laggard.init(**dict({"accumulation": acc}, **self._init_kwargs))
            except Exception as e:
                log.error("laggard: %s: telemetry off: %s: %s", type(self).__name__, type(e).__name__, e)
                self.perf = NullPerf()
            self._own = True
        elif getattr(self.perf, "enabled", True) and getattr(self.perf, "accumulation", acc) < acc:
            config.warn_once(("accumulation", id(self.perf)),
                             "laggard: the Perf was built with accumulation=%d but the trainer accumulates %d "
                             "microbatches per step; the extra microbatches are merged into the last microstep",
                             self.perf.accumulation, acc)
        try:
            self._stages = frozenset(self.perf.schema["stages"])
        except Exception:
            self._stages = frozenset()
        self._open = False
        self._phase = None
        self._t_last = self.perf.clock()

    def _finish(self, discard=False):
        p = self.perf
        if p is None:
            return
        if self._open:
            t = self._t_last if self._phase == STAGE_CALLBACK and self._t_last is not None else p.clock()
            p.end_step(at=t, discard=discard)
            self._open = False
        self._phase = None
        if self.close_on_end:
            p.close(self.close_timeout)

    # --- boundaries --------------------------------------------------------
    def _step_number(self, step):
        # The trainer's optimizer-step counter keeps ranks aligned and
        # survives resumption; never reuse a number (a stalled counter, e.g.
        # manual optimization, would overwrite earlier steps).
        try:
            s = int(step)
        except (TypeError, ValueError):
            s = None
        if s is None or (self._last_step is not None and s <= self._last_step):
            s = 0 if self._last_step is None else self._last_step + 1
        self._last_step = s
        return s

    def _boundary(self, new_step, step=None, at=None):
        """Opens a step (new_step) or the next microstep at `at`, default the
        last end-of-work boundary, and starts the data stage there. Returns
        now, where the data wait ends."""
        p = self.perf
        now = p.clock()
        t = at if at is not None else self._t_last
        if t is None or t > now:
            t = now
        if new_step or not self._open:
            if self._open:
                p.end_step(at=t)
            p.begin_step(self._step_number(step), at=t)
            self._open = True
            self._micro = 0
        else:
            self._micro += 1
            if self._micro < p.accumulation:
                p.micro(self._micro, at=t)
        self._mark(STAGE_DATA, at=t)
        return now

    def _mark(self, stage, at=None):
        if self._open:
            # A custom schema without this stage: its time stays residual.
            self.perf.mark(stage if stage in self._stages else None, at=at)
            self._phase = stage

    def _step_done(self):
        if self._open:
            t = self.perf.clock()
            self._mark(STAGE_CALLBACK, at=t)
            self._t_last = t

    def _work_done(self):
        # Logging, evaluation or a checkpoint finished after the step's end
        # hook: it belongs to that step's callbacks, not to the next data wait.
        if self._open and self._phase == STAGE_CALLBACK:
            self._t_last = self.perf.clock()
