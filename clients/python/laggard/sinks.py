"""Where stage vectors go: the laggard HTTP API or a stage-matrix file.

A sink is only ever called from the shipper's background thread, so it may
block (bounded by its timeout) and raise; the shipper turns every failure
into counted drops and never lets it reach the training thread.
"""

import http.client
import json
import os
import urllib.parse


class ShipError(Exception):
    """A failed registration or batch. permanent=True means retrying the same
    request cannot succeed (400/409/413), so the shipper stops trying."""

    def __init__(self, msg, status=None, retry_after=None, permanent=False):
        super().__init__(msg)
        self.status = status
        self.retry_after = retry_after
        self.permanent = permanent


class HTTPSink:
    """Speaks the HTTP contract: PUT /api/v1/jobs/{id}, POST .../ranks and
    POST .../vectors (JSON). One keep-alive connection, reopened on error."""

    def __init__(self, server, job_id, timeout=2.0):
        u = urllib.parse.urlsplit(server if "://" in server else "http://" + server)
        if u.scheme not in ("http", "https"):
            raise ValueError("server: scheme must be http or https, got %r" % u.scheme)
        self._scheme = u.scheme
        self._netloc = u.netloc
        self._prefix = u.path.rstrip("/")
        self._base = "%s/api/v1/jobs/%s" % (self._prefix, urllib.parse.quote(job_id, safe=""))
        self._timeout = timeout
        self._conn = None

    def _connection(self):
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._netloc, timeout=self._timeout)
        return self._conn

    def _request(self, method, path, body):
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            conn = self._connection()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            payload = resp.read()
            status = resp.status
            retry_after = resp.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ShipError("%s %s: %s" % (method, path, e)) from None
        if 200 <= status < 300:
            return payload
        msg = "%s %s: HTTP %d %s" % (method, path, status, payload[:200].decode("utf-8", "replace"))
        ra = None
        if retry_after:
            try:
                ra = float(retry_after)
            except ValueError:
                ra = None
        raise ShipError(msg, status=status, retry_after=ra, permanent=status in (400, 409, 413))

    def register(self, job, rank):
        self._request("PUT", self._base, job)
        self._request("POST", self._base + "/ranks", rank)

    def send(self, vectors):
        self._request("POST", self._base + "/vectors", {"vectors": vectors})

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
            self._f.write(json.dumps({"job": job}, separators=(",", ":")) + "\n")
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


def merge_stage_files(out_path, part_paths, ranks=None):
    """Concatenates per-rank stage-matrix files into one: the first part's
    header (with `ranks`, a list of Rank dicts indexed by rank id, added when
    given), then every part's vector lines. Ranks of one job write separate
    parts because concurrent appends from several processes could interleave
    with the header. Returns the number of vector lines written."""
    header = None
    n = 0
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for p in part_paths:
            with open(p, encoding="utf-8") as f:
                first = f.readline()
                if not first:
                    continue
                if header is None:
                    header = first
                    if ranks:
                        h = json.loads(header)
                        h["job"]["ranks"] = list(ranks)
                        header = json.dumps(h, separators=(",", ":")) + "\n"
                    out.write(header)
                for line in f:
                    if line.strip():
                        out.write(line)
                        n += 1
    if header is None:
        os.remove(tmp)
        raise ValueError("merge_stage_files: no part had a header line")
    os.replace(tmp, out_path)
    return n
