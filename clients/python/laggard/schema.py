"""Ordered stage schema helpers (StageFrontier §3, App. A Table 10).

The vocabulary itself lives in _vocab.py, generated from Go
(internal/signal/stagevec); this module only validates schemas the way
internal/signal/schema.go does, so the server rejects nothing the client
accepted, and computes what the wire format derives from them (the order
hash, the role group).
"""

import hashlib

from ._vocab import DEFAULT_STAGES, DEFAULT_VERSION, DESCRIPTIONS, MAX_STAGES, PROBES, RESIDUAL, SHORT_NAMES

# Public names for the default stages, looked up by their generated aliases
# so a renamed stage in Go flows through without an edit here.
_LONG = {short: long for long, short in SHORT_NAMES.items()}
STAGE_DATA = _LONG["data"]
STAGE_FORWARD = _LONG["forward"]
STAGE_BACKWARD = _LONG["backward"]
STAGE_CALLBACK = _LONG["callbacks"]
STAGE_OPTIM = _LONG["optimizer"]
STAGE_OTHER = RESIDUAL  # residual, always last (App. A)
PROBE_FORWARD_CUDA = PROBES[0]  # side channel (§5)

__all__ = [
    "DEFAULT_STAGES", "DEFAULT_VERSION", "DESCRIPTIONS", "MAX_STAGES", "PROBES", "RESIDUAL", "SHORT_NAMES",
    "STAGE_DATA", "STAGE_FORWARD", "STAGE_BACKWARD", "STAGE_CALLBACK", "STAGE_OPTIM", "STAGE_OTHER",
    "PROBE_FORWARD_CUDA", "default_schema", "normalize_schema", "order_hash", "role_group", "stage_index",
]


def default_schema():
    return {"version": DEFAULT_VERSION, "stages": list(DEFAULT_STAGES), "probes": list(PROBES)}


def _valid_name(s):
    # Mirrors signal.validName: names travel in CSV headers and JSON keys.
    return isinstance(s, str) and s != "" and len(s.encode("utf-8")) <= 128 and not any(c in s for c in ',\n\r\t"')


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
        schema = {"version": DEFAULT_VERSION, "stages": list(schema), "probes": list(PROBES)}
    elif isinstance(schema, dict):
        schema = {
            "version": schema.get("version") or DEFAULT_VERSION,
            "stages": list(schema.get("stages") or DEFAULT_STAGES),
            "probes": list(schema.get("probes") if schema.get("probes") is not None else PROBES),
        }
    else:
        raise ValueError("schema: want None, a list of stage names or a dict, got %r" % type(schema).__name__)
    v = schema["version"]
    if not isinstance(v, str) or len(v.encode("utf-8")) > 128:
        raise ValueError("schema.version: want a string of at most 128 bytes, got %r" % (v,))
    stages = schema["stages"]
    if not stages or stages[-1] != STAGE_OTHER:
        stages.append(STAGE_OTHER)
    if len(stages) < 2 or len(stages) > MAX_STAGES:
        raise ValueError("schema.stages: need 2..%d ordered stages including the residual, got %d" % (MAX_STAGES, len(stages)))
    seen = set()
    for i, st in enumerate(stages):
        if not _valid_name(st):
            raise ValueError("schema.stages: stage %d has an invalid name %r" % (i, st))
        if st in seen:
            raise ValueError("schema.stages: stage %r appears twice" % st)
        seen.add(st)
    if len(schema["probes"]) > MAX_STAGES:
        raise ValueError("schema.probes: at most %d probes, got %d" % (MAX_STAGES, len(schema["probes"])))
    for i, p in enumerate(schema["probes"]):
        if not _valid_name(p):
            raise ValueError("schema.probes: probe %d has an invalid name %r" % (i, p))
        if p in seen:
            raise ValueError("schema.probes: probe %r is also an ordered stage" % p)
    return schema


def order_hash(schema):
    """signal.Schema.OrderHash: the first 16 hex digits of sha256(version,
    then a NUL and the name for every ordered stage, residual included).
    Ranks whose hashes differ may not be merged into one window."""
    h = hashlib.sha256(schema["version"].encode("utf-8"))
    for st in schema["stages"]:
        h.update(b"\0")
        h.update(st.encode("utf-8"))
    return h.hexdigest()[:16]


def role_group(role):
    """signal.Role.Group: ranks whose pipeline stage and role name agree do
    the same ordered work and share one stage list; "default" otherwise."""
    role = role or {}
    g = str(role.get("name") or "")
    try:
        pp = int(role.get("pp", -1))
    except (TypeError, ValueError):
        pp = -1
    if pp >= 0:
        g = (g + "/" if g else "") + "pp%d" % pp
    return g or "default"


def stage_index(schema):
    """Maps every name perf.stage() accepts to its position in the vector:
    the schema's explicit stages, plus the generated short aliases
    ("data", "forward", ...) of those it has. The residual maps to -2: it is
    computed, never timed. Exact names win over aliases."""
    stages = schema["stages"]
    idx = {}
    for i, st in enumerate(stages[:-1]):
        short = SHORT_NAMES.get(st)
        if short is not None:
            idx[short] = i
    res_short = SHORT_NAMES.get(stages[-1])
    if res_short is not None:
        idx[res_short] = -2
    for i, st in enumerate(stages[:-1]):
        idx[st] = i
    idx[stages[-1]] = -2
    return idx
