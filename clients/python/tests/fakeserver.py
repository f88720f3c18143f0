"""A local stand-in for the laggard server's ingest API (http.server).

Besides recording every request it keeps the server's registration rules,
written independently of the client (so a client bug cannot agree with
itself): a job re-registered by another run_id or with another ordered
stage list is refused with 409 (field run_id / schema.stages); a rank join
declaring a stage list other than the one its role group (pipeline stage,
role name) already registered is refused with 409; a vector whose
order_hash differs from its rank's group schema is refused with 409
(field order_hash).

Two server generations (issue 16, incarnations):
* old=True is a server from before incarnations: like the Go server's
  strict decoders it refuses any field it does not know (400
  "<field>: unknown field", "field": "<field>") in job registrations, rank
  joins and batches — so a client must not send launch/process/started_ns
  or incarnation to it unless it can fall back.
* incarnations=True keeps the incarnation rules of
  docs/design/roles-and-runs.md, restated independently of the client:
  a non-empty launch → the newest incarnation with it, a new launch or
  run_id → a new one, no launch → the newest; and a new one (a restart)
  when the rank already belongs to the chosen one with another process;
  registration answers carry "incarnation"; cells
  (step, rank, micro) are kept per incarnation, an identical re-send is
  idempotent and a different one is 409 naming the first conflicting
  vector ("field": "vectors[i]") and, with list_conflicts, all of them
  ("conflicts": [i, ...]); nothing of such a batch is stored. Like
  `laggard serve`'s decoders, its batch routes refuse any top-level member
  but their own and "incarnation" (400 "<field>: unknown field").
"""

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_JOB_PATH = re.compile(r"^/api/v1/jobs/([^/]+)(/ranks|/vectors)?$")
# Greyhound endpoints (contracts §1, §3).
_COLL_PATH = re.compile(r"^/api/v1/jobs/([^/?]+)/collectives(?:\?world=(\d+))?$")
_VAL_PATH = re.compile(r"^/api/v1/jobs/([^/?]+)/validation\?rank=(\d+)(?:&incarnation=(\d+))?$")
_RES_PATH = re.compile(r"^/api/v1/jobs/([^/?]+)/validation/([^/?]+)/results(?:\?incarnation=(\d+))?$")
# KAIR captures (contracts C).
_CAP_PENDING = re.compile(
    r"^/api/v1/jobs/([^/?]+)/captures/pending\?rank=(\d+)(?:&step=(?P<step>\d+))?(?:&incarnation=(?P<inc>\d+))?$")
_CAP_TRACE = re.compile(r"^/api/v1/jobs/([^/?]+)/captures/([^/?]+)/traces\?rank=(\d+)(?:&incarnation=(?P<inc>\d+))?$")
# What the Go decoders know (internal/signal/job.go), for old=True.
_JOB_FIELDS = {"id", "name", "world_size", "schema", "accumulation", "ranks", "groups", "labels", "run_id", "created"}
_RANK_FIELDS = {"rank", "host", "local_rank", "role", "schema"}
IDENTITY = ("launch", "process", "started_ns")
# FakeServer(unknown=...): the batch members a `laggard serve` that keeps
# incarnations refused as unknown fields before its collective batches took
# "incarnation" (issue 16, fe9f1ab..f968958).
SERVE_UNKNOWN_BEFORE_F968958 = (("collectives", "incarnation"),)
_OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "Send", "Recv", "Barrier")
_CALL_FIELDS = ("rank", "comm", "seq", "op", "bytes", "peer", "root", "enter_ns", "return_ns", "step")


def go_order_hash(schema):
    """internal/signal/schema.go Schema.OrderHash, restated."""
    h = hashlib.sha256()
    h.update(schema["version"].encode())
    for st in schema["stages"]:
        h.update(b"\x00" + st.encode())
    return h.digest()[:8].hex()


def go_group(role):
    """internal/signal/job.go Role.Group, restated."""
    g = role.get("name") or ""
    if role.get("pp", -1) >= 0:
        g = (g + "/" if g else "") + "pp" + str(role["pp"])
    return g or "default"


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up on a slow reply closes the connection; that
        # is the behaviour under test, not a server failure worth a traceback.
        import sys
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeServer:
    """Records every request; `behaviour(method, path, n)` may return
    (status, headers, body, delay_s) to override the default reply, where n
    counts earlier requests to the same (method, path). strict=False turns
    the registration rules off. `trickle(method, path, n)` may return
    seconds per byte: the reply is then a 200 whose bytes come that slowly
    and never end (its Content-Length is never reached), as a server that
    trickles its answer does (D10)."""

    def __init__(self, behaviour=None, strict=True, trickle=None, incarnations=False, old=False,
                 list_conflicts=True, unknown=()):
        self.requests = []
        self.behaviour = behaviour
        self.strict = strict
        self.incarnations = incarnations
        self.old = old
        # (route, field) pairs a route's strict decoder does not know yet
        # (400 "<field>: unknown field") on a server that keeps
        # incarnations (SERVE_UNKNOWN_BEFORE_F968958).
        self.unknown = set(unknown)
        self.list_conflicts = list_conflicts
        self.cell_conflicts = 0  # vectors refused as conflicting re-sends
        self.query_incarnations = []  # incarnation= of polls and results
        self.trickle = trickle
        self.trickled = 0  # bytes written by trickling replies
        self._closed = threading.Event()
        self.jobs = {}  # id -> {"run_id", "schema", "ranks": {rank: group}, "groups": {group: schema}}
        self.missing_order_hash = 0
        # Greyhound: plans served by GET …/validation (job -> plan dict, or
        # a callable(rank, n) -> plan or None), results posted per plan.
        self.plans = {}
        self.results = {}  # (job, vid) -> [bodies]
        self.bad_collectives = []  # reasons batches were refused
        # refuse_comm(comm dict) -> reason or None: a 400 naming comms[i]
        # (the server's answer to a communicator record it rejects).
        self.refuse_comm = None
        self.coll_delay = 0.0  # seconds each collectives POST takes (a slow server)
        # KAIR: captures served by GET …/captures/pending (job -> Capture
        # dict, or a callable(rank, n) -> Capture or None); traces posted per
        # (job, cid, rank): {"body": bytes (gunzipped), "headers": {lower: v}}.
        self.captures = {}
        self.traces = {}
        self.poll_steps = {}  # (job, rank) -> steps the polls reported (KAIR start step)
        self.clock_skew_ns = 0  # added to the server's clock in heartbeats
        self._lock = threading.Lock()
        self._counts = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the body
            # waited ~40 ms for the client's delayed ACK (a heartbeat's RTT).
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if _CAP_TRACE.match(self.path):
                    body = {"_bytes": raw, "_headers": {k.lower(): v for k, v in self.headers.items()}}
                else:
                    try:
                        body = json.loads(raw) if raw else None
                    except ValueError:
                        body = {"_raw": raw.decode("utf-8", "replace")}
                key = (self.command, self.path)
                with outer._lock:
                    k = outer._counts.get(key, 0)
                    outer._counts[key] = k + 1
                per_byte = outer.trickle(self.command, self.path, k) if outer.trickle else None
                if per_byte:
                    with outer._lock:
                        outer.requests.append({"method": self.command, "path": self.path, "body": body,
                                               "status": "trickle"})
                    self._trickle(per_byte)
                    return
                reply = outer.behaviour(self.command, self.path, k) if outer.behaviour else None
                if reply is None:
                    with outer._lock:
                        reply = outer._default(self.command, self.path, body, k)
                status, headers, out, delay = reply
                with outer._lock:
                    outer.requests.append({"method": self.command, "path": self.path, "body": body, "status": status,
                                           "content_type": self.headers.get("Content-Type"),
                                           "authorization": self.headers.get("Authorization"),
                                           "user_agent": self.headers.get("User-Agent")})
                if delay:
                    time.sleep(delay)
                data = b"" if status == 204 else json.dumps(out).encode()
                self.send_response(status)
                for h, v in headers.items():
                    self.send_header(h, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, per_byte):
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
                i = 0
                while not outer._closed.wait(per_byte):
                    try:
                        self.wfile.write(head[i:i + 1] if i < len(head) else b" ")
                        self.wfile.flush()
                    except OSError:
                        break
                    i += 1
                    with outer._lock:
                        outer.trickled += 1
                self.close_connection = True

            do_PUT = do_POST = do_GET = _handle

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    # --- the server's rules (called under the lock) -----------------------
    def _unknown(self, body, known, route=None):
        """The 400 of a strict decoder for the first field it does not know:
        any field outside known (old=True), a batch member outside known and
        "incarnation" (incarnations=True), or one of self.unknown."""
        if not isinstance(body, dict):
            return None
        for f in body:
            if ((self.old and f not in known) or (route, f) in self.unknown
                    or (self.incarnations and route and f not in known and f != "incarnation")):
                return (400, {}, {"error": "%s: unknown field" % f, "field": f}, 0)
        return None

    def _default(self, method, path, body, k):
        g = self._greyhound(method, path, body, k)
        if g is not None:
            return g
        m = _JOB_PATH.match(path)
        if not m:
            return (404, {}, {"error": "no route"}, 0)
        job_id, sub = m.group(1), m.group(2)
        known = {None: _JOB_FIELDS, "/ranks": _RANK_FIELDS, "/vectors": {"vectors"}}[sub]
        refused = self._unknown(body, known, "vectors" if sub == "/vectors" else None)
        if refused:
            return refused
        if sub is None and method == "PUT":
            return self._put_job(job_id, body)
        job = self.jobs.get(job_id)
        if self.strict and job is None:
            return (404, {}, {"error": "job %q not found" % job_id}, 0)
        if sub == "/ranks":
            return self._join(job, body)
        if sub == "/vectors":
            return self._vectors(job, body)
        return (405, {}, {"error": "method"}, 0)

    # --- incarnations -------------------------------------------------------
    def _check_identity(self, body):
        for f, t in (("launch", str), ("process", str), ("started_ns", int)):
            if f in body and (type(body[f]) is not t or (t is str and len(body[f].encode()) > 128)):
                return (400, {}, {"error": "%s: bad value" % f, "field": f}, 0)
        return None

    def _inc_for_launch(self, job, launch, run_id):
        """The incarnation a registration belongs to (None: decided by the
        rank join, for a launch-less process)."""
        incs = job["incs"]
        if launch:
            for i in range(len(incs) - 1, -1, -1):  # the newest with that launch id
                if incs[i]["launch"] == launch:
                    return i
            incs.append({"launch": launch, "run_id": run_id, "procs": {}, "cells": {}})
            return len(incs) - 1
        if not incs or incs[-1]["run_id"] != run_id:  # a resubmission: a new incarnation, not a 409
            incs.append({"launch": "", "run_id": run_id, "procs": {}, "cells": {}})
        return len(incs) - 1

    def _reply_inc(self, body, inc):
        out = dict(body)
        out["incarnation"] = inc
        return out

    def incarnation_of(self, job_id, inc):
        return self.jobs[job_id]["incs"][inc]

    def _batch_inc(self, job, body, kind):
        """The incarnation a batch goes to, or a 400 reply."""
        inc = body.get("incarnation") if isinstance(body, dict) else None
        if inc is None:
            return len(job["incs"]) - 1, None
        if type(inc) is not int or not (0 <= inc < len(job["incs"])):
            return None, (400, {}, {"error": "incarnation: no incarnation %r" % (inc,), "field": "incarnation"}, 0)
        return inc, None

    def _put_job(self, job_id, body):
        schema = body.get("schema") or {}
        run_id = body.get("run_id", "")
        old = self.jobs.get(job_id)
        if self.incarnations:
            bad = self._check_identity(body)
            if bad:
                return bad
        if old is None:
            self.jobs[job_id] = {"run_id": run_id, "schema": schema, "ranks": {}, "groups": {}, "incs": []}
            if self.incarnations:
                inc = self._inc_for_launch(self.jobs[job_id], body.get("launch", ""), run_id)
                return (201, {}, self._reply_inc(body, inc), 0)
            return (201, {}, body, 0)
        if self.incarnations:
            if self.strict and go_order_hash(old["schema"]) != go_order_hash(schema):
                return (409, {}, {"error": "job %r is registered with a different ordered stage list" % job_id,
                                  "field": "schema.stages"}, 0)
            inc = self._inc_for_launch(old, body.get("launch", ""), run_id)
            return (200, {}, self._reply_inc(body, inc), 0)
        if self.strict and old["run_id"] != run_id:
            return (409, {}, {"error": "job %r belongs to run %r, not run %r; use another job id" % (
                job_id, old["run_id"], run_id), "field": "run_id"}, 0)
        if self.strict and go_order_hash(old["schema"]) != go_order_hash(schema):
            return (409, {}, {"error": "job %r is registered with a different ordered stage list" % job_id,
                              "field": "schema.stages"}, 0)
        return (200, {}, body, 0)

    def _join(self, job, body):
        if job is None:
            return (200, {}, body, 0)
        group = go_group(body.get("role") or {})
        schema = body.get("schema")
        if self.strict and schema is not None:
            want = job["groups"].get(group) or (job["schema"] if group == "default" else None)
            if want is not None and go_order_hash(want) != go_order_hash(schema):
                return (409, {}, {"error": "role group %r is registered with another ordered stage list (%s)" % (
                    group, ", ".join(want["stages"])), "field": "schema.stages"}, 0)
            if group != "default":
                job["groups"].setdefault(group, schema)
        job["ranks"][body["rank"]] = group
        if self.incarnations:
            bad = self._check_identity(body)
            if bad:
                return bad
            incs = job["incs"]
            launch, proc = body.get("launch", ""), body.get("process", "")
            if launch:
                i = self._inc_for_launch(job, launch, incs[-1]["run_id"] if incs else "")
            else:
                if not incs:
                    incs.append({"launch": "", "run_id": job["run_id"], "procs": {}, "cells": {}})
                i = len(incs) - 1
            held = incs[i]["procs"].get(body["rank"])
            if held is not None and held != proc:  # this rank restarted (same launch id or none): a new one
                incs.append({"launch": launch, "run_id": incs[i]["run_id"], "procs": {}, "cells": {}})
                i = len(incs) - 1
            incs[i]["procs"][body["rank"]] = proc
            return (200, {}, self._reply_inc(body, i), 0)
        return (200, {}, body, 0)

    def _vectors(self, job, body):
        vs = body["vectors"]
        if self.incarnations and job is not None:
            inc, bad = self._batch_inc(job, body, "vectors")
            if bad:
                return bad
            if not job["incs"]:
                job["incs"].append({"launch": "", "run_id": job["run_id"], "procs": {}, "cells": {}})
                inc = 0
            cells = job["incs"][inc]["cells"]
            conflicts = []
            for i, v in enumerate(vs):
                key = (v["step"], v["rank"], v.get("micro", 0))
                val = json.dumps({k: x for k, x in v.items() if k != "dropped"}, sort_keys=True)
                if key in cells and cells[key] != val:
                    conflicts.append(i)
            if conflicts:
                self.cell_conflicts += len(conflicts)
                i = conflicts[0]
                v = vs[i]
                out = {"error": "vectors[%d]: step %d rank %d micro %d of incarnation %d is stored with other values"
                                % (i, v["step"], v["rank"], v.get("micro", 0), inc), "field": "vectors[%d]" % i}
                if self.list_conflicts:
                    out["conflicts"] = conflicts
                return (409, {}, out, 0)
            for v in vs:
                cells[(v["step"], v["rank"], v.get("micro", 0))] = json.dumps(
                    {k: x for k, x in v.items() if k != "dropped"}, sort_keys=True)
        for i, v in enumerate(vs):
            if "order_hash" not in v:
                self.missing_order_hash += 1
                continue
            if not self.strict or job is None:
                continue
            group = job["ranks"].get(v["rank"], "default")
            want = go_order_hash(job["groups"].get(group) or job["schema"])
            if v["order_hash"] != want:
                return (409, {}, {"error": "rank %d sends stage-order hash %s but its role group %q is registered "
                                           "with %s" % (v["rank"], v["order_hash"], group, want),
                                  "field": "order_hash"}, 0)
        return (200, {}, {"accepted": len(vs)}, 0)

    def _greyhound(self, method, path, body, k):
        m = _COLL_PATH.match(path)
        if m and method == "POST":
            job_id = m.group(1)
            refused = self._unknown(body, {"comms", "calls", "dropped"}, "collectives")
            if refused:
                return refused
            if self.strict and job_id not in self.jobs and not m.group(2):
                return (404, {}, {"error": "job not registered and no world given", "field": "world"}, 0)
            why = check_batch(body)
            if why:
                self.bad_collectives.append(why)
                return (400, {}, {"error": why, "field": why.partition(":")[0]}, self.coll_delay)
            for i, c in enumerate(body.get("comms") or []):
                why = self.refuse_comm(c) if self.refuse_comm else None
                if why:
                    return (400, {}, {"error": "comms[%d].id: %s" % (i, why), "field": "comms[%d].id" % i},
                            self.coll_delay)
            return (200, {}, {"accepted_calls": len(body.get("calls") or []),
                              "accepted_comms": len(body.get("comms") or []), "duplicates": 0}, self.coll_delay)
        m = _VAL_PATH.match(path)
        if m and m.group(3) is not None:
            self.query_incarnations.append(("validation", int(m.group(3))))
        if m and method == "GET":
            plan = self.plans.get(m.group(1))
            if callable(plan):
                plan = plan(int(m.group(2)), k)
            return (200, {}, plan, 0) if plan else (204, {}, None, 0)
        m = _CAP_PENDING.match(path)
        if m and m.group("inc") is not None:
            self.query_incarnations.append(("captures", int(m.group("inc"))))
        if m and method == "GET":
            recv = time.time_ns() + self.clock_skew_ns
            if m.group("step") is not None:
                self.poll_steps.setdefault((m.group(1), int(m.group(2))), []).append(int(m.group("step")))
            cap = self.captures.get(m.group(1))
            if callable(cap):
                cap = cap(int(m.group(2)), k)
            return (200, {}, {"capture": cap, "server_recv_ns": recv,
                              "server_send_ns": time.time_ns() + self.clock_skew_ns}, 0)
        m = _CAP_TRACE.match(path)
        if m and m.group("inc") is not None:
            self.query_incarnations.append(("traces", int(m.group("inc"))))
        if m and method == "POST":
            import gzip
            raw = body["_bytes"]
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            self.traces.setdefault((m.group(1), m.group(2), int(m.group(3))), []).append(
                {"body": raw, "headers": body["_headers"]})
            return (201, {}, {"rank": int(m.group(3)), "events": 0, "steps": 0}, 0)
        m = _RES_PATH.match(path)
        if m and method == "POST":
            self.results.setdefault((m.group(1), m.group(2)), []).append(body)
            return (200, {}, {"ok": True}, 0)
        return None

    # --- inspection --------------------------------------------------------
    def collective_batches(self, accepted_only=True):
        return [r["body"] for r in list(self.requests)
                if "/collectives" in r["path"] and (not accepted_only or r["status"] == 200)]

    def calls(self):
        """Every accepted collective.Call."""
        return [c for b in self.collective_batches() for c in b.get("calls") or []]

    def comms(self):
        return [c for b in self.collective_batches() for c in b.get("comms") or []]

    def vectors(self, accepted_only=True):
        """Vectors the server was sent, by default only those it accepted."""
        out = []
        for r in list(self.requests):
            if r["path"].endswith("/vectors") and (not accepted_only or r["status"] == 200):
                out.extend(r["body"]["vectors"])
        return out

    def joins(self):
        """Bodies of the rank joins the server accepted."""
        return [r["body"] for r in list(self.requests) if r["path"].endswith("/ranks") and r["status"] == 200]

    def close(self):
        self._closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def check_batch(b):
    """The contract's shape of a collective.Batch (internal/signal/collective
    Validate, restated loosely): '' when fine, else why."""
    if not isinstance(b, dict):
        return "batch: not an object"
    for i, c in enumerate(b.get("comms") or []):
        for f in ("id", "size", "rank", "comm_rank"):
            if f not in c:
                return "comms[%d].%s: missing" % (i, f)
        if c.get("ranks") is not None and (len(c["ranks"]) != c["size"] or c["ranks"][c["comm_rank"]] != c["rank"]):
            return "comms[%d].ranks: inconsistent" % i
    for i, c in enumerate(b.get("calls") or []):
        for f in _CALL_FIELDS:
            if f not in c:
                return "calls[%d].%s: missing" % (i, f)
        if c["op"] not in _OPS:
            return "calls[%d].op: %r" % (i, c["op"])
        if c["return_ns"] < c["enter_ns"] or c["enter_ns"] < 946684800 * 10**9:
            return "calls[%d].return_ns: bracket" % i
        if ("dev_start_ns" in c) != ("dev_end_ns" in c) or c.get("dev_end_ns", 0) < c.get("dev_start_ns", 0):
            return "calls[%d].dev_end_ns: bracket" % i
    if b.get("dropped", 0) < 0:
        return "dropped: negative"
    return ""
