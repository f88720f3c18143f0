"""Ordered stage schema helpers (StageFrontier §3, App. A Table 10).

Mirrors internal/model/schema.go so the client can validate a schema before
it is sent and the server rejects nothing the client accepted.
"""

STAGE_DATA = "data.next_wait"
STAGE_FORWARD = "model.fwd_loss_cpu_wall"
STAGE_BACKWARD = "model.backward_cpu_wall"
STAGE_CALLBACK = "callbacks.cpu_wall"
STAGE_OPTIM = "optim.step_cpu_wall"
STAGE_OTHER = "step.other_cpu_wall"  # residual, always last (App. A)
PROBE_FORWARD_CUDA = "model.fwd_loss_cuda_event_ms"  # side channel (§5)

DEFAULT_STAGES = (STAGE_DATA, STAGE_FORWARD, STAGE_BACKWARD, STAGE_CALLBACK, STAGE_OPTIM, STAGE_OTHER)
DEFAULT_VERSION = "stagefrontier/v1"
MAX_STAGES = 64


def default_schema():
    return {"version": DEFAULT_VERSION, "stages": list(DEFAULT_STAGES), "probes": [PROBE_FORWARD_CUDA]}


def normalize_schema(schema):
    """Returns a validated schema dict from None, a stage list or a dict.

    A stage list without the residual gets it appended: the client always
    computes the residual itself (wall − Σ explicit), so users never time it.
    Raises ValueError naming the field; called once at construction, never on
    the hot path.
    """
    if schema is None:
        return default_schema()
    if isinstance(schema, (list, tuple)):
        schema = {"version": DEFAULT_VERSION, "stages": list(schema), "probes": [PROBE_FORWARD_CUDA]}
    elif isinstance(schema, dict):
        schema = {
            "version": schema.get("version") or DEFAULT_VERSION,
            "stages": list(schema.get("stages") or DEFAULT_STAGES),
            "probes": list(schema.get("probes") if schema.get("probes") is not None else [PROBE_FORWARD_CUDA]),
        }
    else:
        raise ValueError("schema: want None, a list of stage names or a dict, got %r" % type(schema).__name__)
    stages = schema["stages"]
    if not stages or stages[-1] != STAGE_OTHER:
        stages.append(STAGE_OTHER)
    if len(stages) < 2 or len(stages) > MAX_STAGES:
        raise ValueError("schema.stages: need 2..%d ordered stages including the residual, got %d" % (MAX_STAGES, len(stages)))
    seen = set()
    for i, st in enumerate(stages):
        if not isinstance(st, str) or not st or len(st) > 128 or any(c in st for c in ',\n\t"'):
            raise ValueError("schema.stages: stage %d has an invalid name %r" % (i, st))
        if st in seen:
            raise ValueError("schema.stages: stage %r appears twice" % st)
        seen.add(st)
    for p in schema["probes"]:
        if p in seen:
            raise ValueError("schema.probes: probe %r is also an ordered stage" % p)
    return schema
