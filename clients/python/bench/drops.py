#!/usr/bin/python3
"""Vector drops and the training thread's cost per step at high step rates,
against a real `laggard serve` (issue 16 item 3).

    go build -o /tmp/laggard ./cmd/laggard
    flock /work/wt/heavy.lock /usr/bin/python3 clients/python/bench/drops.py --laggard /tmp/laggard \
        [--rates 1000,10000] [--ranks 1,8] [--seconds 10] [--busy 0.1] [--delay-ms 0] [--client DIR ...]

Each configuration starts `ranks` processes (one per rank, as torchrun
does) that run a paced loop of `rate` steps/s for `seconds`: every step is
a `perf.step()` with five timed stages; `busy` of the step period is
pure-Python work spread over the stages (it holds the interpreter lock, as
model code does), the rest of the period the thread sleeps (releasing it,
as a thread waiting for the GPU does). At the end each rank calls
close(30), so what is still queued is shipped, not counted as a drop.

Reported per configuration and client copy (--client, repeatable: e.g. the
previous release's clients/python and this one); each configuration runs
--repeat times per copy, in rotated order, and the table holds medians:
  steps/s   achieved per rank (the loop falls behind when the CPU is short)
  offered   vectors the ranks produced, all runs; stored: what the server
            holds (GET /api/v1/jobs/{id}); drop%: 1 - stored/offered
  ovh p50 / p99  the training thread's wall time per step in µs beyond a
            loop without the client: the step block minus the work timed
            inside its stages (GIL waits included, so p99 shows the
            shipper's holds), less the same figure with no client
  cpu/st    the training thread's CPU µs per step beyond no client
  proc/st   the whole process's CPU µs per step beyond no client (the
            shipper thread's encoding and requests included)
  close     the longest close(30): what was still queued at the end
--delay-ms D puts a proxy in front of the server that answers every request
D ms late: a slow server (a loaded one's commit latency), where a fixed
batch size caps what a rank can ship at batch_size / D per second.
Run it under the machine-wide lock and note the load beside the figures.
"""

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ("data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "callbacks.cpu_wall",
          "optim.step_cpu_wall")


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def calibrate_spin(seconds):
    """Iterations of spin() that take about `seconds`."""
    n = 2000
    for _ in range(3):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            spin(n)
            best = min(best, time.perf_counter() - t)
        n = max(1, int(n * seconds / max(best, 1e-9)))
    return n


class _NoClient:
    """The same loop without a client: the baseline's clock reads."""

    def __init__(self):
        null = contextlib.nullcontext()
        self.step = self.stage = lambda *a: null

    def close(self, timeout=0):
        return True

    def stats(self):
        return {}


def worker(a):
    """One rank: the paced loop; prints one JSON line of results."""
    try:  # sleeps of ~100 µs need the default 50 µs timer slack gone
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except Exception:
        pass
    if a.client != "none":
        sys.path.insert(0, a.client)
        import laggard
        perf = laggard.Perf(server=a.url, job=a.job, rank=a.rank, world_size=a.world, capture=False, env=False,
                            **json.loads(a.perf_args or "{}"))
    else:
        perf = _NoClient()
    period = 1.0 / a.rate
    k = a.spin  # calibrated once by the parent: every run of a configuration does the same work
    now = time.perf_counter_ns
    over = []
    n = int(a.rate * a.seconds)
    warm = min(n // 10, 1000)  # thread start and registration are not the steady state
    t_start = time.perf_counter()
    nxt = t_start
    stage = perf.stage
    for i in range(n):
        if i == warm:
            cpu0, proc0 = time.thread_time_ns(), time.process_time_ns()
        w = 0
        t0 = now()
        with perf.step():
            for s in STAGES:
                with stage(s):
                    u = now()
                    if k:
                        spin(k)
                    w += now() - u
        over.append(now() - t0 - w)
        nxt += period
        d = nxt - time.perf_counter()
        if d > 0:
            time.sleep(d)
    cpu = (time.thread_time_ns() - cpu0) / (n - warm) / 1e3
    proc = (time.process_time_ns() - proc0) / (n - warm) / 1e3
    took = time.perf_counter() - t_start
    t = time.perf_counter()
    perf.close(30)
    close_s = time.perf_counter() - t
    st = perf.stats()
    body = sorted(over[warm:])
    print(json.dumps({"steps": n, "rate": n / took, "close_s": close_s, "sent": st.get("sent", 0),
                      "dropped": st.get("dropped", 0), "errors": st.get("errors", 0), "last_error": st.get("last_error"),
                      "ovh_p50": body[len(body) // 2] / 1e3, "ovh_p99": body[int(0.99 * (len(body) - 1))] / 1e3,
                      "cpu": cpu, "proc": proc}), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_server(binary, data):
    port = free_port()
    log = open(os.path.join(data, "serve.log"), "w")
    p = subprocess.Popen([binary, "serve", "-addr", "127.0.0.1:%d" % port, "-data", os.path.join(data, "store"),
                          "-incidents=false", "-greyhound-interval", "0", "-log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return p, url
        except Exception:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("laggard serve did not come up (see %s)" % log.name)


def start_delay_proxy(target, delay_s):
    """An HTTP proxy in front of the server that answers every request
    delay_s later than the server does: a slow or far server (the commit
    latency of a loaded one)."""
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    host, port = target.split("//")[1].split(":")

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def _h(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            if not hasattr(self, "_up"):
                self._up = http.client.HTTPConnection(host, int(port), timeout=60)
            self._up.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
            r = self._up.getresponse()
            data = r.read()
            time.sleep(delay_s)
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("content-length", "connection", "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = _h

    class Quiet(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):  # a client that gave up on a late answer
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    srv = Quiet(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return "http://127.0.0.1:%d" % srv.server_address[1]


def stored(url, job):
    try:
        with urllib.request.urlopen("%s/api/v1/jobs/%s" % (url, job), timeout=10) as r:
            return json.loads(r.read())["vectors"]
    except Exception:
        return 0


def run_config(a, url, client, rate, ranks, tag, ship_url=None):
    job = "drops-%s-%d-%d-%d" % (tag, rate, ranks, os.getpid())
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--url", ship_url or url, "--job", job,
           "--world", str(ranks), "--spin", str(a.spin_by_rate[rate]),
           "--rate", str(rate), "--seconds", str(a.seconds), "--busy", str(a.busy), "--client", client]
    if a.perf_args:
        cmd += ["--perf-args", a.perf_args]
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, text=True) for r in range(ranks)]
    res = []
    for p in procs:
        out, _ = p.communicate()
        lines = [x for x in out.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines:
            raise SystemExit("worker failed (rc %d): %s" % (p.returncode, out[-2000:]))
        res.append(json.loads(lines[-1]))
    time.sleep(0.5)  # the server answers after commit; a last look for late batches
    offered = sum(r["steps"] for r in res)
    got = stored(url, job) if client != "none" else 0
    mean = lambda key: sum(r[key] for r in res) / len(res)  # noqa: E731 - over the ranks
    return {"rate": mean("rate"), "offered": offered, "stored": got, "dropped": sum(r["dropped"] for r in res),
            "errors": sum(r["errors"] for r in res), "ovh_p50": mean("ovh_p50"), "ovh_p99": mean("ovh_p99"),
            "cpu": mean("cpu"), "proc": mean("proc"), "close_s": max(r["close_s"] for r in res),
            "last_error": next((r["last_error"] for r in res if r.get("last_error")), "")}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--laggard", help="the laggard binary (go build ./cmd/laggard)")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--ranks", default="1,8")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--busy", type=float, default=0.1, help="fraction of each step spent in pure-Python work")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each copy per configuration (medians reported)")
    ap.add_argument("--client", action="append", help="a clients/python directory (repeatable); default: this one")
    ap.add_argument("--delay-ms", type=float, default=0,
                    help="answer every request this much later than the server does (a proxy in front of it)")
    ap.add_argument("--perf-args", help="JSON of extra laggard.Perf keywords (experiments: queue_size, batch_size)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--spin", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.client = a.client[0] if a.client else os.path.join(HERE, "..")
        worker(a)
        return
    if not a.laggard:
        ap.error("--laggard BINARY is required")
    clients = a.client or [os.path.join(HERE, "..")]
    rates = [int(x) for x in a.rates.split(",")]
    a.spin_by_rate = {r: calibrate_spin(a.busy / r / len(STAGES)) if a.busy > 0 else 0 for r in rates}
    data = tempfile.mkdtemp(prefix="laggard-drops-")
    srv, url = start_server(a.laggard, data)
    ship_url = start_delay_proxy(url, a.delay_ms / 1e3) if a.delay_ms > 0 else url
    try:
        print("load: %s" % open("/proc/loadavg").read().strip())
        print("%ds per run, busy %.0f%% of each step, requests answered %g ms late; ovh = training-thread µs per "
              "step beyond a loop without the client" % (a.seconds, a.busy * 100, a.delay_ms))
        print("%-28s %6s %5s %8s %8s %8s %7s %7s %7s %7s %7s %6s" % (
            "client", "rate", "ranks", "steps/s", "offered", "stored", "drop%", "ovh p50", "ovh p99", "cpu/st",
            "proc/st", "close"))
        for rate in rates:
            for ranks in [int(x) for x in a.ranks.split(",")]:
                names = ["none"] + [os.path.abspath(c) for c in clients]
                runs = {c: [] for c in names}
                for rep in range(a.repeat):  # rotated, so no copy always runs first
                    for j in range(len(names)):
                        c = names[(j + rep) % len(names)]
                        runs[c].append(run_config(a, url, c, rate, ranks, "%d-%d" % (names.index(c), rep),
                                                  None if c == "none" else ship_url))
                base = {k: median([r[k] for r in runs["none"]]) for k in ("rate", "ovh_p50", "ovh_p99", "cpu", "proc")}
                for c in names[1:]:
                    rs = runs[c]
                    med = {k: median([r[k] for r in rs]) for k in ("rate", "ovh_p50", "ovh_p99", "cpu", "proc")}
                    off, got = sum(r["offered"] for r in rs), sum(r["stored"] for r in rs)
                    name = c if len(c) <= 28 else "…" + c[-27:]
                    print("%-28s %6d %5d %8.0f %8d %8d %6.2f%% %7.2f %7.2f %7.2f %7.2f %6.2f" % (
                        name, rate, ranks, med["rate"], off, got, 100.0 * (1 - got / max(1, off)),
                        med["ovh_p50"] - base["ovh_p50"], med["ovh_p99"] - base["ovh_p99"], med["cpu"] - base["cpu"],
                        med["proc"] - base["proc"], max(r["close_s"] for r in rs)), flush=True)
                    errs = sum(r["errors"] for r in rs)
                    if errs:
                        print("    %d errors, e.g. %s" % (errs, next(r["last_error"] for r in rs if r["last_error"])[:150]))
                print("%-28s %6d %5d %8.0f %8s %8s %7s %7.2f %7.2f %7.2f %7.2f   (no client: raw figures)" % (
                    "(none)", rate, ranks, base["rate"], "", "", "", base["ovh_p50"], base["ovh_p99"], base["cpu"],
                    base["proc"]), flush=True)
        print("load: %s" % open("/proc/loadavg").read().strip())
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
