"""Configuration from the environment: LAGGARD_* parsing (bad values warn
and fall back, never raise), explicit arguments winning, and job / run ids
that every rank of a launch derives alike."""

import json
import logging
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from envutil import module_fixture  # noqa: E402
from fakeserver import FakeServer  # noqa: E402
from helpers import CaptureSink  # noqa: E402
from laggard import config  # noqa: E402


setUpModule, tearDownModule = module_fixture()


class EnvVars:
    """Sets environment variables for a with-block, restoring them after."""

    def __init__(self, **kv):
        self.kv = kv

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.kv}
        os.environ.update(self.kv)
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class FromEnvTest(unittest.TestCase):
    def setUp(self):
        config._warned.clear()

    def test_every_variable(self):
        c = config.from_env({
            "LAGGARD_SERVER": "https://laggard.internal:8443/base", "LAGGARD_JOB": "llama-7b.run_42",
            "LAGGARD_RUN_ID": "r1", "LAGGARD_OUT": "/tmp/{job}.{rank}.jsonl", "LAGGARD_DISABLED": "0",
            "LAGGARD_LABELS": " team = ml , model=7b,", "LAGGARD_SYNC_MODEL": "ZeRO1", "LAGGARD_TOKEN": "s3cret",
            "LAGGARD_LOG_LEVEL": "INFO"})
        self.assertEqual(c, {"server": "https://laggard.internal:8443/base", "job": "llama-7b.run_42", "run_id": "r1",
                             "out": "/tmp/{job}.{rank}.jsonl", "enabled": True,
                             "labels": {"team": "ml", "model": "7b"}, "sync_model": "zero1", "token": "s3cret",
                             "log_level": logging.INFO})

    def test_bad_values_warn_once_and_fall_back(self):
        env = {"LAGGARD_SERVER": "ftp://x", "LAGGARD_JOB": "bad job!", "LAGGARD_RUN_ID": "r" * 200,
               "LAGGARD_DISABLED": "maybe", "LAGGARD_LABELS": "ok=1,novalue,=x", "LAGGARD_SYNC_MODEL": "tp",
               "LAGGARD_LOG_LEVEL": "loud"}
        with self.assertLogs("laggard", logging.WARNING) as cm:
            c = config.from_env(env)
            config.from_env(env)  # a second Perf must not repeat the warnings
        self.assertEqual(c, {"labels": {"ok": "1"}})
        self.assertEqual(len(cm.output), 7, "\n".join(cm.output))
        for name in env:
            self.assertTrue(any(name in line for line in cm.output), name)
        self.assertTrue(any("'novalue'" in line for line in cm.output))

    def test_either_switch_disables(self):
        for env, want in (({"LAGGARD_DISABLED": "1"}, False), ({"LAGGARD_DISABLED": "yes"}, False),
                          ({"LAGGARD_ENABLED": "0"}, False), ({"LAGGARD_ENABLED": "off"}, False),
                          ({"LAGGARD_ENABLED": "1", "LAGGARD_DISABLED": "true"}, False),
                          ({"LAGGARD_ENABLED": "true"}, True), ({"LAGGARD_DISABLED": ""}, None)):
            with self.subTest(env=env):
                self.assertEqual(config.from_env(env).get("enabled"), want)

    def test_token_never_logged(self):
        with self.assertLogs("laggard", logging.WARNING) as cm:
            config.from_env({"LAGGARD_TOKEN": "s3cret", "LAGGARD_SERVER": "gopher://x"})
        self.assertNotIn("s3cret", "\n".join(cm.output))


class JobIdTest(unittest.TestCase):
    def test_precedence(self):
        argv = ["/home/me/train_llama.py", "--lr", "1e-4"]
        self.assertEqual(config.job_id_from_env({"TORCHELASTIC_RUN_ID": "abc-123", "SLURM_JOB_ID": "9"}, argv),
                         "abc-123")
        self.assertEqual(config.job_id_from_env({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9"}, argv),
                         "slurm-9")
        self.assertEqual(config.job_id_from_env({"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2"}, argv), "slurm-9-2")
        self.assertEqual(config.job_id_from_env({}, argv), "train_llama")

    def test_script_stem_cases(self):
        self.assertEqual(config.job_id_from_env({}, ["/src/mypkg/__main__.py"]), "mypkg")
        self.assertEqual(config.job_id_from_env({}, ["-c"]), "python")
        self.assertEqual(config.job_id_from_env({}, []), "python")
        self.assertEqual(config.job_id_from_env({}, ["/x/my train (v2).py"]), "my-train-v2")
        self.assertEqual(config.job_id_from_env({"TORCHELASTIC_RUN_ID": "__weird id__"}, ["t.py"]), "weird-id__")

    def test_derived_ids_are_valid_server_ids(self):
        for argv in (["/x/.hidden.py"], ["/x/" + "a" * 300 + ".py"], ["/x/日本語.py"]):
            with self.subTest(argv=argv):
                self.assertRegex(config.job_id_from_env({}, argv), config.JOB_ID_RE)

    def test_no_default_my_job(self):
        p = laggard.Perf(sink=CaptureSink(), rank=0, world_size=1)
        p.close(1)
        self.assertNotEqual(p.job_id, "my-job")
        self.assertEqual(p.job_id, config.job_id_from_env())


class RunIdTest(unittest.TestCase):
    def test_precedence(self):
        self.assertEqual(config.run_id_from_env(8, {"TORCHELASTIC_RUN_ID": "e1", "SLURM_JOB_ID": "5"}), "e1")
        self.assertEqual(config.run_id_from_env(8, {"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "5"}), "5")
        self.assertEqual(config.run_id_from_env(8, {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0"}), "5.0")

    def test_single_node_launch_shares_the_launcher(self):
        env = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_PORT": "29500"}
        # Every local rank has its own pid but the same parent (the launcher).
        ids = {config.run_id_from_env(4, dict(env, RANK=str(r)), host="node1", pid=1000 + r, ppid=999)
               for r in range(4)}
        self.assertEqual(ids, {"node1:999:29500"})
        self.assertEqual(config.run_id_from_env(4, {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, host="h", ppid=7),
                         "h:7")

    def test_lone_process_and_multi_node(self):
        self.assertEqual(config.run_id_from_env(1, {}, host="h", pid=42, ppid=1), "h:42")
        self.assertIsNone(config.run_id_from_env(16, {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, host="h"))
        self.assertIsNone(config.run_id_from_env(2, {}, host="h"))  # mp.spawn without launcher env

    def test_ranks_of_one_launch_agree_on_job_and_run(self):
        base = {"TORCHELASTIC_RUN_ID": "job-77", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}
        got = {(config.job_id_from_env(dict(base, RANK=str(r)), ["train.py"]),
                config.run_id_from_env(16, dict(base, RANK=str(r)), host="n%d" % (r // 8), pid=r, ppid=r // 8))
               for r in range(16)}
        self.assertEqual(got, {("job-77", "job-77")})


class PerfFromEnvTest(unittest.TestCase):
    def test_out_from_env_with_substitution(self):
        d = tempfile.mkdtemp()
        with EnvVars(LAGGARD_OUT=os.path.join(d, "{job}-r{rank}.jsonl"), LAGGARD_JOB="envjob", LAGGARD_RUN_ID="run9"):
            p = laggard.Perf(rank=3, world_size=4, flush_interval=0.01)
        with p.step():
            pass
        self.assertTrue(p.close(5))
        with open(os.path.join(d, "envjob-r3.jsonl")) as f:
            lines = [json.loads(x) for x in f]
        self.assertEqual(lines[0]["job"]["id"], "envjob")
        self.assertEqual(lines[0]["job"]["run_id"], "run9")
        self.assertEqual(lines[0]["job"]["ranks"][0]["rank"], 3)
        self.assertEqual(lines[1]["rank"], 3)

    def test_explicit_server_beats_env_out_and_sends_token(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        d = tempfile.mkdtemp()
        with EnvVars(LAGGARD_OUT=os.path.join(d, "x.jsonl"), LAGGARD_TOKEN="tok-1", LAGGARD_SERVER="http://127.0.0.1:1"):
            p = laggard.Perf(server=srv.url, job="tok", rank=0, world_size=1, flush_interval=0.01)
        with p.step():
            pass
        self.assertTrue(p.close(5))
        self.assertEqual(os.listdir(d), [])
        self.assertTrue(srv.requests)
        self.assertEqual({r["authorization"] for r in srv.requests}, {"Bearer tok-1"})
        self.assertTrue(all(r["user_agent"].startswith("laggard-python/") for r in srv.requests))
        self.assertEqual(p.stats()["sent"], 1)

    def test_server_from_env_no_token_header_by_default(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        with EnvVars(LAGGARD_SERVER=srv.url, LAGGARD_JOB="srvenv", LAGGARD_LABELS="a=1",
                     LAGGARD_SYNC_MODEL="ddp"):
            p = laggard.init(rank=0, world_size=2, flush_interval=0.01, run_id="explicit-run", token=None)
        with p.step():
            pass
        self.assertTrue(p.close(5))
        put = srv.requests[0]
        self.assertEqual(put["path"], "/api/v1/jobs/srvenv")
        self.assertEqual(put["body"]["labels"], {"a": "1", "sync_model": "ddp"})
        self.assertEqual(put["body"]["run_id"], "explicit-run")
        self.assertIsNone(put["authorization"])

    def test_explicit_token_beats_env(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        with EnvVars(LAGGARD_TOKEN="env-tok"):
            p = laggard.Perf(server=srv.url, job="t2", rank=0, world_size=1, token="arg-tok", flush_interval=0.01)
        with p.step():
            pass
        p.close(5)
        self.assertEqual({r["authorization"] for r in srv.requests}, {"Bearer arg-tok"})

    def test_env_read_at_construction_only(self):
        with EnvVars(LAGGARD_JOB="first"):
            p = laggard.Perf(sink=CaptureSink(), rank=0, world_size=1)
        with EnvVars(LAGGARD_JOB="second"):
            with p.step():
                pass
        p.close(5)
        self.assertEqual(p.job_id, "first")

    def test_env_false_ignores_environment(self):
        with EnvVars(LAGGARD_JOB="envjob", LAGGARD_DISABLED="1"):
            p = laggard.Perf(sink=CaptureSink(), rank=0, world_size=1, env=False)
        p.close(1)
        self.assertNotEqual(p.job_id, "envjob")
        self.assertTrue(p.enabled)

    def test_bad_env_never_raises_into_training(self):
        config._warned.clear()
        with EnvVars(LAGGARD_SERVER="::::", LAGGARD_LABELS=",,,=", LAGGARD_LOG_LEVEL="-", LAGGARD_ENABLED="?"):
            p = laggard.init(job="robust", rank=0, world_size=1, sink=CaptureSink())
        with p.step():
            with p.stage("data"):
                pass
        self.assertTrue(p.close(5))
        self.assertEqual(p.stats()["steps"], 1)

    def test_single_process_run_id_sent(self):
        sink = CaptureSink()
        p = laggard.Perf(sink=sink, job="solo", rank=0, world_size=1)
        with p.step():
            pass
        p.close(5)
        self.assertEqual(sink.job["run_id"], "%s:%d" % (sink.rank["host"], os.getpid()))
        self.assertEqual(p.run_id, sink.job["run_id"])

    def test_no_run_id_field_when_unknown(self):
        sink = CaptureSink()
        p = laggard.Perf(sink=sink, job="multi", rank=0, world_size=2)
        with p.step():
            pass
        p.close(5)
        self.assertNotIn("run_id", sink.job)


if __name__ == "__main__":
    unittest.main()
