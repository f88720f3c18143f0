"""Where stage vectors go: the laggard HTTP API or a stage-matrix file.

A sink is only ever called from the shipper's background thread, so it may
block (bounded by its timeout) and raise; the shipper turns every failure
into counted drops and never lets it reach the training thread.

A sink has register(job, rank), send(vectors) (dicts) and close(). One that
also has send_encoded(texts) — each vector already JSON text — gets that
instead, and one with `pauses = True` (HTTPSink) send_encoded(texts,
pause=f), f called between the pieces of a large body. set_deadline(t),
where a sink has it, is called by close() from another thread: no request,
in flight or later, may run past t (time.monotonic()). A sink that speaks the incarnation protocol (HTTPSink)
has set_identity(dict), called before registering, and an `incarnation`
attribute after it, which its batches and polls carry.
"""

import http.client
import io
import json
import os
import socket
import time
import urllib.parse


_PERMANENT = (400, 401, 403, 409, 413)


class ShipError(Exception):
    """A failed registration or batch. permanent=True means retrying the same
    request cannot succeed (400/401/403/409/413), so the shipper stops
    trying. op says which request failed ("job", "rank" or "vectors");
    detail and field are the server's {"error", "field"} body."""

    def __init__(self, msg, status=None, retry_after=None, permanent=False, op=None, detail="", field="",
                 timed_out=False, at_deadline=False, body=None):
        super().__init__(msg)
        self.body = body  # the error reply as decoded JSON (a dict), when it was one
        self.timed_out = timed_out
        self.at_deadline = at_deadline  # timed out at the caller's deadline, before the sink's own timeout
        self.status = status
        self.retry_after = retry_after
        self.permanent = permanent
        self.op = op
        self.detail = detail
        self.field = field


def _version():
    from . import __version__
    return __version__


_RECHECK_S = 0.1  # a blocked read looks again at a deadline lowered meanwhile (close())


class _DeadlineSocket:
    """Wraps a connected socket so every blocking call waits at most what is
    left of the current request's deadline. A socket timeout alone bounds
    each recv, so a server trickling one byte a second kept a request (and
    the shipper) alive forever (D10). http.client only calls sendall,
    makefile, setsockopt and close on its socket."""

    def __init__(self, sock, owner):
        self._sock = sock
        self._owner = owner  # its _cap: close()'s deadline, read on every call (set from another thread)
        self.deadline = None  # time.monotonic() of this request's end

    def _left(self):
        d, cap = self.deadline, self._owner._cap
        if cap is not None and (d is None or cap < d):
            d = cap
        if d is None:
            return None
        left = d - time.monotonic()
        if left <= 0:
            raise socket.timeout("request deadline passed")
        return left

    def sendall(self, data):
        self._sock.settimeout(self._left())  # since 3.5 the timeout bounds the whole sendall
        return self._sock.sendall(data)

    def recv_into(self, buf, nbytes=0):
        while True:
            left = self._left()
            if left is None:
                return self._sock.recv_into(buf, nbytes or len(buf))
            self._sock.settimeout(min(left, _RECHECK_S))
            try:
                return self._sock.recv_into(buf, nbytes or len(buf))
            except socket.timeout:
                if left <= _RECHECK_S:
                    raise

    def makefile(self, mode="rb", buffering=None, **_kw):
        if mode != "rb":
            raise ValueError("deadline socket: mode %r" % mode)
        return io.BufferedReader(_DeadlineReader(self), buffering or io.DEFAULT_BUFFER_SIZE)

    def __getattr__(self, name):  # setsockopt, close, fileno, ...
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, dsock):
        super().__init__()
        self._dsock = dsock

    def readable(self):
        return True

    def readinto(self, b):
        return self._dsock.recv_into(b)


def _deadline_connection(base):
    class Conn(base):
        owner = None  # the HTTPSink

        def connect(self):
            super().connect()
            self.sock = _DeadlineSocket(self.sock, self.owner)
    Conn.__name__ = "Deadline" + base.__name__
    return Conn


_HTTPConnection = _deadline_connection(http.client.HTTPConnection)
_HTTPSConnection = _deadline_connection(http.client.HTTPSConnection)


IDENTITY_FIELDS = ("launch", "process", "started_ns")
_PIECE = 256  # vectors joined into one piece of a large body per hold of the GIL


class HTTPSink:
    """Speaks the HTTP contract: PUT /api/v1/jobs/{id}, POST .../ranks and
    POST .../vectors (JSON). One keep-alive connection, reopened on error.
    token, when given, goes out as Authorization: Bearer on every request.
    timeout bounds each request as a whole (connect, send, response), not
    just each socket read.

    Incarnations (docs/design/roles-and-runs.md): registration and rank
    join carry this process's identity (set_identity: launch, process,
    started_ns); the incarnation the server answers goes out with every
    later batch and poll. A server that predates incarnations refuses the
    identity fields as unknown (400): the registration is sent again
    without them and no incarnation is sent afterwards, as it is when an
    answer carries none."""

    pauses = True  # send_encoded takes pause=

    def __init__(self, server, job_id, timeout=2.0, token=None):
        u = urllib.parse.urlsplit(server if "://" in server else "http://" + server)
        if u.scheme not in ("http", "https"):
            raise ValueError("server: scheme must be http or https, got %r" % u.scheme)
        self._scheme = u.scheme
        self._netloc = u.netloc
        self._prefix = u.path.rstrip("/")
        self._base = "%s/api/v1/jobs/%s" % (self._prefix, urllib.parse.quote(job_id, safe=""))
        self._timeout = timeout
        self._headers = {"Content-Type": "application/json", "User-Agent": "laggard-python/" + _version()}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._conn = None
        self._cap = None  # set_deadline()
        # Shared with clone()s (the capture uploader's sink), so they send
        # the incarnation the shipper's registration learned.
        # "plain": the batch routes ("vectors", "collectives") whose decoder
        # refused "incarnation" as an unknown field: a server that keeps
        # incarnations but not yet on that route gets its batches without.
        self._meta = {"incarnation": None, "identity": None, "legacy": False, "plain": set()}

    @property
    def request_timeout(self):
        """Seconds one request may take (the shipper keeps batches under
        half of it)."""
        return self._timeout

    @property
    def incarnation(self):
        """The server's incarnation of this process (an int), or None: not
        registered yet, or a server without incarnations."""
        return self._meta["incarnation"]

    def set_identity(self, identity):
        """{"launch", "process", "started_ns"} sent with registration and
        rank join."""
        self._meta["identity"] = {k: identity[k] for k in IDENTITY_FIELDS if k in identity}

    def set_deadline(self, t):
        """No request, in flight or later, runs past t (time.monotonic()).
        Safe to call from another thread."""
        self._cap = t

    def _request(self, method, path, data, op, headers=None):
        start = time.monotonic()
        end = start + self._timeout
        try:
            cap = self._cap
            left = min(end, cap if cap is not None else end) - start
            if left <= 0:
                raise socket.timeout("request deadline passed")
            conn = self._conn
            if conn is None:
                cls = _HTTPSConnection if self._scheme == "https" else _HTTPConnection
                conn = self._conn = cls(self._netloc, timeout=left)
                conn.owner = self
                conn.blocksize = 1 << 16  # file bodies (capture traces) go out in 64 KiB sends
            if conn.sock is None:
                conn.timeout = left  # bounds the connect; the deadline socket takes over after it
                conn.connect()
            conn.sock.deadline = end
            conn.request(method, path, body=data, headers=dict(self._headers, **headers) if headers else self._headers)
            resp = conn.getresponse()
            payload = resp.read()
            status = resp.status
            retry_after = resp.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as e:
            self.close()
            timed_out = isinstance(e, socket.timeout)
            cap = self._cap
            at_cap = timed_out and cap is not None and cap < end
            why = "no complete response within %.3g s" % ((cap if at_cap else end) - start) if timed_out else e
            raise ShipError("%s %s: %s" % (method, path, why), op=op, timed_out=timed_out,
                            at_deadline=at_cap) from None
        if 200 <= status < 300:
            return payload
        text = payload[:2000].decode("utf-8", "replace")
        detail, field = text.strip()[:500], ""
        eb = None
        try:
            eb = json.loads(payload[:65536].decode("utf-8", "replace"))  # {"error": "...", "field": "..."}
            if isinstance(eb, dict):
                detail = str(eb.get("error") or detail)
                field = str(eb.get("field") or "")
            else:
                eb = None
        except ValueError:
            pass
        msg = "%s %s: HTTP %d %s" % (method, path, status, detail[:200])
        ra = None
        if retry_after:
            try:
                ra = float(retry_after)
            except ValueError:
                ra = None
        raise ShipError(msg, status=status, retry_after=ra, permanent=status in _PERMANENT, op=op, detail=detail,
                        field=field, body=eb)

    def register(self, job, rank):
        """Registers the job and joins the rank; returns the incarnation
        the server answered (None: a server without incarnations)."""
        m = self._meta
        a = self._register_one("PUT", self._base, job, "job")
        b = self._register_one("POST", self._base + "/ranks", rank, "rank")
        inc = _incarnation_of(b)
        if inc is None:
            inc = _incarnation_of(a)
        m["incarnation"] = inc
        return inc

    def _register_one(self, method, path, body, op):
        m = self._meta
        ident = m["identity"] if not m["legacy"] else None
        try:
            return self._request(method, path, _json(dict(body, **ident) if ident else body), op)
        except ShipError as e:
            if not ident or e.status != 400 or e.field not in IDENTITY_FIELDS:
                raise
        # A server from before incarnations: its strict decoder refuses the
        # identity fields. Register as before, and send no incarnation.
        m["legacy"] = True
        return self._request(method, path, _json(body), op)

    def _head(self, op):
        """The member that goes before a batch's items: the incarnation,
        unless this route's decoder does not know it."""
        m = self._meta
        inc = m["incarnation"]
        if inc is None or op in m["plain"]:
            return ""
        return '"incarnation":%d,' % inc

    def _post_batch(self, path, build, op):
        """POSTs build(head) (a body, bytes or a list of bytes pieces). A
        server that refuses "incarnation" as an unknown field gets the batch
        again without it (not dropped), and that route's later batches go
        without it (polls and the other batch route keep it). Any other
        refusal of "incarnation" (one the server no longer has) is raised:
        the shipper registers again."""
        try:
            return self._post(path, build(self._head(op)), op)
        except ShipError as e:
            if not (e.status == 400 and self._head(op) and e.field == "incarnation" and "unknown field" in e.detail):
                raise
            self._meta["plain"].add(op)
        return self._post(path, build(self._head(op)), op)

    def _post(self, path, body, op):
        if isinstance(body, list):
            return self._request("POST", path, body, op, {"Content-Length": str(sum(len(p) for p in body))})
        return self._request("POST", path, body, op)

    def send(self, vectors):
        items = json.dumps(vectors, separators=(",", ":"))
        self._post_batch(self._base + "/vectors", lambda h: ('{%s"vectors":%s}' % (h, items)).encode(), "vectors")

    def send_encoded(self, texts, pause=None):
        """texts: each vector as JSON text (shipper.encode_vector). A large
        batch is joined in pieces of _PIECE vectors with pause() between
        them (the shipper releases the interpreter lock there) and sent
        piece by piece, never as one multi-megabyte string."""
        if len(texts) <= _PIECE:
            items = ",".join(texts)
            build = lambda h: ('{%s"vectors":[%s]}' % (h, items)).encode()  # noqa: E731
        else:
            pieces = []
            for i in range(0, len(texts), _PIECE):
                if i and pause is not None:
                    pause()
                pieces.append((("," if i else "") + ",".join(texts[i:i + _PIECE])).encode())
            pieces.append(b"]}")
            build = lambda h: [('{%s"vectors":[' % h).encode()] + pieces  # noqa: E731
        self._post_batch(self._base + "/vectors", build, "vectors")

    def send_collectives(self, body, world=None):
        """POST …/collectives (contracts §1): body is a collective.Batch as
        JSON text. world registers a job the server does not know yet."""
        q = "?world=%d" % world if world else ""
        self._post_batch(self._base + "/collectives" + q, lambda h: ("{" + h + body[1:]).encode(), "collectives")

    def _inc_query(self, sep="&"):
        inc = self._meta["incarnation"]
        return "%sincarnation=%d" % (sep, inc) if inc is not None else ""

    def poll_validation(self, rank):
        """GET …/validation?rank=R (contracts §3): the plan, or None (204)."""
        payload = self._request("GET", "%s/validation?rank=%d%s" % (self._base, rank, self._inc_query()), None,
                                "validation")
        if not payload or not payload.strip():
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise ShipError("GET validation: reply is not JSON", op="validation") from None

    def post_validation(self, vid, result):
        """POST …/validation/{vid}/results: this rank's result."""
        self._request("POST", "%s/validation/%s/results%s" % (self._base, urllib.parse.quote(vid, safe=""),
                                                                   self._inc_query("?")), _json(result), "validation")

    def clone(self, timeout=None):
        """A sink with its own connection to the same server and job (for
        another thread: a sink is not thread-safe)."""
        c = HTTPSink.__new__(HTTPSink)
        c.__dict__.update(self.__dict__)
        c._headers = dict(self._headers)
        c._conn = None
        c._cap = None
        if timeout is not None:
            c._timeout = timeout
        return c

    def poll_capture(self, rank, step=None):
        """GET …/captures/pending?rank=R[&step=S] (contracts C): (capture dict
        or None, heartbeat (c_send, s_recv, s_send, c_recv) in ns or None).
        step is the training step the rank last began: the server starts the
        next plan a margin past the ranks' steps. Client times are
        time.time_ns(), the clock torch's profiler stamps traces with."""
        c_send = time.time_ns()
        q = "rank=%d" % rank
        if step is not None and step >= 0:
            q += "&step=%d" % step
        payload = self._request("GET", "%s/captures/pending?%s%s" % (self._base, q, self._inc_query()), None,
                                "captures")
        c_recv = time.time_ns()
        if not payload or not payload.strip():
            return None, None
        try:
            obj = json.loads(payload)
        except ValueError:
            raise ShipError("GET captures/pending: reply is not JSON", op="captures") from None
        if not isinstance(obj, dict):
            raise ShipError("GET captures/pending: reply is not an object", op="captures")
        sr, ss = obj.get("server_recv_ns"), obj.get("server_send_ns")
        hb = None
        # Each clock must run forward (a clock stepped back mid-poll does not):
        # an unordered sample would get the whole upload refused.
        if all(type(x) is int and x > 0 for x in (sr, ss)) and ss >= sr and c_recv >= c_send:
            hb = (c_send, sr, ss, c_recv)
        return obj.get("capture"), hb

    def post_capture_trace(self, cid, rank, body, size, headers):
        """POST …/captures/{cid}/traces?rank=R: body a binary file object of
        size bytes (the gzip trace), or None for an empty body (an error
        report in X-Laggard-Capture-Error). The sink's timeout is raised
        with the size (at least 2 MB/s)."""
        h = dict(headers)
        h["Content-Length"] = str(size if body is not None else 0)
        saved = self._timeout
        self._timeout = max(saved, size / 2e6)
        try:
            return self._request("POST", "%s/captures/%s/traces?rank=%d%s" % (
                self._base, urllib.parse.quote(cid, safe=""), rank, self._inc_query()),
                body if body is not None else b"", "captures", h)
        finally:
            self._timeout = saved

    def close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


def _json(v):
    return json.dumps(v, separators=(",", ":")).encode()


def _incarnation_of(payload):
    """The "incarnation" of a registration answer: an int >= 0, else None."""
    if not payload:
        return None
    try:
        obj = json.loads(payload)
    except ValueError:
        return None
    inc = obj.get("incarnation") if isinstance(obj, dict) else None
    return inc if type(inc) is int and inc >= 0 else None


class FileSink:
    """Writes the stage-matrix JSONL format: a {"job": ...} header line, then
    one StageVector JSON object per line. No server needed (eval harness,
    offline runs); `laggard analyze FILE` reads it."""

    def __init__(self, path):
        self.path = path
        self._f = None
        self._cf = None  # collectives, opened on the first batch

    def register(self, job, rank):
        if self._f is None:
            d = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(d, exist_ok=True)
            self._f = open(self.path, "w", encoding="utf-8")
            self._f.write(json.dumps({"job": file_header_job(job, rank)}, separators=(",", ":")) + "\n")
            self._f.flush()

    def send(self, vectors):
        self.send_encoded([json.dumps(v, separators=(",", ":")) for v in vectors])

    def send_encoded(self, texts):
        if self._f is None:
            raise ShipError("file sink %s: not registered" % self.path)
        try:
            self._f.write("\n".join(texts) + "\n")
            self._f.flush()
        except OSError as e:
            raise ShipError("file sink %s: %s" % (self.path, e)) from None

    def send_collectives(self, body, world=None):
        """Appends the collective.Batch JSON as one line of
        <path>.collectives.jsonl (no server: offline runs, eval)."""
        try:
            if self._cf is None:
                self._cf = open(self.path + ".collectives.jsonl", "w", encoding="utf-8")
            self._cf.write(body + "\n")
            self._cf.flush()
        except OSError as e:
            raise ShipError("file sink %s.collectives.jsonl: %s" % (self.path, e)) from None

    def close(self):
        if self._cf is not None:
            self._cf.close()
            self._cf = None
        if self._f is not None:
            self._f.close()
            self._f = None


def file_header_job(job, rank):
    """The job object of a stage-matrix header written by one rank: the
    registration, plus that rank (so `laggard analyze` knows its host and
    role) and, when its role group times its own stage list, that group's
    schema — a file has no rank-join request to carry it."""
    from .schema import order_hash, role_group
    j = dict(job)
    r = {k: v for k, v in rank.items() if k != "schema"}
    j["ranks"] = [r]
    rs = rank.get("schema")
    if rs and order_hash(rs) != order_hash(job["schema"]):
        j["groups"] = [{"group": role_group(rank.get("role")), "schema": rs, "declared_by": rank.get("rank", 0)}]
    return j


def merge_stage_files(out_path, part_paths, ranks=None):
    """Concatenates per-rank stage-matrix files into one: the first part's
    header, carrying the ranks and role-group schemas of every part's header
    (`ranks`, a list of Rank dicts indexed by rank id, replaces the ranks
    when given), then every part's vector lines. Ranks of one job write
    separate parts because concurrent appends from several processes could
    interleave with the header. Returns the number of vector lines written."""
    header = None
    seen_ranks, seen_groups = {}, {}
    parts = []
    for p in part_paths:  # headers first: the merged one must come first
        with open(p, encoding="utf-8") as f:
            first = f.readline()
        if not first.strip():
            continue
        parts.append(p)
        job = json.loads(first)["job"]
        if header is None:
            header = job
        for r in job.get("ranks") or []:
            seen_ranks.setdefault(r.get("rank"), r)
        for g in job.get("groups") or []:
            seen_groups.setdefault(g.get("group"), g)
    if header is None:
        raise ValueError("merge_stage_files: no part had a header line")
    if ranks:
        header["ranks"] = list(ranks)
    elif seen_ranks:
        header["ranks"] = [seen_ranks[k] for k in sorted(seen_ranks, key=lambda x: (not isinstance(x, int), x))]
    if seen_groups:
        header["groups"] = [seen_groups[k] for k in sorted(seen_groups, key=str)]
    n = 0
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps({"job": header}, separators=(",", ":")) + "\n")
        for p in parts:
            with open(p, encoding="utf-8") as f:
                f.readline()
                for line in f:
                    if line.strip():
                        out.write(line if line.endswith("\n") else line + "\n")
                        n += 1
    os.replace(tmp, out_path)
    return n
