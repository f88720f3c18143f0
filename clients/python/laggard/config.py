"""Configuration from LAGGARD_* environment variables.

Explicit arguments to laggard.init() / laggard.Perf() always win; the
environment fills in what the code left out, so a launcher or an operator
can point, label or switch off telemetry without touching the training
script. A bad value logs one clear warning and falls back; nothing here
ever raises.

Job and run ids are derived so every rank of one launch agrees without
talking to the others: they only read what the launcher (torchrun, Slurm)
put in every rank's environment, never timestamps or per-rank pids.
"""

import logging
import os
import re
import socket
import sys
import time
import urllib.parse

log = logging.getLogger("laggard")

DEFAULT_SERVER = "http://127.0.0.1:7070"
SYNC_MODELS = ("ddp", "fsdp", "zero1")
# internal/signal/job.go jobIDRe; run ids are at most 128 bytes there too.
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_RUN_ID = 128
MAX_IDENT = 128  # launch and process strings (docs: incarnation protocol)
DEFAULT_SHUTDOWN_TIMEOUT = 2.0
MAX_SHUTDOWN_TIMEOUT = 60.0
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL, "fatal": logging.CRITICAL}

# name -> what it does (the README's table is written from this).
ENV_VARS = {
    "LAGGARD_SERVER": "server URL (default %s)" % DEFAULT_SERVER,
    "LAGGARD_JOB": "job id shared by every rank (default: derived, see job_id_from_env)",
    "LAGGARD_RUN_ID": "run (incarnation) id sent with the job registration (default: derived)",
    "LAGGARD_OUT": "write the stage-matrix JSONL here instead of a server; {rank} and {job} are substituted",
    "LAGGARD_DISABLED": "1 turns telemetry off (laggard.init() returns a no-op object)",
    "LAGGARD_ENABLED": "0 turns telemetry off, like LAGGARD_DISABLED=1",
    "LAGGARD_LABELS": "job labels, k=v,k2=v2",
    "LAGGARD_SYNC_MODEL": "sets the sync_model label: " + "|".join(SYNC_MODELS),
    "LAGGARD_TOKEN": "sent as Authorization: Bearer <token> on every request",
    "LAGGARD_LOG_LEVEL": "level of the 'laggard' logger: debug|info|warning|error|critical",
    "LAGGARD_COLLECTIVES": "1 captures torch.distributed collective calls (laggard.collectives); default off",
    "LAGGARD_VALIDATION": "1 takes part in Greyhound validation plans (laggard.validation); default off",
    "LAGGARD_CAPTURE": "0 turns KAIR operator-trace captures off (default on with a server and torch; laggard.capture)",
    "LAGGARD_CAPTURE_POLL_S": "seconds between capture polls / clock heartbeats (default 2)",
    "LAGGARD_CAPTURE_DIR": "directory for exported traces before upload, at most 512 MiB (default <tmp>/laggard-capture)",
    "LAGGARD_AGENT_SOCKET": "node agent socket path; laggard.init() announces pid/job/rank there (agent_socket)",
    "LAGGARD_INCARNATION": "what every process of this launch shares (default: derived from torchelastic or Slurm; see "
                           "launch_from_env)",
    "LAGGARD_SHUTDOWN_TIMEOUT": "seconds the exit flush (atexit, SIGTERM, SIGHUP) may delay the process end, 0-60 "
                                "(default 2)",
    "LAGGARD_SIGNALS": "0: install no SIGTERM/SIGHUP/SIGINT flush handlers (atexit still flushes); default 1",
}

_warned = set()


def warn_once(key, msg, *args):
    """Logs msg once per key for the life of the process (several Perf
    objects, one per phase, must not repeat the same complaint)."""
    if key in _warned:
        return
    _warned.add(key)
    log.warning(msg, *args)


def _bad(name, raw, why, fallback):
    warn_once(("env", name, raw), "laggard: ignoring %s=%r: %s; %s", name, raw, why, fallback)


def parse_bool(raw):
    """True/False for the usual spellings, None for empty or unknown."""
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    return None


def parse_labels(raw):
    """'k=v,k2=v2' -> ({k: v}, [bad items])."""
    labels, bad = {}, []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        k, sep, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not sep or not k:
            bad.append(item)
            continue
        labels[k] = v
    return labels, bad


def parse_log_level(raw):
    v = raw.strip().lower()
    if v in _LEVELS:
        return _LEVELS[v]
    try:
        return int(v)
    except ValueError:
        return None


def check_server(url):
    """None if url is usable by HTTPSink, else why not."""
    u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    if u.scheme not in ("http", "https"):
        return "scheme must be http or https"
    if not u.hostname:
        return "no host"
    try:
        u.port
    except ValueError as e:
        return str(e)
    return None


def from_env(environ=None):
    """Parses the LAGGARD_* variables into a dict with the keys server, job,
    run_id, out, enabled, labels, sync_model, token, log_level, collectives,
    validation, capture, capture_poll_s, capture_dir, incarnation,
    shutdown_timeout, signals — only those
    that are set and valid. Invalid ones log one warning each and are left
    out, so the caller falls back to its default."""
    env = os.environ if environ is None else environ
    c = {}

    def get(name):
        v = env.get(name)
        if v is None:
            return None
        v = v.strip()
        return v or None

    v = get("LAGGARD_SERVER")
    if v:
        why = check_server(v)
        if why:
            _bad("LAGGARD_SERVER", v, why, "using %s" % DEFAULT_SERVER)
        else:
            c["server"] = v
    v = get("LAGGARD_JOB")
    if v:
        if JOB_ID_RE.match(v):
            c["job"] = v
        else:
            _bad("LAGGARD_JOB", v, "a job id must match %s" % JOB_ID_RE.pattern, "deriving the job id instead")
    for name, key, most, fallback in (("LAGGARD_RUN_ID", "run_id", MAX_RUN_ID, "deriving the run id instead"),
                                      ("LAGGARD_INCARNATION", "incarnation", MAX_IDENT,
                                       "deriving it from the launcher instead")):
        v = get(name)
        if not v:
            continue
        if len(v.encode("utf-8")) <= most:
            c[key] = v
        else:
            _bad(name, v, "longer than %d bytes" % most, fallback)
    v = get("LAGGARD_OUT")
    if v:
        c["out"] = v
    for name, off_when in (("LAGGARD_DISABLED", True), ("LAGGARD_ENABLED", False)):
        v = get(name)
        if v is None:
            continue
        b = parse_bool(v)
        if b is None:
            _bad(name, v, "want 1/0, true/false, yes/no or on/off", "telemetry stays as configured")
        elif b == off_when:
            c["enabled"] = False  # either switch turning telemetry off wins
        else:
            c.setdefault("enabled", True)
    v = get("LAGGARD_LABELS")
    if v:
        labels, bad = parse_labels(v)
        if bad:
            _bad("LAGGARD_LABELS", v, "items %s are not k=v" % ", ".join(repr(b) for b in bad), "skipping them")
        if labels:
            c["labels"] = labels
    v = get("LAGGARD_SYNC_MODEL")
    if v:
        if v.lower() in SYNC_MODELS:
            c["sync_model"] = v.lower()
        else:
            _bad("LAGGARD_SYNC_MODEL", v, "want one of " + ", ".join(SYNC_MODELS), "no sync_model label")
    v = get("LAGGARD_TOKEN")
    if v:
        c["token"] = v  # never logged
    for name, key, fallback in (("LAGGARD_COLLECTIVES", "collectives", "left off"),
                                ("LAGGARD_VALIDATION", "validation", "left off"),
                                ("LAGGARD_CAPTURE", "capture", "left off"),
                                ("LAGGARD_SIGNALS", "signals", "signal handlers stay on")):
        v = get(name)
        if v is None:
            continue
        b = parse_bool(v)
        if b is None:
            _bad(name, v, "want 1/0, true/false, yes/no or on/off", fallback)
        else:
            c[key] = b
    for name, key, lo, hi, fallback in (
            ("LAGGARD_CAPTURE_POLL_S", "capture_poll_s", 0.05, 3600, "polling every 2 s"),
            ("LAGGARD_SHUTDOWN_TIMEOUT", "shutdown_timeout", 0, MAX_SHUTDOWN_TIMEOUT,
             "using %g" % DEFAULT_SHUTDOWN_TIMEOUT)):
        v = get(name)
        if not v:
            continue
        try:
            f = float(v)
        except ValueError:
            f = None
        if f is None or not (lo <= f <= hi):
            _bad(name, v, "want seconds in [%g, %g]" % (lo, hi), fallback)
        else:
            c[key] = f
    v = get("LAGGARD_CAPTURE_DIR")
    if v:
        c["capture_dir"] = v
    v = get("LAGGARD_LOG_LEVEL")
    if v:
        lvl = parse_log_level(v)
        if lvl is None:
            _bad("LAGGARD_LOG_LEVEL", v, "want debug, info, warning, error or critical", "level unchanged")
        else:
            c["log_level"] = lvl
    return c


def apply_log_level(level):
    """Sets the 'laggard' logger's level (a name or a number); never raises."""
    if level is None:
        return
    if isinstance(level, str):
        lvl = parse_log_level(level)
        if lvl is None:
            warn_once(("log_level", level), "laggard: ignoring log_level=%r: want debug, info, warning, error or critical", level)
            return
        level = lvl
    try:
        log.setLevel(level)
    except (TypeError, ValueError):
        warn_once(("log_level", repr(level)), "laggard: ignoring log_level=%r", level)


def sanitize_id(s):
    """Turns a derived value into a valid job id ('' if nothing is left)."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", s)
    s = re.sub(r"^[^A-Za-z0-9]+", "", s)
    return s[:128].rstrip("-")


def _elastic_run_id(env):
    v = (env.get("TORCHELASTIC_RUN_ID") or "").strip()
    return v if v and v.lower() != "none" else None


def script_stem(argv=None):
    """The training script's name: train.py -> 'train'; `python -m pkg`
    (pkg/__main__.py) -> 'pkg'; interactive or -c -> 'python'."""
    if argv is None:
        argv = sys.argv
    a0 = argv[0] if argv else ""
    if not a0 or a0 in ("-c", "-m", "-"):
        return "python"
    base = os.path.basename(a0.rstrip("/\\"))
    stem = os.path.splitext(base)[0]
    if stem == "__main__":
        stem = os.path.basename(os.path.dirname(os.path.abspath(a0))) or stem
    return stem or "python"


def job_id_from_env(environ=None, argv=None):
    """The job id when none was given: torchrun's TORCHELASTIC_RUN_ID
    (unless 'none'), else slurm-<SLURM_JOB_ID>[-<SLURM_STEP_ID>], else the
    script's stem. Every rank of a launch sees the same values."""
    env = os.environ if environ is None else environ
    rid = _elastic_run_id(env)
    if rid:
        cand = rid
    elif (env.get("SLURM_JOB_ID") or "").strip():
        cand = "slurm-" + env["SLURM_JOB_ID"].strip()
        step = (env.get("SLURM_STEP_ID") or "").strip()
        if step:
            cand += "-" + step
    else:
        cand = script_stem(argv)
    return sanitize_id(cand) or "python"


def run_id_from_env(world=None, environ=None, host=None, pid=None, ppid=None):
    """The run (incarnation) id when none was given, or None.

    TORCHELASTIC_RUN_ID (unless 'none'), else SLURM_JOB_ID[.SLURM_STEP_ID].
    Else, for a single-node launch (LOCAL_WORLD_SIZE == WORLD_SIZE, set by
    torchrun and similar launchers) '<host>:<launcher pid>[:<MASTER_PORT>]'
    — the launcher is every local rank's parent. For a lone process without
    a launcher (world 1) '<host>:<pid>'. Otherwise there is nothing every
    rank agrees on, and no run id is sent.
    """
    env = os.environ if environ is None else environ
    rid = _elastic_run_id(env)
    if rid:
        return rid[:MAX_RUN_ID]
    job = (env.get("SLURM_JOB_ID") or "").strip()
    if job:
        step = (env.get("SLURM_STEP_ID") or "").strip()
        return (job + "." + step if step else job)[:MAX_RUN_ID]

    def env_int(name):
        try:
            return int(env.get(name, ""))
        except ValueError:
            return None

    local = env_int("LOCAL_WORLD_SIZE")
    ws = env_int("WORLD_SIZE")
    if ws is None:
        ws = world
    host = host or socket.gethostname()
    if local is not None and ws is not None and local == ws:
        r = "%s:%d" % (host, os.getppid() if ppid is None else ppid)
        port = (env.get("MASTER_PORT") or "").strip()
        if port:
            r += ":" + port
        return r[:MAX_RUN_ID]
    if local is None and ws == 1:
        return ("%s:%d" % (host, os.getpid() if pid is None else pid))[:MAX_RUN_ID]
    return None


def _clip_utf8(s, n):
    b = s.encode("utf-8")
    return s if len(b) <= n else b[:n].decode("utf-8", "ignore")


def launch_from_env(environ=None):
    """What every process of this launch shares, for the server's
    incarnations (docs/design/roles-and-runs.md), or '' when the launcher
    says nothing (the server then groups processes itself).

    LAGGARD_INCARNATION if set; else torchelastic
    'te:<TORCHELASTIC_RUN_ID>:<TORCHELASTIC_RESTART_COUNT>' (a restart of the
    same run id is a new launch); else Slurm
    'slurm:<SLURM_JOB_ID>[.<SLURM_STEP_ID>]:<SLURM_RESTART_COUNT or 0>'
    (a requeued job is a new launch). TORCHELASTIC_RUN_ID 'none' (the
    default of a launch without rendezvous) is the same for every launch,
    so it says nothing."""
    env = os.environ if environ is None else environ
    v = (env.get("LAGGARD_INCARNATION") or "").strip()
    if v:
        return _clip_utf8(v, MAX_IDENT)
    rid = _elastic_run_id(env)
    if rid:
        restart = (env.get("TORCHELASTIC_RESTART_COUNT") or "0").strip() or "0"
        return _clip_utf8("te:%s:%s" % (rid, restart), MAX_IDENT)
    job = (env.get("SLURM_JOB_ID") or "").strip()
    if job:
        step = (env.get("SLURM_STEP_ID") or "").strip()
        restart = (env.get("SLURM_RESTART_COUNT") or "0").strip() or "0"
        return _clip_utf8("slurm:%s%s:%s" % (job, "." + step if step else "", restart), MAX_IDENT)
    return ""


_start = {}  # pid -> this process's start, ns since the epoch


def process_start_ns():
    """When this process started, ns since the Unix epoch: /proc's start
    time (clock ticks after boot) plus the boot time, read once per process
    (a forked child reads its own). Where /proc is missing, the first call's
    time.time_ns() in this process."""
    pid = os.getpid()
    t = _start.get(pid)
    if t is None:
        t = _proc_start_ns(pid) or time.time_ns()
        _start.clear()  # a forked child drops its parent's entry
        _start[pid] = t
    return t


def _proc_start_ns(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
        # Field 22 (starttime), counted after the command name's closing paren
        # (the name itself may hold spaces and parens).
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        hz = os.sysconf("SC_CLK_TCK")
        return btime * 1_000_000_000 + ticks * 1_000_000_000 // hz
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def process_ident(host=None):
    """(process, started_ns) of this process start: '<host>/<pid>/<start
    ns>' — unique to it even where pids are reused."""
    started = process_start_ns()
    host = host or socket.gethostname()
    return _clip_utf8("%s/%d/%d" % (host, os.getpid(), started), MAX_IDENT), started
