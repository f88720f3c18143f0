"""The laggard client's PEP 517 / PEP 660 build backend, standard library only.

pyproject.toml names it with `backend-path`, and `requires = []`, so

    pip install --no-index ./clients/python        # or -e for an editable install

works on a machine with no package index and no build tools. It builds:

* a wheel (py3-none-any) of the `laggard` package (every .py file under
  laggard/, the generated _vocab.py and subpackages included) with
  METADATA, WHEEL and RECORD (sha256, urlsafe base64 without padding);
* an sdist (laggard-<version>.tar.gz) that can build that wheel again;
* an editable wheel (PEP 660): a .pth that installs a meta-path finder
  resolving `laggard` — and only it — to this source tree.

Metadata comes from pyproject.toml's [project] table; the version from
laggard/__init__.py's __version__ (read with ast, never imported). Archives
are reproducible: sorted entries, fixed timestamps (SOURCE_DATE_EPOCH if
set), fixed permissions.
"""

import ast
import base64
import csv
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # clients/python
PACKAGE = "laggard"
BACKEND_DIR = "backend"
_SKIP_DIRS = {"__pycache__"}

__all__ = [
    "get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable", "build_wheel", "build_sdist",
    "build_editable",
]


# --- pyproject.toml ----------------------------------------------------------

def _parse_toml_subset(text):
    """Reads the TOML subset pyproject.toml uses here — [tables], and keys
    whose values are strings, booleans, integers, inline tables of strings
    or (possibly multi-line) arrays of strings — for Pythons without tomllib
    (< 3.11). Anything else raises ValueError, so a file outgrowing the
    subset fails the build instead of being misread."""
    data, table = {}, None
    lines = iter(enumerate(text.splitlines(), 1))
    for n, raw in lines:
        line = _strip_comment(raw).strip()
        if not line:
            continue
        m = re.fullmatch(r"\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
        if m:
            table = data
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        if table is None:
            table = data
        key, sep, value = line.partition("=")
        key = key.strip().strip('"')
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]+", key):
            raise ValueError("pyproject.toml:%d: unsupported line %r" % (n, raw))
        value = value.strip()
        if value.startswith("[") and not _balanced(value):
            for _, more in lines:
                value += " " + _strip_comment(more).strip()
                if _balanced(value):
                    break
        table[key] = _toml_value(value, n)
    return data


def _strip_comment(line):
    out, quote = [], None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out)


def _balanced(value):
    depth, quote = 0, None
    for ch in value:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
    return depth == 0


def _toml_value(v, n):
    v = v.strip()
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"[+-]?\d+", v):
        return int(v)
    if v.startswith('"') and v.endswith('"') and len(v) >= 2:
        return ast.literal_eval(v)  # basic string: Python's escapes are a superset
    if v.startswith("'") and v.endswith("'") and len(v) >= 2:
        return v[1:-1]  # literal string: no escapes
    if v.startswith("[") and v.endswith("]"):
        inner = v[1:-1].strip().rstrip(",")
        return [_toml_value(x, n) for x in _split_top(inner)] if inner else []
    if v.startswith("{") and v.endswith("}"):
        out = {}
        for item in _split_top(v[1:-1]):
            k, sep, val = item.partition("=")
            if not sep:
                raise ValueError("pyproject.toml:%d: bad inline table %r" % (n, v))
            out[k.strip().strip('"')] = _toml_value(val, n)
        return out
    raise ValueError("pyproject.toml:%d: unsupported value %r" % (n, v))


def _split_top(s):
    parts, cur, depth, quote = [], [], 0, None
    for ch in s:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def load_pyproject(root=ROOT):
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib
    except ImportError:
        return _parse_toml_subset(text)
    return tomllib.loads(text)


def read_version(root=ROOT):
    """laggard/__init__.py's __version__, read without importing it."""
    path = os.path.join(root, PACKAGE, "__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            v = ast.literal_eval(node.value)
            if isinstance(v, str) and re.fullmatch(r"[0-9]+(\.[0-9]+)*([abc]|rc|\.post|\.dev)?[0-9]*", v):
                return v
            raise ValueError("%s: __version__ %r is not a plain PEP 440 version" % (path, v))
    raise ValueError("%s: no __version__ = '...' assignment" % path)


# --- metadata ---------------------------------------------------------------

class _Project:
    def __init__(self, root=ROOT):
        self.root = root
        proj = load_pyproject(root).get("project") or {}
        self.name = proj.get("name") or PACKAGE
        if "version" in proj:
            raise ValueError("pyproject.toml: the version is dynamic (laggard/__init__.py __version__)")
        self.version = read_version(root)
        self.proj = proj
        # Wheel and sdist file names use the normalized name (PEP 427/625).
        self.dist = re.sub(r"[-_.]+", "_", self.name).lower()
        self.dist_info = "%s-%s.dist-info" % (self.dist, self.version)

    def metadata(self):
        p = self.proj
        lines = ["Metadata-Version: 2.1", "Name: " + self.name, "Version: " + self.version]
        if p.get("description"):
            lines.append("Summary: " + p["description"])
        if p.get("requires-python"):
            lines.append("Requires-Python: " + p["requires-python"])
        lic = p.get("license")
        if isinstance(lic, dict) and lic.get("text"):
            lines.append("License: " + lic["text"])
        if p.get("keywords"):
            lines.append("Keywords: " + ",".join(p["keywords"]))
        for a in p.get("authors") or []:
            if a.get("name") and a.get("email"):
                lines.append("Author-email: %s <%s>" % (a["name"], a["email"]))
            elif a.get("email"):
                lines.append("Author-email: " + a["email"])
            elif a.get("name"):
                lines.append("Author: " + a["name"])
        for c in p.get("classifiers") or []:
            lines.append("Classifier: " + c)
        for label, url in sorted((p.get("urls") or {}).items()):
            lines.append("Project-URL: %s, %s" % (label, url))
        for d in p.get("dependencies") or []:
            lines.append("Requires-Dist: " + d)
        for extra, deps in sorted((p.get("optional-dependencies") or {}).items()):
            lines.append("Provides-Extra: " + extra)
            for d in deps:
                lines.append('Requires-Dist: %s; extra == "%s"' % (d, extra))
        body = ""
        readme = p.get("readme")
        if isinstance(readme, dict):
            readme = readme.get("file")
        if readme:
            with open(os.path.join(self.root, readme), encoding="utf-8") as f:
                body = f.read()
            ctype = "text/markdown" if readme.lower().endswith(".md") else "text/plain"
            lines.append("Description-Content-Type: " + ctype)
        text = "\n".join(lines) + "\n"
        if body:
            text += "\n" + body
        return text.encode("utf-8")

    def wheel_file(self):
        return ("Wheel-Version: 1.0\nGenerator: laggard_build %s\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                % self.version).encode("utf-8")

    def package_files(self):
        """(archive name, absolute path) of every .py file of the package."""
        out = []
        base = os.path.join(self.root, PACKAGE)
        for d, dirs, files in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("."))
            for fn in sorted(files):
                if fn.endswith(".py"):
                    full = os.path.join(d, fn)
                    out.append((os.path.relpath(full, self.root).replace(os.sep, "/"), full))
        if not any(a == PACKAGE + "/__init__.py" for a, _ in out):
            raise ValueError("no %s/__init__.py under %s" % (PACKAGE, self.root))
        return sorted(out)


# --- archives ---------------------------------------------------------------

def _epoch():
    try:
        return max(315532800, int(os.environ["SOURCE_DATE_EPOCH"]))  # zip cannot go before 1980
    except (KeyError, ValueError):
        return 315532800


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "sha256=" + digest


def _write_wheel(directory, filename, entries, dist_info):
    """entries: [(archive name, bytes)]; RECORD is computed and added last."""
    date = time.gmtime(_epoch())[:6]
    rec = io.StringIO()
    w = csv.writer(rec, lineterminator="\n")
    for name, data in entries:
        w.writerow([name, _record_hash(data), len(data)])
    record_name = dist_info + "/RECORD"
    w.writerow([record_name, "", ""])
    entries = entries + [(record_name, rec.getvalue().encode("utf-8"))]
    path = os.path.join(directory, filename)
    tmp = path + ".part"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=date)
            zi.external_attr = 0o100644 << 16  # regular file, rw-r--r--
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, path)
    return filename


def _dist_info_entries(proj):
    return [(proj.dist_info + "/METADATA", proj.metadata()), (proj.dist_info + "/WHEEL", proj.wheel_file())]


def _wheel_name(proj):
    return "%s-%s-py3-none-any.whl" % (proj.dist, proj.version)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 hooks ------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    proj = _Project()
    d = os.path.join(metadata_directory, proj.dist_info)
    os.makedirs(d, exist_ok=True)
    for name, data in _dist_info_entries(proj):
        with open(os.path.join(metadata_directory, name), "wb") as f:
            f.write(data)
    return proj.dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    proj = _Project()
    entries = [(arc, _read(full)) for arc, full in proj.package_files()]
    return _write_wheel(wheel_directory, _wheel_name(proj), entries + _dist_info_entries(proj), proj.dist_info)


_FINDER = '''"""Editable install of %(name)s %(version)s (generated by laggard_build):
imports the `%(pkg)s` package, and nothing else, from its source tree."""

import importlib.machinery
import sys

SOURCE = %(source)r


class _LaggardEditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != %(pkg)r:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [SOURCE])


if not any(getattr(f, "__name__", "") == "_LaggardEditableFinder" for f in sys.meta_path):
    sys.meta_path.append(_LaggardEditableFinder)
'''


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    proj = _Project()
    finder_mod = "_%s_editable_finder" % proj.dist
    finder = _FINDER % {"name": proj.name, "version": proj.version, "pkg": PACKAGE, "source": proj.root}
    entries = [
        ("__editable__.%s-%s.pth" % (proj.dist, proj.version), ("import %s\n" % finder_mod).encode("utf-8")),
        (finder_mod + ".py", finder.encode("utf-8")),
    ]
    return _write_wheel(wheel_directory, _wheel_name(proj), entries + _dist_info_entries(proj), proj.dist_info)


def sdist_files(proj):
    """(archive name, absolute path) of what an sdist needs to build the
    wheel again: pyproject.toml, the README, this backend, the package."""
    files = [("pyproject.toml", os.path.join(proj.root, "pyproject.toml")),
             (BACKEND_DIR + "/laggard_build.py", os.path.join(proj.root, BACKEND_DIR, "laggard_build.py"))]
    readme = proj.proj.get("readme")
    if isinstance(readme, dict):
        readme = readme.get("file")
    if readme:
        files.append((readme, os.path.join(proj.root, readme)))
    return sorted(files + proj.package_files())


def build_sdist(sdist_directory, config_settings=None):
    proj = _Project()
    top = "%s-%s" % (proj.dist, proj.version)
    filename = top + ".tar.gz"
    mtime = _epoch()
    entries = [(arc, _read(full)) for arc, full in sdist_files(proj)]
    entries.append(("PKG-INFO", proj.metadata()))
    path = os.path.join(sdist_directory, filename)
    tmp = path + ".part"
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for arc, data in sorted(entries):
                ti = tarfile.TarInfo(top + "/" + arc)
                ti.size = len(data)
                ti.mtime = mtime
                ti.mode = 0o644
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                tar.addfile(ti, io.BytesIO(data))
    os.replace(tmp, path)
    return filename
