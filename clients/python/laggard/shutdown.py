"""Flushing telemetry however the process ends (issue 16 item 2).

What is queued when a process ends — stage vectors, collective calls,
validation results — used to be lost on a signal. Every ending a process
can survive now flushes, within one deadline (LAGGARD_SHUTDOWN_TIMEOUT,
default 2 s, shared by everything that flushes):

* normal exit, sys.exit(), an uncaught exception, KeyboardInterrupt (the
  default SIGINT): one atexit hook closes every live Perf (close() as the
  program would call it).
* SIGTERM and SIGHUP (torchrun, Slurm, Kubernetes and a closing terminal
  send these), and SIGINT where a program made it terminate (SIG_DFL)
  instead of raising KeyboardInterrupt: when the signal's action was the
  default one (terminate), the shippers flush and the process then dies of
  the same signal — its exit status still says "killed by SIGTERM". When a
  program or launcher had its own handler, that handler is called exactly
  as before (its return, exception or exit decide what happens) and the
  shippers are only told to ship what they hold now; a later exit flushes
  through atexit. A signal that was ignored stays ignored; a second signal
  during the flush ends the process at once.

The handler of a Python signal runs only when the main thread executes
Python code; a main thread blocked in C (a collective waiting for a dead
peer) would never run it, and the process would outlive its SIGTERM. So a
watcher thread learns of the signal through signal.set_wakeup_fd (when no
one else uses it) and does the flush and the default ending itself.

Only the main thread can install handlers: a Perf built elsewhere installs
them at the first chance on the main thread (or never; atexit still
flushes). A forked child (DataLoader workers) gets the handlers, wakeup fd
and hooks of its parent removed, so it behaves as if laggard had installed
nothing; a Perf the child builds installs its own.

Other parts of laggard (and the KAIR capture uploader) flush through
register(fn, on_signal=...). SIGKILL, os._exit() and a crash of the
interpreter cannot be flushed: what they lose is in the README.
"""

import atexit
import logging
import os
import signal
import threading
import time
import weakref

log = logging.getLogger("laggard")

SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, n))

timeout = 2.0  # seconds; config.DEFAULT_SHUTDOWN_TIMEOUT, set by configure()
enabled_signals = True

_pid = os.getpid()
_hooks = ()  # (key, flush, hurry, on_signal, weak): functions or weak methods; replaced whole
_hooks_lock = threading.Lock()
_installed = {}  # signum -> (our handler, previous handler)
_dying = threading.Lock()  # held by whoever flushes for a terminating signal
_flusher = [None]  # thread ident of that flusher
_wake_r = _wake_w = None  # our wakeup pipe
_watcher = None
_main_signals = [0]  # terminating signals the main thread has seen
flushes = {"atexit": 0, "signal": 0, "hurried": 0, "hook_errors": 0}


def configure(timeout_s=None, signals=None):
    """Sets the flush deadline (seconds) and whether signal handlers may be
    installed; None leaves a value as it is."""
    global timeout, enabled_signals
    if timeout_s is not None:
        try:
            timeout = min(60.0, max(0.0, float(timeout_s)))
        except (TypeError, ValueError):
            pass
    if signals is not None:
        enabled_signals = bool(signals)


def register(flush, hurry=None, on_signal=False, weak=False):
    """Calls flush(deadline, from_signal) when the process ends (deadline is
    a time.monotonic() value every flush shares). flush starts its work and
    returns at once: either None, or a callable wait(deadline) that is
    called after every hook has started, so several flushes run side by
    side. It must never raise (a raise is counted and ignored).

    hurry(), if given, is called when a signal arrives that a handler of
    the program's own decides about: ship what is held now, close nothing.
    on_signal=True: flush is also called for a terminating signal —
    possibly on the watcher thread while the training thread is stopped
    anywhere, even holding a lock; it must then take no lock the training
    thread takes and touch nothing the training thread may be changing.
    weak=True holds bound methods weakly (their object may go away).
    Returns a key for unregister()."""
    global _hooks
    key = object()
    refs = [weakref.WeakMethod(f) if weak and f is not None else f for f in (flush, hurry)]
    with _hooks_lock:  # writers only: readers take the current tuple without a lock
        _hooks = _hooks + ((key, refs[0], refs[1], bool(on_signal), bool(weak)),)
    return key


def unregister(key):
    global _hooks
    with _hooks_lock:
        _hooks = tuple(h for h in _hooks if h[0] is not key)


def _live(from_signal, which):
    # No lock: a signal handler may have interrupted register() on the
    # same thread; the tuple is replaced whole, never changed in place.
    out = []
    hooks = _hooks
    for _key, flush, hurry_, on_sig, weak in hooks:
        if which == 1 and from_signal and not on_sig:
            continue
        ref = flush if which == 1 else hurry_
        fn = ref() if weak and ref is not None else ref
        if fn is not None:
            out.append(fn)
    return out


def flush_all(from_signal, deadline=None):
    """Runs every hook against one deadline; returns when all are done or
    the deadline passed. Never raises."""
    if deadline is None:
        deadline = time.monotonic() + timeout
    waits = []
    for fn in _live(from_signal, 1):
        try:
            w = fn(deadline, from_signal)
            if w is not None:
                waits.append(w)
        except Exception:
            flushes["hook_errors"] += 1
    for w in waits:
        try:
            w(deadline)
        except Exception:
            flushes["hook_errors"] += 1


def hurry():
    """Tells every shipper to ship what it holds now (no waiting, no
    closing): a handler of the program's own decides what the signal
    means, and the process may go on."""
    flushes["hurried"] += 1
    for fn in _live(False, 2):
        try:
            fn()
        except Exception:
            flushes["hook_errors"] += 1


# --- atexit ------------------------------------------------------------------

def _at_exit():
    if os.getpid() != _pid:
        return
    flushes["atexit"] += 1
    try:
        flush_all(False)
    except KeyboardInterrupt:  # Ctrl-C again while flushing: the user wants out now
        pass


atexit.register(_at_exit)


# --- signals -----------------------------------------------------------------

def _is_main_thread():
    return threading.current_thread() is threading.main_thread()


def install():
    """Installs the flush handlers for SIGTERM, SIGHUP and SIGINT where the
    signal's action allows it (module docstring). Idempotent; on a thread
    other than the main one it does nothing (a later call on the main
    thread installs). Never raises."""
    if not enabled_signals or not _is_main_thread():
        return False
    try:
        for sig in SIGNALS:
            if sig in _installed:
                continue
            prev = signal.getsignal(sig)
            # Ignored (SIG_IGN), installed outside Python (None), or SIGINT's
            # KeyboardInterrupt (atexit flushes on that way out): left alone.
            if prev is signal.SIG_IGN or prev is None or prev is signal.default_int_handler:
                continue
            if getattr(prev, "_laggard", False):
                continue
            h = _make_handler(sig)
            _installed[sig] = (h, prev)
            signal.signal(sig, h)
        if _installed and _watcher is None:
            _start_watcher()
        return True
    except Exception as e:  # e.g. an embedded interpreter without signals
        log.debug("laggard: no exit-flush signal handlers: %s: %s", type(e).__name__, e)
        return False


def installed():
    """{signal number: previous handler} of the handlers installed."""
    return {s: p for s, (_h, p) in _installed.items()}


def _make_handler(sig):
    def handler(signum, frame):
        _on_signal(signum, frame)
    handler._laggard = True
    handler.__qualname__ = handler.__name__ = "laggard_flush_on_%s" % signal.Signals(sig).name
    return handler


def _on_signal(signum, frame):
    """The Python handler (main thread)."""
    ent = _installed.get(signum)
    if ent is None or os.getpid() != _pid:  # a fork the at-fork hook missed: act as the previous handler
        _act_as(signum, frame, ent[1] if ent else signal.SIG_DFL)
        return
    handler, prev = ent
    if prev is signal.SIG_DFL:
        if signal.getsignal(signum) is not handler:
            # Another handler installed after ours called us: it decided
            # what this signal means (e.g. "stop after this step").
            hurry()
            return
        _main_signals[0] += 1
        _terminate(signum, on_watcher=False)
        return
    hurry()
    prev(signum, frame)  # the program's own handler, as before: its raise or exit are its own


def _act_as(signum, frame, prev):
    if callable(prev):
        prev(signum, frame)
    elif prev is signal.SIG_DFL:
        _die(signum, main=True)


def _terminate(signum, on_watcher):
    """Flushes (one thread does) and then ends the process of signum with
    its default action."""
    me = threading.get_ident()
    if _dying.acquire(blocking=False):
        _flusher[0] = me
        flushes["signal"] += 1
        try:
            flush_all(True)
        except BaseException:  # noqa: B902 - a second signal, a bug: end anyway
            pass
        _die(signum, main=not on_watcher)
        return
    if on_watcher:
        return
    if _flusher[0] == me or _main_signals[0] > 1:
        _die(signum, main=True)  # a second signal during the flush: at once
    # The watcher flushes; the main thread waits here (producing nothing
    # more) until it ends the process, and ends it itself if it does not.
    end = time.monotonic() + timeout + 1.0
    while time.monotonic() < end:
        time.sleep(0.01)
    _die(signum, main=True)


def _die(signum, main):
    """Ends the process by signum's default action (so its exit status says
    so); os._exit(128 + signum) if that somehow returns."""
    try:
        if main:
            signal.signal(signum, signal.SIG_DFL)
        else:  # signal.signal works on the main thread only: set it in libc
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
            libc.signal(signum, None)  # SIG_DFL is 0
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        except Exception:
            pass
        os.kill(os.getpid(), signum)
        time.sleep(1.0)
    except BaseException:  # noqa: B902
        pass
    os._exit(128 + signum)


def _start_watcher():
    """A thread that learns of signals as they arrive (set_wakeup_fd), even
    while the main thread is blocked in C. Only when no one else uses the
    wakeup fd (asyncio does): then the Python handler alone acts."""
    global _wake_r, _wake_w, _watcher
    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError, TypeError):
        os.close(r)
        os.close(w)
        return
    if old != -1:
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return
    _wake_r, _wake_w = r, w
    _watcher = threading.Thread(target=_watch, args=(r, os.getpid()), name="laggard-signals", daemon=True)
    _watcher.start()


def _watch(fd, pid):
    seen = 0  # terminating signals this thread has acted on
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data or os.getpid() != pid:
            try:
                os.close(fd)
            except OSError:
                pass
            return
        for signum in data:
            ent = _installed.get(signum)
            if ent is None:
                continue
            handler, prev = ent
            try:
                if prev is signal.SIG_DFL and signal.getsignal(signum) is handler:
                    seen += 1
                    if seen > 1:  # a second one while the first flushes: at once
                        _die(signum, main=False)
                    # The flush runs on a thread of its own, so that this one
                    # keeps reading and sees a second signal.
                    threading.Thread(target=_terminate, args=(signum, True), name="laggard-exit-flush",
                                     daemon=True).start()
                else:
                    hurry()
            except Exception:  # pragma: no cover - defensive
                flushes["hook_errors"] += 1


# --- fork --------------------------------------------------------------------

def _after_fork_child():
    """A forked child has none of its parent's shippers: drop their hooks,
    give the signals back their previous handlers and the wakeup fd back to
    no one, so the child ends exactly as it would without laggard."""
    global _pid, _hooks_lock, _hooks
    _pid = os.getpid()
    _hooks_lock = threading.Lock()
    _hooks = ()
    _remove()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_child)


def _remove():
    """Puts back the previous signal handlers, unsets our wakeup fd and
    closes its pipe."""
    global _watcher, _wake_r, _wake_w, _dying
    for sig, (h, prev) in list(_installed.items()):
        try:
            if signal.getsignal(sig) is h:
                signal.signal(sig, prev)
        except Exception:
            pass
    _installed.clear()
    if _wake_w is not None:
        try:
            old = signal.set_wakeup_fd(-1)
            if old not in (-1, _wake_w):  # set by someone after us: theirs stays
                signal.set_wakeup_fd(old)
        except Exception:
            pass
        for fd in (_wake_r, _wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
    _wake_r = _wake_w = None
    _watcher = None
    _dying = threading.Lock()
    _flusher[0] = None
    _main_signals[0] = 0

