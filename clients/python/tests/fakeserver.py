"""A local stand-in for the laggard server's ingest API (http.server)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """Records every request; `behaviour(method, path, n)` may return
    (status, headers, body, delay_s) to override the default 200/201 reply,
    where n counts earlier requests to the same (method, path)."""

    def __init__(self, behaviour=None):
        self.requests = []
        self.behaviour = behaviour
        self._lock = threading.Lock()
        self._counts = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                key = (self.command, self.path)
                with outer._lock:
                    k = outer._counts.get(key, 0)
                    outer._counts[key] = k + 1
                reply = outer.behaviour(self.command, self.path, k) if outer.behaviour else None
                if reply is None:
                    if self.path.endswith("/vectors"):
                        reply = (200, {}, {"accepted": len(body["vectors"])}, 0)
                    elif self.command == "PUT":
                        reply = (201 if k == 0 else 200, {}, {}, 0)
                    else:
                        reply = (200, {}, {}, 0)
                status, headers, out, delay = reply
                with outer._lock:
                    outer.requests.append({"method": self.command, "path": self.path, "body": body, "status": status,
                                           "content_type": self.headers.get("Content-Type")})
                if delay:
                    time.sleep(delay)
                data = json.dumps(out).encode()
                self.send_response(status)
                for h, v in headers.items():
                    self.send_header(h, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_PUT = do_POST = do_GET = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def vectors(self, accepted_only=True):
        """Vectors the server was sent, by default only those it accepted."""
        out = []
        for r in list(self.requests):
            if r["path"].endswith("/vectors") and (not accepted_only or r["status"] == 200):
                out.extend(r["body"]["vectors"])
        return out

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
