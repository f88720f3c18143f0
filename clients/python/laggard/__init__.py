"""laggard: per-rank ordered stage telemetry for the laggard straggler finder.

Pure standard library; torch is used only when the program already imported
it (rank discovery, CUDA-event probes). See Perf for the API.
"""

from .perf import Perf
from .schema import (DEFAULT_STAGES, PROBE_FORWARD_CUDA, STAGE_BACKWARD, STAGE_CALLBACK, STAGE_DATA, STAGE_FORWARD,
                     STAGE_OPTIM, STAGE_OTHER, default_schema, normalize_schema)
from .sinks import FileSink, HTTPSink, ShipError, merge_stage_files

__all__ = [
    "Perf", "FileSink", "HTTPSink", "ShipError", "merge_stage_files", "default_schema", "normalize_schema",
    "DEFAULT_STAGES", "PROBE_FORWARD_CUDA", "STAGE_DATA", "STAGE_FORWARD", "STAGE_BACKWARD", "STAGE_CALLBACK",
    "STAGE_OPTIM", "STAGE_OTHER",
]
__version__ = "0.1.0"
