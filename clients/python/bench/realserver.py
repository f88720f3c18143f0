#!/usr/bin/python3
"""Drives this client against a real `laggard serve` through a recording
proxy and checks that the server takes everything the client sends (issue 16
items 1-2): the fake server in tests/ restates the server's rules, this
checks them against the server itself.

    go build -o /tmp/laggard ./cmd/laggard
    /usr/bin/python3 clients/python/bench/realserver.py --laggard /tmp/laggard [--kill-runs 5]

Scenarios, each in processes of their own with no launcher variables:
  first       a job's first process: 30 steps, close()
  restart     the same job id again (no launcher): a new incarnation
  launch      a second process of one launch (LAGGARD_INCARNATION) for the
              same rank (the server opens a new incarnation: a restart)
  resend      one process re-sends steps 0-9 with other values (refused
              one by one, counted, the rest ship) and again with the same
              values (idempotent)
  collectives a collective batch with "incarnation"
  polls       capture poll with &step=S&incarnation=N, a capture trace
              upload (error report) and validation poll with incarnation=N
  sigterm     60 steps with a 60 s flush interval, then SIGTERM: every
              vector must be stored, and the process dies of SIGTERM
  sigkill     (--kill-runs N) paced loops (--kill-rates, default 1,000 and
              10 steps/s) killed with SIGKILL after a random 1-2 s
              (--kill-after): steps ended but never stored (the loss)
Every request the client made and the server's answer is listed; any answer
>= 400 other than the 409s of the resend scenario fails the run, and so does
a batch with a member other than the items and "incarnation".
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from drops import start_server  # noqa: E402

CHILD = r"""
import json, os, sys, time, mmap
import laggard
url, job, mode, first, last, ms, fi = sys.argv[1:8]
first, last, ms, fi = int(first), int(last), float(ms), float(fi)
p = laggard.Perf(server=url, job=job, rank=0, world_size=1, flush_interval=fi, capture=False, validation=False)
if mode == "kill":  # a step every ms, paced; the count of ended steps in a shared page
    fd = os.open(sys.argv[8], os.O_RDWR)
    m = mmap.mmap(fd, 8)
    period = ms / 1e3
    nxt = time.perf_counter()
    s = 0
    while True:
        with p.step():
            with p.stage("forward"):
                pass
        s += 1
        m[0:8] = s.to_bytes(8, "little")
        nxt += period
        d = nxt - time.perf_counter()
        if d > 0:
            time.sleep(d)
def steps(p, first, last, ms):
    t = 1_000_000_000
    for s in range(first, last):
        p.begin_step(step=s, at=t)
        p.begin_stage("forward", at=t)
        t += int(ms * 1e6)
        p.end_step(at=t)
if mode == "resend":  # one process re-sends steps: other values, then the same values
    # One process stream re-sending (a replay): a second Perf of the job in
    # a process is otherwise a new run, its own incarnation.
    import laggard.perf
    laggard.perf._stream_ident = lambda job, proc: proc
    steps(p, 0, 10, 1.0)
    p.close(10)
    print(json.dumps(p.stats()), flush=True)
    for last, ms in ((20, 3.0), (10, 1.0)):
        p = laggard.Perf(server=url, job=job, rank=0, world_size=1, flush_interval=fi, capture=False,
                         validation=False)
        steps(p, 0, last, ms)
        p.close(10)
        print(json.dumps(p.stats()), flush=True)
    sys.exit(0)
steps(p, first, last, ms)
if mode == "term":
    print("READY", flush=True)
    time.sleep(120)
p.close(10)
print(json.dumps(p.stats()), flush=True)
"""


class Proxy:
    """Forwards to the server and records (method, path, request body,
    status, answer) of every request."""

    def __init__(self, upstream):
        self.log = []
        self.all = []  # every request, never taken
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _do(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdr = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                c = http.client.HTTPConnection(upstream, timeout=30)
                c.request(self.command, self.path, body=body if n else None, headers=hdr)
                r = c.getresponse()
                data = r.read()
                with outer.lock:
                    outer.log.append((self.command, self.path, body, r.status, data))
                    outer.all.append((self.command, self.path, body, r.status, data))
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                c.close()

            do_GET = do_POST = do_PUT = _do

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def take(self):
        with self.lock:
            out, self.log = self.log, []
        return out


def child_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LAGGARD_", "TORCHELASTIC_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = CLIENT
    env.update(extra or {})
    return env


def run_child(url, job, first, last, ms, fi=0.05, env=None):
    r = subprocess.run([sys.executable, "-c", CHILD, url, job, "run", str(first), str(last), str(ms), str(fi)],
                       env=child_env(env), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit("child failed (%d): %s" % (r.returncode, r.stderr[-2000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def summarize(reqs):
    out = []
    for m, path, body, st, ans in reqs:
        keys = ""
        if body[:1] == b"{":
            try:
                keys = ",".join(json.loads(body))
            except ValueError:
                keys = "?"
        out.append("  %-4s %-70s {%s} -> %d %s" % (m, path[:70], keys, st, ans[:150].decode("utf-8", "replace").strip()))
    return "\n".join(out)


class Check:
    def __init__(self):
        self.failed = []

    def eq(self, what, got, want):
        ok = got == want
        print("  %s %s: %r%s" % ("ok  " if ok else "FAIL", what, got, "" if ok else " (want %r)" % (want,)))
        if not ok:
            self.failed.append(what)


def stored(base, job):
    """Vectors the server holds for job, per incarnation (GET …/export)."""
    with urllib.request.urlopen("%s/api/v1/jobs/%s" % (base, job), timeout=10) as r:
        return json.loads(r.read())


def batch_members(reqs):
    """Each batch POST's members other than its items and "incarnation",
    and the vector batches without a vector (all should be empty)."""
    own = {"/vectors": {"vectors"}, "/collectives": {"comms", "calls", "dropped"}}
    extra, empty = set(), 0
    for m, p, b, _s, _a in reqs:
        route = "/collectives" if "/collectives" in p else "/vectors" if p.endswith("/vectors") else None
        if m != "POST" or route is None:
            continue
        body = json.loads(b)
        extra |= set(body) - own[route] - {"incarnation"}
        empty += route == "/vectors" and not body.get("vectors")
    return sorted(extra), empty


def unexpected(reqs, allow):
    """Answers >= 400 not matched by allow(method, path, status, answer)."""
    return [(m, p, s, a[:200]) for m, p, _b, s, a in reqs if s >= 400 and not allow(m, p, s, a)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laggard", required=True)
    ap.add_argument("--kill-runs", type=int, default=0, help="SIGKILL runs per rate (0: none)")
    ap.add_argument("--kill-rates", default="1000,10", help="steps/s of the SIGKILL runs")
    ap.add_argument("--kill-after", type=float, default=1.0, help="kill after this to twice this many seconds")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    a = ap.parse_args()
    sys.path.insert(0, CLIENT)
    import laggard
    from laggard import collectives as coll
    from laggard import shipper as shipper_mod
    from laggard.sinks import HTTPSink

    d = tempfile.mkdtemp(prefix="laggard-realserver-")
    srv, base = start_server(a.laggard, d)  # the bench's: loopback, auto captures and Greyhound off
    px = Proxy(base.split("//")[1])
    ck = Check()
    none = lambda m, p, s, a: False  # noqa: E731
    try:
        print("first: a job's first process")
        st = run_child(px.url, "rs", 0, 30, 1.0)
        reqs = px.take()
        print(summarize(reqs[:4]))
        ck.eq("sent, dropped, errors, refused, incarnation", (st["sent"], st["dropped"], st["errors"], st["refused"],
                                                              st["incarnation"]), (30, 0, 0, 0, 0))
        ck.eq("answers >= 400", unexpected(reqs, none), [])

        print("restart: the same job id, no launcher")
        st = run_child(px.url, "rs", 0, 30, 2.0)
        reqs = px.take()
        ck.eq("sent, dropped, refused, incarnation", (st["sent"], st["dropped"], st["refused"], st["incarnation"]),
              (30, 0, 0, 1))
        ck.eq("answers >= 400", unexpected(reqs, none), [])

        print("launch: a second process of one launch (LAGGARD_INCARNATION) for the same rank")
        env = {"LAGGARD_INCARNATION": "realserver-launch-1"}
        st = run_child(px.url, "rs", 0, 10, 1.0, env=env)
        ck.eq("first process: sent, incarnation", (st["sent"], st["incarnation"]), (10, 2))
        st = run_child(px.url, "rs", 0, 10, 1.0, env=env)
        reqs = px.take()
        # The server's rule: a rank registered again from another process
        # is a restart, a new incarnation, even within one launch.
        ck.eq("second process: sent, refused, incarnation", (st["sent"], st["refused"], st["incarnation"]),
              (10, 0, 3))
        ck.eq("answers >= 400", unexpected(reqs, none), [])
        job = stored(base, "rs")
        incs = job.get("incarnations") or []
        print("  server: incarnations %s" % [(i.get("n"), i.get("reason"), i.get("launch", "")) for i in incs])
        ck.eq("incarnations the server keeps", len(incs), 4)

        print("resend: one process re-sends steps 0-9 with other values, then with the same values")
        r = subprocess.run([sys.executable, "-c", CHILD, px.url, "rr", "resend", "0", "0", "0", "0.05"],
                           env=child_env(), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise SystemExit("resend child failed: %s" % r.stderr[-2000:])
        s1, s2, s3 = [json.loads(x) for x in r.stdout.strip().splitlines()[-3:]]
        reqs = px.take()
        ck.eq("first: sent, incarnation", (s1["sent"], s1["incarnation"]), (10, 0))
        ck.eq("conflicting: sent, refused, dropped, incarnation",
              (s2["sent"], s2["refused"], s2["dropped"], s2["incarnation"]), (10, 10, 0, 0))
        ck.eq("identical: sent, refused, dropped", (s3["sent"], s3["refused"], s3["dropped"]), (10, 0, 0))
        c409 = [a for m, p, _b, s, a in reqs if s == 409]
        print("  409s: %d, first: %s" % (len(c409), c409[0][:300].decode() if c409 else "-"))
        ck.eq("every 409 names a cell", bool(c409) and all(b'"field":"vectors[' in x for x in c409), True)
        ck.eq("answers >= 400 other than 409 cells", unexpected(reqs, lambda m, p, s, x: s == 409 and b"vectors[" in x),
              [])

        print("collectives: a batch with incarnation")
        cap = coll.Capture(queue_size=100)
        cap.rank = 0
        jd = {"id": "rc", "name": "rc", "world_size": 1, "schema": laggard.default_schema(), "accumulation": 1,
              "labels": {}}
        rank = {"rank": 0, "host": socket.gethostname(), "local_rank": 0,
                "role": {"dp": 0, "tp": -1, "pp": -1, "ep": -1}}
        sink = HTTPSink(px.url, "rc", timeout=5.0)
        sh = shipper_mod.Shipper(sink, jd, rank, flush_interval=0.05, collectives=cap,
                                 identity={"launch": "", "process": "h/%d/1" % os.getpid(), "started_ns": 1})
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        end = time.monotonic() + 10
        while sh.sent < 1 and time.monotonic() < end:
            time.sleep(0.02)
        t = time.time_ns()
        for i in range(3):
            cap._put([json.dumps("pg0-world"), i, coll.ALL_REDUCE, 400, 100, "float32", -1, -1, t + i * 1000,
                      t + i * 1000 + 500, t + i * 1000, t + i * 1000 + 500, 0])
        end = time.monotonic() + 10
        while sh.stats()["collectives_sent"] < 3 and time.monotonic() < end:
            time.sleep(0.02)
        sh.offer((1, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        sh.close(5)
        reqs = px.take()
        print(summarize([r for r in reqs if "/collectives" in r[1]]))
        s2 = sh.stats()
        ck.eq("vectors sent, collectives sent, collectives dropped, incarnation",
              (s2["sent"], s2["collectives_sent"], s2["collectives_dropped"], s2["incarnation"]), (2, 3, 0, 0))
        vec = [json.loads(b) for m, p, b, s, _x in reqs if p.endswith("/vectors") and s == 200]
        ck.eq("vector batches after it carry the incarnation", [v.get("incarnation") for v in vec], [0] * len(vec))
        ck.eq("answers >= 400", unexpected(reqs, none), [])

        print("polls: capture poll, trace upload, validation poll with incarnation")
        s3 = sink.clone()
        s3.poll_capture(0, 5)
        # a capture to upload to (what `laggard capture rc` does)
        body = json.dumps({"ranks": [0], "steps": 1, "every": 1, "reason": "realserver check"}).encode()
        req = urllib.request.Request(base + "/api/v1/jobs/rc/captures", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                capid = json.loads(r.read()).get("id")
        except urllib.error.HTTPError as e:
            capid = None
            print("  capture create: %d %s" % (e.code, e.read()[:300]))
        s3.poll_capture(0, 6)  # (a new plan waits for the polls to give a step rate: no plan yet)
        if capid:
            s3.post_capture_trace(capid, 0, None, 0, {"X-Laggard-Capture-Error": "realserver check: no profiler"})
        s3.poll_validation(0)
        s3.close()
        reqs = px.take()
        print(summarize(reqs))
        ck.eq("polls and uploads carry incarnation=0",
              all("incarnation=0" in p for m, p, _b, _s, _x in reqs if "/captures/" in p or "/validation" in p), True)
        ck.eq("answers >= 400", unexpected(reqs, none), [])

        print("sigterm: 60 steps held (60 s flush interval), then SIGTERM")
        ch = subprocess.Popen([sys.executable, "-c", CHILD, px.url, "rt", "term", "0", "60", "1.0", "60"],
                              env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = ch.stdout.readline()
        if line.strip() != "READY":
            raise SystemExit("sigterm child: %r %s" % (line, ch.stderr.read()[-2000:]))
        t0 = time.monotonic()
        ch.send_signal(signal.SIGTERM)
        rc = ch.wait(30)
        took = time.monotonic() - t0
        reqs = px.take()
        n = sum(len(json.loads(b)["vectors"]) for m, p, b, s, _x in reqs if p.endswith("/vectors") and s == 200)
        print("  exit status %d after %.2f s" % (rc, took))
        ck.eq("exit status (dies of SIGTERM)", rc, -signal.SIGTERM)
        ck.eq("vectors stored after SIGTERM", n, 60)
        ck.eq("answers >= 400", unexpected(reqs, none), [])

        for rate in (a.kill_rates.split(",") if a.kill_runs else ()):
            rate = float(rate)
            print("sigkill: %g steps/s, SIGKILL after %g-%g s (flush_interval 1 s, the default)" % (
                rate, a.kill_after, 2 * a.kill_after))
            rnd = random.Random(16)
            lost = []
            for i in range(a.kill_runs):
                page = os.path.join(d, "steps%d" % i)
                with open(page, "wb") as f:
                    f.write(b"\0" * 8)
                ch = subprocess.Popen([sys.executable, "-c", CHILD, px.url, "rk%g-%d" % (rate, i), "kill", "0", "0",
                                       str(1e3 / rate), "1.0", page], env=child_env(), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
                time.sleep(a.kill_after * (1 + rnd.random()))
                ch.kill()
                ch.wait()
                with open(page, "rb") as f:
                    made = int.from_bytes(f.read(8), "little")
                time.sleep(0.3)
                reqs = px.take()
                n = sum(len(json.loads(b)["vectors"]) for m, p, b, s, _x in reqs
                        if p.endswith("/vectors") and s == 200)
                lost.append(made - n)
                print("  run %d: %d steps ended, %d stored, %d lost" % (i, made, n, made - n))
            lost.sort()
            print("  lost per SIGKILL: min %d, median %d, max %d (of %d runs)" % (
                lost[0], lost[len(lost) // 2], lost[-1], len(lost)))
        print("every batch: members beyond the items and incarnation, empty vector batches")
        ck.eq("extra members, empty vector batches (%d batches)" % sum(
            1 for m, p, *_x in px.all if m == "POST" and ("/collectives" in p or p.endswith("/vectors"))),
            batch_members(px.all), ([], 0))
    finally:
        srv.terminate()
        srv.wait(10)
        px.httpd.shutdown()
        log = open(os.path.join(d, "serve.log")).read()
        if log.strip():
            print("server log (warn and above):\n" + log[-3000:])
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print("FAILED: %s" % ", ".join(ck.failed) if ck.failed else "all checks passed")
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    main()
