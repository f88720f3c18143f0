"""A small HTTP/1.1 pass-through proxy that keeps a copy of every operator
trace the Python client uploads (POST …/captures/{cid}/traces?rank=R).

eval/kair/run.py puts it between the DDP demo's ranks and `laggard serve`
so the exact bytes a rank uploaded can be saved as golden traces
(results/traces/<case>/) — the server stores the decoded compact form and
has no route that returns the upload. Everything else is forwarded
unchanged (method, path, body, headers minus hop-by-hop ones); answers
come back with the upstream status and body.
"""

import http.client
import http.server
import os
import re
import socketserver
import threading
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length"}
TRACE_RE = re.compile(r"^/api/v1/jobs/([^/]+)/captures/([^/]+)/traces$")
MAX_BODY = 256 << 20  # an upload larger than this is refused (the harness's own bound)


def trace_target(path):
    """(job, capture, rank) for a trace upload path, else None."""
    u = urllib.parse.urlsplit(path)
    m = TRACE_RE.match(u.path)
    if not m:
        return None
    q = urllib.parse.parse_qs(u.query)
    try:
        rank = int(q.get("rank", [""])[0])
    except ValueError:
        return None
    return urllib.parse.unquote(m.group(1)), urllib.parse.unquote(m.group(2)), rank


def upload_name(rank, content_type, body):
    """File name for a saved upload: gzip and JSON are sniffed, protobuf by type."""
    if body[:2] == b"\x1f\x8b":
        return "rank%d.json.gz" % rank
    if "protobuf" in (content_type or ""):
        return "rank%d.optrace.pb" % rank
    return "rank%d.json" % rank


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kair-eval-proxy"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("body over %d bytes" % MAX_BODY)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError("body over %d bytes" % MAX_BODY)
        return self.rfile.read(n) if n else b""

    def _forward(self):
        try:
            body = self._body()
        except (ValueError, OSError) as e:
            self.send_error(413, str(e))
            return
        px = self.server.proxy
        tgt = trace_target(self.path) if self.command == "POST" else None
        if tgt is not None:
            px.save(tgt, self.headers, body)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        if body or self.command in ("POST", "PUT"):
            headers["Content-Length"] = str(len(body))
        try:
            c = http.client.HTTPConnection(px.host, px.port, timeout=120)
            c.request(self.command, self.path, body=body or None, headers=headers)
            r = c.getresponse()
            data = r.read()
            status, rh = r.status, r.getheaders()
            c.close()
        except (OSError, http.client.HTTPException) as e:
            self.send_error(502, "upstream: %s" % e)
            return
        self.send_response(status)
        for k, v in rh:
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a rank killed mid-request resets its connection: expected at the end of every run


class TeeProxy:
    """Listens on (bind, port), forwards to upstream "http://host:port" and
    saves trace uploads under out_dir/<capture>/<file>. saved is a list of
    (capture, rank, path, bytes, headers) in arrival order."""

    def __init__(self, bind, port, upstream, out_dir):
        u = urllib.parse.urlsplit(upstream)
        self.host, self.port = u.hostname, u.port or 80
        self.out_dir = out_dir
        self.saved = []
        self._lock = threading.Lock()
        self.srv = _Server((bind, port), _Handler)
        self.srv.proxy = self
        self.url = "http://%s:%d" % (bind, self.srv.server_address[1])
        self.thread = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def save(self, tgt, headers, body):
        job, cid, rank = tgt
        d = os.path.join(self.out_dir, re.sub(r"[^A-Za-z0-9_.-]", "_", cid))
        os.makedirs(d, exist_ok=True)
        name = upload_name(rank, headers.get("Content-Type"), body)
        if not body:
            name = "rank%d.error.txt" % rank
            body = (headers.get("X-Laggard-Capture-Error") or "").encode()
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(body)
        hdr = {k: v for k, v in headers.items() if k.lower().startswith("x-laggard") or k.lower() == "content-type"}
        with self._lock:
            self.saved.append((cid, rank, p, len(body), hdr))

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
