"""End-to-end: the DDP demo trainer (2 ranks, gloo) writes valid stage
matrices per phase and speaks the HTTP contract. Skipped without torch."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DEMO = os.path.join(HERE, "..", "examples", "ddp_demo.py")

from fakeserver import FakeServer  # noqa: E402


@unittest.skipUnless(importlib.util.find_spec("torch"), "needs torch (run with /usr/bin/python3)")
class DDPDemoTest(unittest.TestCase):
    def run_demo(self, *args):
        return subprocess.run([sys.executable, DEMO, "--world", "2", "--log-every", "1000"] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)

    def test_phases_to_files(self):
        d = tempfile.mkdtemp()
        p = self.run_demo("--phases", "none:4,data@5:3", "--warmup", "1", "--fault-rank", "1", "--job", "t",
                          "--out", os.path.join(d, "{job}.jsonl"))
        self.assertEqual(p.returncode, 0, p.stderr)
        phases = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([(x["job"], x["from_step"], x["to_step"]) for x in phases],
                         [("t-p00-none-120ms", 1, 3), ("t-p01-data-5ms", 5, 6)])
        with open(phases[1]["file"]) as f:
            lines = [json.loads(line) for line in f]
        job = lines[0]["job"]
        self.assertEqual((job["id"], job["world_size"], len(job["ranks"])), ("t-p01-data-5ms", 2, 2))
        vecs = lines[1:]
        self.assertEqual(sorted((v["rank"], v["step"]) for v in vecs), [(r, s) for r in range(2) for s in (4, 5, 6)])
        hidden = [v["durations_ms"][0] for v in vecs if v["rank"] == 1]
        self.assertTrue(all(x >= 5.0 for x in hidden), hidden)  # the data sleep is inside data.next_wait
        self.assertTrue(all(len(v["durations_ms"]) == 6 for v in vecs))
        self.assertEqual([f for f in os.listdir(d) if f.endswith(".part")], [])

    def test_http_mode(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        p = self.run_demo("--steps", "4", "--fault", "backward_comm", "--delay-ms", "5", "--job", "http-demo",
                          "--server", srv.url)
        self.assertEqual(p.returncode, 0, p.stderr)
        puts = [r for r in srv.requests if r["method"] == "PUT"]
        self.assertEqual({r["path"] for r in puts}, {"/api/v1/jobs/http-demo"})
        ranks = sorted(r["body"]["rank"] for r in srv.requests if r["path"].endswith("/ranks"))
        self.assertEqual(ranks, [0, 1])
        self.assertEqual(sorted((v["rank"], v["step"]) for v in srv.vectors()),
                         [(r, s) for r in range(2) for s in range(4)])

    def test_bad_config_fails_nonzero(self):
        p = self.run_demo("--steps", "2", "--dim", "10", "--out", os.path.join(tempfile.mkdtemp(), "x.jsonl"))
        self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
