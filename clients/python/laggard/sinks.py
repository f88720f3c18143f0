"""Where stage vectors go: the laggard HTTP API or a stage-matrix file.

A sink is only ever called from the shipper's background thread, so it may
block (bounded by its timeout) and raise; the shipper turns every failure
into counted drops and never lets it reach the training thread.
"""

import http.client
import json
import os
import urllib.parse


_PERMANENT = (400, 401, 403, 409, 413)


class ShipError(Exception):
    """A failed registration or batch. permanent=True means retrying the same
    request cannot succeed (400/401/403/409/413), so the shipper stops
    trying. op says which request failed ("job", "rank" or "vectors");
    detail and field are the server's {"error", "field"} body."""

    def __init__(self, msg, status=None, retry_after=None, permanent=False, op=None, detail="", field=""):
        super().__init__(msg)
        self.status = status
        self.retry_after = retry_after
        self.permanent = permanent
        self.op = op
        self.detail = detail
        self.field = field


def _version():
    from . import __version__
    return __version__


class HTTPSink:
    """Speaks the HTTP contract: PUT /api/v1/jobs/{id}, POST .../ranks and
    POST .../vectors (JSON). One keep-alive connection, reopened on error.
    token, when given, goes out as Authorization: Bearer on every request."""

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

    def _connection(self):
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._netloc, timeout=self._timeout)
        return self._conn

    def _request(self, method, path, body, op):
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            conn = self._connection()
            conn.request(method, path, body=data, headers=self._headers)
            resp = conn.getresponse()
            payload = resp.read()
            status = resp.status
            retry_after = resp.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ShipError("%s %s: %s" % (method, path, e), op=op) from None
        if 200 <= status < 300:
            return payload
        text = payload[:2000].decode("utf-8", "replace")
        detail, field = text.strip()[:500], ""
        try:
            eb = json.loads(text)  # the API's {"error": "...", "field": "..."}
            if isinstance(eb, dict):
                detail = str(eb.get("error") or detail)
                field = str(eb.get("field") or "")
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
                        field=field)

    def register(self, job, rank):
        self._request("PUT", self._base, job, "job")
        self._request("POST", self._base + "/ranks", rank, "rank")

    def send(self, vectors):
        self._request("POST", self._base + "/vectors", {"vectors": vectors}, "vectors")

    def close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


class FileSink:
    """Writes the stage-matrix JSONL format: a {"job": ...} header line, then
    one StageVector JSON object per line. No server needed (eval harness,
    offline runs); `laggard analyze FILE` reads it."""

    def __init__(self, path):
        self.path = path
        self._f = None

    def register(self, job, rank):
        if self._f is None:
            d = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(d, exist_ok=True)
            self._f = open(self.path, "w", encoding="utf-8")
            self._f.write(json.dumps({"job": file_header_job(job, rank)}, separators=(",", ":")) + "\n")
            self._f.flush()

    def send(self, vectors):
        if self._f is None:
            raise ShipError("file sink %s: not registered" % self.path)
        try:
            self._f.write("".join(json.dumps(v, separators=(",", ":")) + "\n" for v in vectors))
            self._f.flush()
        except OSError as e:
            raise ShipError("file sink %s: %s" % (self.path, e)) from None

    def close(self):
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
