"""Checks an installed laggard from outside the source tree (run by
install_test.sh with a venv's python -I; not a unittest module).

    python -I installed_check.py --expect site|editable --source DIR

site: laggard must be the copy in this interpreter's site-packages;
editable: it must be the source tree's. Either way the distribution
metadata must match __version__, importing laggard must pull in no
framework, and a Perf with a file sink must write a valid stage matrix.
"""

import argparse
import importlib.metadata
import json
import os
import sys
import sysconfig
import tempfile


def fail(msg):
    print("installed_check: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", choices=("site", "editable"), required=True)
    ap.add_argument("--source", required=True, help="clients/python of the checkout")
    a = ap.parse_args()
    source = os.path.realpath(a.source)
    if os.path.realpath(os.getcwd()).startswith(source + os.sep):
        fail("run me from outside the source tree")

    import laggard

    where = os.path.realpath(laggard.__file__)
    purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
    if a.expect == "site" and not where.startswith(purelib + os.sep):
        fail("laggard imported from %s, not from site-packages %s" % (where, purelib))
    if a.expect == "editable" and where != os.path.join(source, "laggard", "__init__.py"):
        fail("editable laggard imported from %s, not from the source tree %s" % (where, source))
    if importlib.metadata.version("laggard") != laggard.__version__:
        fail("dist-info version %s != laggard.__version__ %s" % (importlib.metadata.version("laggard"),
                                                                laggard.__version__))
    import laggard._vocab
    import laggard.integrations.huggingface
    import laggard.integrations.lightning  # noqa: F401
    if a.expect == "site":
        files = {str(f) for f in importlib.metadata.files("laggard") or []}
        for must in ("laggard/_vocab.py", "laggard/integrations/lightning.py"):
            if must not in files:
                fail("%s missing from the installed RECORD" % must)
    leaked = [m for m in ("torch", "transformers", "lightning", "pytorch_lightning") if m in sys.modules]
    if leaked:
        fail("importing laggard imported %s" % leaked)

    out = os.path.join(tempfile.mkdtemp(), "{job}-r{rank}.jsonl")
    perf = laggard.Perf(job="installed", out=out, rank=0, world_size=1, flush_interval=0.01)
    for _ in range(5):
        with perf.step():
            with perf.stage("data"):
                pass
            with perf.stage("forward"):
                pass
    if not perf.close(10):
        fail("close timed out")
    st = perf.stats()
    if (st["sent"], st["dropped"], st["errors"]) != (5, 0, 0):
        fail("stats %s" % st)
    with open(out.replace("{job}", "installed").replace("{rank}", "0")) as f:
        lines = [json.loads(x) for x in f]
    if lines[0]["job"]["id"] != "installed" or len(lines) != 6:
        fail("bad stage matrix: %s" % lines[:2])
    if any(v["order_hash"] != perf.order_hash for v in lines[1:]):
        fail("vectors without the schema's order hash")
    print("installed_check: OK (%s, laggard %s from %s)" % (a.expect, laggard.__version__, where))


if __name__ == "__main__":
    main()
