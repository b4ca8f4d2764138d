"""What this machine can build: the toolchain (nvcc version), the Pythons, and which torch builds pip can install
here (its indexes, find-links and constraints). Every cell of the matrix gets a verdict with a reason, so that
cells that cannot be built here are listed as such, not silently skipped."""

import functools
import os
import re
import shutil
import subprocess
import sys

from prerast_meta import build_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_executable(version):
    """The interpreter for Python `version` ('3.12'), resolved through pyenv shims to its real path, or None."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = os.path.expanduser("~/.pyenv/versions")
    if os.path.isdir(pyenv):
        candidates += [
            os.path.join(pyenv, d, "bin", f"python{version}")
            for d in sorted(os.listdir(pyenv), reverse=True)
            if d.startswith(version + ".")
        ]
    for exe in filter(None, candidates):
        if not os.path.exists(exe):
            continue
        out = subprocess.run([exe, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return None


@functools.cache
def nvcc():
    """(CUDA_HOME, 'major.minor') of the toolkit here, or (None, None)."""
    home = build_env.find_cuda_home()
    version = build_env.nvcc_version(home)
    return home, (".".join(version.split(".")[:2]) if version else None)


@functools.cache
def torch_versions(index_url=None):
    """Torch versions pip can see here: its configured indexes and find-links, plus `index_url` if given."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "torch", "--timeout", "5", "--retries", "0"]
    if index_url:
        cmd += ["--extra-index-url", index_url]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", out.stdout)
    return frozenset(v.strip() for v in m.group(1).split(",")) if m else frozenset()


def _vkey(v):
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0]))


@functools.cache
def torch_constraints():
    """torch specifiers from pip's constraint files (config or PIP_CONSTRAINT), e.g. [('<=', '2.14.1')]."""
    files = os.environ.get("PIP_CONSTRAINT", "").split()
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    files += [
        f for line in out.splitlines() if ".constraint=" in line for f in line.split("=", 1)[1].strip("'\"").split()
    ]
    specs = []
    for path in files:
        if os.path.isfile(path):
            for line in open(path):
                m = re.match(r"\s*torch\s*((?:[<>=!~]=?\s*[\w.+]+\s*,?\s*)+)", line)
                if m:
                    specs += re.findall(r"([<>=!~]=?)\s*([\w.+]+)", m.group(1))
    return tuple(specs)


def allowed(version):
    """Does pip's constraint set allow torch `version`?"""
    v = _vkey(version)
    ops = {"<=": v.__le__, "<": v.__lt__, ">=": v.__ge__, ">": v.__gt__, "==": v.__eq__, "!=": v.__ne__}
    return all(ops.get(op, lambda _: True)(_vkey(bound)) for op, bound in torch_constraints())
