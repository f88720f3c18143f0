"""The in-tree PEP 517 / 660 build backend (backend/laggard_build.py): the
wheel's contents and RECORD, metadata, reproducibility, an sdist that
rebuilds the same wheel, and an editable wheel that imports the source
tree. (pip itself is exercised by tests/install_test.sh in `make test-py`.)"""

import base64
import csv
import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # clients/python
sys.path.insert(0, ROOT)

import laggard  # noqa: E402


def load_backend(root):
    spec = importlib.util.spec_from_file_location("laggard_build_%d" % abs(hash(root)),
                                                  os.path.join(root, "backend", "laggard_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def source_package_files():
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, "laggard")):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out += [os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/") for f in files if f.endswith(".py")]
    return sorted(out)


class BackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.be = load_backend(ROOT)
        cls.tmp = tempfile.mkdtemp()
        cls.dist_info = "laggard-%s.dist-info" % laggard.__version__

    def build_wheel(self, be=None):
        d = tempfile.mkdtemp(dir=self.tmp)
        name = (be or self.be).build_wheel(d)
        return os.path.join(d, name)

    def test_hooks_need_nothing(self):
        self.assertEqual(self.be.get_requires_for_build_wheel(), [])
        self.assertEqual(self.be.get_requires_for_build_sdist({}), [])
        self.assertEqual(self.be.get_requires_for_build_editable(None), [])

    def test_pyproject_declares_the_in_tree_backend(self):
        pp = self.be.load_pyproject()
        self.assertEqual(pp["build-system"], {"requires": [], "build-backend": "laggard_build",
                                              "backend-path": ["backend"]})
        self.assertEqual(pp["project"]["dynamic"], ["version"])

    def test_wheel_contents_and_record(self):
        path = self.build_wheel()
        self.assertEqual(os.path.basename(path), "laggard-%s-py3-none-any.whl" % laggard.__version__)
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkg = sorted(n for n in names if not n.startswith(self.dist_info))
            self.assertEqual(pkg, source_package_files())
            for must in ("laggard/_vocab.py", "laggard/integrations/huggingface.py",
                         "laggard/integrations/lightning.py"):
                self.assertIn(must, pkg)
            self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
            for n in pkg:
                with open(os.path.join(ROOT, n), "rb") as f:
                    self.assertEqual(z.read(n), f.read(), n)
            rows = list(csv.reader(io.StringIO(z.read(self.dist_info + "/RECORD").decode())))
            self.assertEqual(sorted(r[0] for r in rows), sorted(names))
            for name, digest, size in rows:
                if name == self.dist_info + "/RECORD":
                    self.assertEqual((digest, size), ("", ""))
                    continue
                data = z.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(digest, "sha256=" + want, name)
                self.assertEqual(int(size), len(data), name)
            wheel = z.read(self.dist_info + "/WHEEL").decode()
            self.assertIn("Wheel-Version: 1.0\n", wheel)
            self.assertIn("Root-Is-Purelib: true\n", wheel)
            self.assertIn("Tag: py3-none-any\n", wheel)
            meta = z.read(self.dist_info + "/METADATA").decode()
        head, _, body = meta.partition("\n\n")
        fields = dict(line.split(": ", 1) for line in head.splitlines())
        self.assertEqual(fields["Metadata-Version"], "2.1")
        self.assertEqual(fields["Name"], "laggard")
        self.assertEqual(fields["Version"], laggard.__version__)
        self.assertEqual(fields["Requires-Python"], ">=3.8")
        self.assertEqual(fields["Description-Content-Type"], "text/markdown")
        self.assertNotIn("Requires-Dist", head)  # standard library only
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            self.assertEqual(body, f.read())

    def test_prepare_metadata_matches_the_wheel(self):
        d = tempfile.mkdtemp(dir=self.tmp)
        self.assertEqual(self.be.prepare_metadata_for_build_wheel(d), self.dist_info)
        self.assertEqual(self.be.prepare_metadata_for_build_editable(d), self.dist_info)
        with open(os.path.join(d, self.dist_info, "METADATA"), "rb") as f:
            meta = f.read()
        with zipfile.ZipFile(self.build_wheel()) as z:
            self.assertEqual(z.read(self.dist_info + "/METADATA"), meta)

    def test_reproducible(self):
        with open(self.build_wheel(), "rb") as a, open(self.build_wheel(), "rb") as b:
            self.assertEqual(a.read(), b.read())
        d1, d2 = tempfile.mkdtemp(dir=self.tmp), tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(d1, self.be.build_sdist(d1)), "rb") as a, \
                open(os.path.join(d2, self.be.build_sdist(d2)), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_sdist_rebuilds_the_same_wheel(self):
        d = tempfile.mkdtemp(dir=self.tmp)
        name = self.be.build_sdist(d)
        top = "laggard-%s" % laggard.__version__
        self.assertEqual(name, top + ".tar.gz")
        with tarfile.open(os.path.join(d, name)) as t:
            members = t.getnames()
            self.assertTrue(all(m.startswith(top + "/") for m in members))
            for must in ("PKG-INFO", "pyproject.toml", "README.md", "backend/laggard_build.py", "laggard/_vocab.py"):
                self.assertIn(top + "/" + must, members)
            self.assertTrue(all(m.mode == 0o644 and m.uid == 0 for m in t.getmembers()))
            t.extractall(d, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        be2 = load_backend(os.path.join(d, top))
        with zipfile.ZipFile(self.build_wheel()) as a, zipfile.ZipFile(self.build_wheel(be2)) as b:
            self.assertEqual(a.namelist(), b.namelist())
            for n in a.namelist():
                self.assertEqual(a.read(n), b.read(n), n)

    def test_editable_wheel_imports_only_laggard_from_source(self):
        d = tempfile.mkdtemp(dir=self.tmp)
        with zipfile.ZipFile(os.path.join(d, self.be.build_editable(d))) as z:
            names = z.namelist()
            pth = [n for n in names if n.endswith(".pth")]
            self.assertEqual(len(pth), 1)
            line = z.read(pth[0]).decode().strip()
            self.assertRegex(line, r"^import _laggard_editable_finder$")
            finder = z.read("_laggard_editable_finder.py").decode()
            self.assertFalse([n for n in names if n.startswith("laggard/")])
        site = tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(site, "_laggard_editable_finder.py"), "w") as f:
            f.write(finder)
        # A fresh isolated interpreter with only `site` added: laggard comes
        # from the source tree; the tests/ folder next to it does not leak.
        code = ("import sys; sys.path.append(%r); import _laggard_editable_finder, laggard, laggard.integrations; "
                "print(laggard.__file__); import fakeserver" % site)
        r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=self.tmp,
                           timeout=60)
        self.assertEqual(r.stdout.strip(), os.path.join(ROOT, "laggard", "__init__.py"), r.stderr)
        self.assertIn("No module named 'fakeserver'", r.stderr)

    def test_toml_fallback_parser_agrees_with_tomllib(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("no tomllib before Python 3.11")
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            want = tomllib.load(f)
        with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
            self.assertEqual(self.be._parse_toml_subset(f.read()), want)
        sample = ('a = "x\\ty" # c\n[t.u]\nb = [\n  "1", # one\n  \'2\',\n]\nc = {text = "MIT"}\nd = true\ne = 3\n')
        self.assertEqual(self.be._parse_toml_subset(sample), tomllib.loads(sample))
        with self.assertRaises(ValueError):
            self.be._parse_toml_subset("a = 1.5e3\n")

    def test_version_comes_from_init(self):
        self.assertEqual(self.be.read_version(), laggard.__version__)


if __name__ == "__main__":
    unittest.main()
