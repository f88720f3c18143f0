"""Registration with the node agent over its Unix socket (SysOM-AI §4: the
training process announces its pid, job, rank and communicators so the
agent can attribute CPU stacks and OS counters to ranks).

laggard.init() calls announce_perf() when LAGGARD_AGENT_SOCKET names the
socket. Everything happens on a daemon thread: a connect timeout of 0.2 s,
errors logged once and never raised into training. The connection stays
open for the life of the process; the agent reads its end-of-file as "this
rank is gone". Protocol (one JSON line each way):

    -> {"v":1,"pid":123,"job":"j","rank":0,"world":4,"local_rank":0,"host":"h","comms":[...]}
    <- {"ok":true}  or  {"ok":false,"error":"<field>: ..."}

A later announce() on the same process (e.g. with its communicators once
known) is sent on the same connection and replaces the registration.
"""

import json
import logging
import os
import socket
import threading

ENV = "LAGGARD_AGENT_SOCKET"
CONNECT_TIMEOUT = 0.2  # seconds; the agent is local, so anything slower means it is not there
ANSWER_TIMEOUT = 2.0
MAX_ANSWER = 64 << 10

_log = logging.getLogger("laggard")
_lock = threading.Lock()  # guards _sock, _warned, _last
# Serialises whole exchanges: two concurrent announces must not each open a
# connection, or the later one would close whichever socket was stored,
# maybe the one that owns the agent's entry (it then expires while the
# process lives).
_send_lock = threading.Lock()
_sock = None  # the open registration connection, kept for the process lifetime
_warned = False
_last = None  # (ok, error) of the last answer, for stats and tests


def encode(job, rank, world, local_rank=0, comms=None, host=None, pid=None):
    """The announcement line (bytes, newline-terminated)."""
    msg = {"v": 1, "pid": int(pid if pid is not None else os.getpid()), "job": str(job), "rank": int(rank),
           "world": int(world), "local_rank": int(local_rank or 0)}
    if host:
        msg["host"] = str(host)
    if comms:
        msg["comms"] = [dict(c) for c in comms]
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def announce(job, rank, world, local_rank=0, comms=None, host=None, path=None):
    """Announces this process to the agent on a daemon thread; returns the
    thread, or None when no socket is configured. Never raises."""
    try:
        path = path or os.environ.get(ENV)
        if not path:
            return None
        line = encode(job, rank, world, local_rank, comms, host=host or socket.gethostname())
        t = threading.Thread(target=_send, args=(path, line), name="laggard-agent-register", daemon=True)
        t.start()
        return t
    except Exception as e:  # never into training
        _warn("could not announce to the node agent: %s: %s", type(e).__name__, e)
        return None


def announce_perf(perf):
    """announce() with the identity of a laggard Perf (rank and world from
    it, else from torch.distributed or RANK/WORLD_SIZE/LOCAL_RANK)."""
    try:
        if not os.environ.get(ENV):
            return None
        from .perf import _detect_identity
        r, w, lr = _detect_identity()
        rank = perf.rank if perf.rank is not None else r
        world = perf.world_size if perf.world_size is not None else w
        local = getattr(perf, "_local_rank", None)
        return announce(perf.job_id, rank, world, lr if local is None else local, host=getattr(perf, "_host", None))
    except Exception as e:
        _warn("could not announce to the node agent: %s: %s", type(e).__name__, e)
        return None


def last_answer():
    """(ok, error) of the agent's last answer, or None before any."""
    with _lock:
        return _last


def _warn(fmt, *args):
    global _warned
    with _lock:
        if _warned:
            _log.debug("laggard: " + fmt, *args)
            return
        _warned = True
    _log.warning("laggard: " + fmt, *args)


def _send(path, line):
    with _send_lock:
        _exchange(path, line)


def _exchange(path, line):
    global _sock, _last
    try:
        with _lock:
            s = _sock
            _sock = None  # taken; put back below unless the agent closed it
        fresh = s is None
        if fresh:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(CONNECT_TIMEOUT)
            try:
                s.connect(path)
            except Exception:
                s.close()
                raise
        try:
            s.settimeout(ANSWER_TIMEOUT)
            s.sendall(line)
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > MAX_ANSWER:
                    break
        except Exception:
            s.close()  # a half-done exchange: the next announce reconnects
            raise
        try:
            ans = json.loads(buf.decode("utf-8", "replace") or "{}")
        except ValueError:
            ans = {"ok": False, "error": "unreadable answer %r" % buf[:80]}
        ok, err = bool(ans.get("ok")), str(ans.get("error") or "")
        with _lock:
            _last = (ok, err)
        if not buf:
            s.close()
            _warn("node agent at %s closed the registration connection", path)
            return
        if not ok:
            _warn("node agent at %s refused the registration: %s", path, err)
            if fresh:
                # The agent closes a connection whose first announcement it
                # refused; nothing of ours is registered on it.
                s.close()
                return
        with _lock:
            _sock = s  # kept open: EOF tells the agent this process is gone
    except Exception as e:
        _warn("node agent socket %s: %s: %s (stack profiles of this rank will not be attributed)", path,
              type(e).__name__, e)


def _after_fork_in_child():
    # A forked worker (e.g. a DataLoader process) must not hold the
    # parent's registration open: close the inherited descriptor only.
    global _sock, _send_lock
    _send_lock = threading.Lock()  # a parent thread may have held it at fork
    s, _sock = _sock, None
    if s is not None:
        try:
            s.close()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
