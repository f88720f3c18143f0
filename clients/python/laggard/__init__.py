"""laggard: per-rank ordered stage telemetry for the laggard straggler finder.

    import laggard
    perf = laggard.init()            # configured from LAGGARD_* (explicit keywords win)
    # DDP jobs: laggard.init(collectives=True, ddp=model, validation=True)
    for batch in loader:
        with perf.step():
            ...

Pure standard library; torch is used only when the program already imported
it (rank discovery, CUDA-event probes). Framework callbacks live in
laggard.integrations (imported only when asked for). See Perf for the API.
"""

import logging

from . import config
from .perf import Perf  # embed_test.go looks for this line
from .perf import NullPerf
from .schema import (DEFAULT_STAGES, PROBE_FORWARD_CUDA, SHORT_NAMES, STAGE_BACKWARD, STAGE_CALLBACK, STAGE_DATA,
                     STAGE_FORWARD, STAGE_OPTIM, STAGE_OTHER, default_schema, normalize_schema, order_hash)
from .sinks import FileSink, HTTPSink, ShipError, merge_stage_files
from . import collectives, validation  # noqa: F401,E402 - laggard.collectives.Capture, laggard.validation.Validator
from . import capture  # noqa: F401,E402 - laggard.capture.Capturer (KAIR operator traces)
from . import agent_socket  # noqa: E402 - node-agent registration (LAGGARD_AGENT_SOCKET)
from . import shutdown  # noqa: E402 - the exit flush (atexit, SIGTERM/SIGHUP): laggard.shutdown.register

__version__ = "0.2.0"

__all__ = [
    "init", "Perf", "NullPerf", "FileSink", "HTTPSink", "ShipError", "merge_stage_files", "default_schema",
    "normalize_schema", "order_hash", "DEFAULT_STAGES", "SHORT_NAMES", "PROBE_FORWARD_CUDA", "STAGE_DATA",
    "STAGE_FORWARD", "STAGE_BACKWARD", "STAGE_CALLBACK", "STAGE_OPTIM", "STAGE_OTHER", "__version__",
    "collectives", "validation", "capture", "shutdown",
]

_log = logging.getLogger("laggard")


def init(**overrides):
    """Returns a Perf configured from the LAGGARD_* environment, with the
    keyword arguments (any of Perf's, plus log_level) taking precedence.
    When telemetry is disabled (enabled=False, LAGGARD_DISABLED=1 or
    LAGGARD_ENABLED=0) it returns a NullPerf: the same API, doing nothing.

    Environment problems log a warning and fall back; a Perf that cannot be
    built from them (it never should) also turns into a NullPerf with one
    ERROR line rather than an exception in the training script. Invalid
    explicit arguments (a malformed schema, an unknown keyword) do raise:
    they are bugs in the calling code, best seen on its first run.
    """
    level = overrides.pop("log_level", None)
    ec = config.from_env() if overrides.get("env", True) else {}
    config.apply_log_level(level if level is not None else ec.get("log_level"))
    enabled = overrides.get("enabled")
    if enabled is None:
        enabled = ec.get("enabled", True)
    if not enabled:
        job = overrides.get("job") or ec.get("job")
        return NullPerf(job=job)
    try:
        return Perf(**overrides)  # announces itself to the node agent when LAGGARD_AGENT_SOCKET is set
    except (TypeError, ValueError):
        raise
    except Exception as e:  # pragma: no cover - defensive
        _log.error("laggard: telemetry off: could not configure Perf: %s: %s", type(e).__name__, e)
        return NullPerf(job=overrides.get("job"))
