"""A free-threaded CPython 3.13 (configure --disable-gil) for the tests that run prerast without a GIL, built once
from Debian trixie's source package into a private prefix and kept there:

    ~/.cache/prerast/free-threaded/cpython-3.13/bin/python3.13t

No free-threaded CPython is packaged for this Debian; trixie's source of python3.13 is. apt-get reads a sources
file of our own (one deb-src line for trixie) with its lists and cache in a private folder
(ci/toolkit/debian.py's apt_options), so the machine's apt state is untouched; `apt-get source --download-only`
fetches the upstream tarball, which is configured with --disable-gil, built with make -j2 and installed (with pip)
into the prefix, checked (sys._is_gil_enabled() is False) and only then marked complete: a second call finds the
marker and returns at once, a build cut short is started over. The build needs a C compiler, make and the -dev packages of
zlib, libffi, OpenSSL (ssl, for pip) and their kin.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from ci.toolkit import debian  # noqa: E402
from prerast_meta import platforms  # noqa: E402

SUITE = "trixie"
SOURCE_PACKAGE = "python3.13"
MARKER = "prerast-free-threaded.json"


def default_prefix():
    return os.path.join(platforms.default_cache_dir("linux"), "free-threaded", "cpython-3.13")


def interpreter(prefix):
    return os.path.join(prefix, "bin", "python3.13t")


def is_built(prefix):
    return os.path.exists(os.path.join(prefix, MARKER)) and os.access(interpreter(prefix), os.X_OK)


def missing_tools():
    """What the build needs and this machine lacks, as an install hint (empty: nothing)."""
    missing = [p for p in ("apt-get", "cc", "make", "tar") if not shutil.which(p)]
    return f"{', '.join(missing)} not found (apt-get install build-essential)" if missing else ""


def _run(argv, log_path, cwd=None):
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        rc = subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-20:])
        raise RuntimeError(f"{' '.join(argv[:2])} failed (exit {rc}); the end of {log_path}:\n{tail}")


def fetch_source(state):
    """apt-get update with a trixie deb-src line of our own, then apt-get source --download-only: the upstream
    tarball (python3.13_<version>.orig.tar.xz)."""
    for sub in ("lists/partial", "cache/archives/partial", "src"):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    with open(os.path.join(state, "sources.list"), "w") as f:
        f.write(f"deb-src [signed-by={debian.KEYRING}] {debian.debian_mirror()} {SUITE} main\n")
    log = os.path.join(state, "apt.log")
    _run(["apt-get", *debian.apt_options(state), "update"], log)
    folder = os.path.join(state, "src")
    _run(["apt-get", *debian.apt_options(state), "source", "--download-only", SOURCE_PACKAGE], log, cwd=folder)
    tarballs = glob.glob(os.path.join(folder, f"{SOURCE_PACKAGE}_*.orig.tar.xz"))
    if len(tarballs) != 1:
        raise RuntimeError(f"apt-get source left {tarballs or 'no'} orig tarball in {folder}")
    return tarballs[0]


def build(prefix=None, jobs=2, log=print):
    """The free-threaded interpreter under `prefix`, built first if needed; returns (its path, build seconds or
    None when it was cached)."""
    prefix = prefix or default_prefix()
    if is_built(prefix):
        return interpreter(prefix), None
    problem = missing_tools()
    if problem:
        raise RuntimeError(problem)
    start = time.monotonic()
    parent = os.path.dirname(prefix)
    work = os.path.join(parent, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tarball = fetch_source(os.path.join(parent, "apt"))
    log(f"free-threaded CPython: building {os.path.basename(tarball)} with --disable-gil into {prefix}")
    with tarfile.open(tarball) as t:
        t.extractall(work, filter="data")
    (src,) = [d for d in glob.glob(os.path.join(work, "*")) if os.path.isdir(d)]
    build_log = os.path.join(parent, "build.log")
    open(build_log, "w").close()
    # Configured for its final prefix (scripts and sysconfig name it) and marked complete only after the check.
    shutil.rmtree(prefix, ignore_errors=True)
    _run(["./configure", "--disable-gil", f"--prefix={prefix}", "--with-ensurepip=install"], build_log, cwd=src)
    _run(["make", f"-j{jobs}"], build_log, cwd=src)
    _run(["make", "install"], build_log, cwd=src)
    python = interpreter(prefix)
    out = subprocess.run([python, "-c", "import sys, ssl, zlib; print(sys._is_gil_enabled())"], capture_output=True)
    if out.stdout.strip() != b"False":
        raise RuntimeError(f"{python} does not run without the GIL: {out.stdout!r} {out.stderr!r}")
    seconds = round(time.monotonic() - start)
    with open(os.path.join(prefix, MARKER), "w") as f:
        json.dump({"source": os.path.basename(tarball), "configure": "--disable-gil", "seconds": seconds}, f)
    shutil.rmtree(work, ignore_errors=True)
    return interpreter(prefix), seconds


if __name__ == "__main__":
    print(build())
