"""The build cache and the opt-in first-use build, without compiling: builds once under concurrent callers, a
killed build leaves no lock that blocks, a cached plugin is loaded only when it fits these sources and torch, and
every failure says what to do. (The real build, and loading its result with no compiler, is
tests/builder/test_two_images.py.)"""

import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from installs import copy_package, mismatched_copy_with_cache, run_python
from prerast import _cache, _source_build
from prerast_meta import progress as _progress, sources as _sources

CACHE_MODULE = _cache.__file__

# Runs _cache.build_once in a fresh interpreter (loaded by path: no torch, no plugin), with a builder that
# records each call, takes `seconds` and writes the plugin file that makes an entry usable.
BUILDER = r"""
import importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("prerast_cache", sys.argv[1])
cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache)
root, key, seconds, start_at = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
while time.time() < start_at:  # let the racers start together
    time.sleep(0.002)

def build(folder):
    with open(os.path.join(root, "builds.txt"), "a") as f:
        f.write(f"{os.getpid()}\n")
    open(os.path.join(folder, "started"), "w").close()
    time.sleep(seconds)
    open(os.path.join(folder, "plugin.so"), "w").write("built by %d" % os.getpid())

waited = []
path, built = cache.build_once(root, key, build, lambda e: os.path.isfile(os.path.join(e, "plugin.so")),
                               on_wait=waited.append)
print(json.dumps({"pid": os.getpid(), "path": path, "built": built, "waited_for": waited}))
"""


def start_builder(root, key, seconds, start_at=0.0):
    return subprocess.Popen(
        [sys.executable, "-c", BUILDER, CACHE_MODULE, str(root), key, str(seconds), str(start_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def usable(entry):
    return os.path.isfile(os.path.join(entry, "plugin.so"))


def listing(root):
    return sorted(
        (os.path.relpath(os.path.join(d, f), root), os.path.getmtime(os.path.join(d, f)))
        for d, _, files in os.walk(root)
        for f in files
    )


def test_key_names_every_component():
    base = ("0.1.0", "2.14.1+cu130", "13.0", ["8.0", "9.0+PTX"], "abc")
    keys = {_cache.make_key(*base)}
    for i, other in enumerate(["0.2.0", "2.14.0+cu130", "12.8", ["9.0"], "abd"]):
        keys.add(_cache.make_key(*base[:i], other, *base[i + 1 :]))
    assert len(keys) == 6
    key = _cache.make_key(*base)
    assert key.startswith(_cache.key_prefix(*base[:3])) and key.endswith("_src-abc") and os.sep not in key
    cpu_key = _cache.make_key("0.1.0", "2.13.0+cpu", None, [], "abc")
    assert cpu_key == "prerast-0.1.0_torch-2.13.0+cpu_cpu_noarch_src-abc"


def test_racing_callers_build_once(tmp_path):
    start_at = time.time() + 1.0
    racers = [start_builder(tmp_path, "k", 1.5, start_at) for _ in range(3)]
    results = []
    for p in racers:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    builders = (tmp_path / "builds.txt").read_text().split()
    assert len(builders) == 1
    assert [r["built"] for r in results].count(True) == 1
    assert {r["path"] for r in results} == {str(tmp_path / "k")}
    for r in results:
        if not r["built"]:
            assert r["waited_for"] == [int(builders[0])]
    assert (tmp_path / "k" / "plugin.so").read_text() == f"built by {builders[0]}"
    assert not glob.glob(str(tmp_path / ".partial-*"))


def test_racing_first_uses_create_the_missing_cache_once(tmp_path):
    root = tmp_path / "new-cache"
    start_at = time.time() + 1.0
    racers = [start_builder(root, "k", 0.5, start_at) for _ in range(3)]
    for p in racers:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert (root / "builds.txt").read_text().count("\n") == 1 and usable(root / "k")


def test_cache_made_by_a_racer_between_check_and_create(tmp_path, monkeypatch):
    """The losing side of the race, made certain: the folder appears after build_once saw it missing."""
    root = str(tmp_path / "cache")
    real_makedirs = os.makedirs

    def racer_first(path, *args, **kwargs):
        if path == root and not os.path.isdir(root):
            real_makedirs(root)  # the other process wins
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(_cache.os, "makedirs", racer_first)
    path, built = _cache.build_once(root, "k", lambda f: open(os.path.join(f, "plugin.so"), "w").close(), usable)
    assert (path, built) == (os.path.join(root, "k"), True) and usable(path)


def test_new_cache_is_not_group_writable(tmp_path):
    old = os.umask(0o002)
    try:
        _cache.build_once(
            str(tmp_path / "cache"), "k", lambda f: open(os.path.join(f, "plugin.so"), "w").close(), usable
        )
    finally:
        os.umask(old)
    assert not os.stat(tmp_path / "cache").st_mode & 0o022


def test_killed_build_leaves_no_blocking_lock(tmp_path):
    killed = start_builder(tmp_path, "k", 120)
    deadline = time.time() + 30
    while not glob.glob(str(tmp_path / ".partial-k-*" / "started")):
        assert time.time() < deadline and killed.poll() is None, killed.stderr.read()
        time.sleep(0.02)
    lock = _cache.BuildLock(str(tmp_path / "k.lock"))
    assert lock.acquire(timeout=0.2) is False  # held while the build runs
    assert lock.holder() == killed.pid
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert os.path.exists(tmp_path / "k.lock") and glob.glob(str(tmp_path / f".partial-k-{killed.pid}"))
    t0 = time.monotonic()
    assert lock.acquire(timeout=5)
    assert time.monotonic() - t0 < 1
    lock.release()
    # The next build runs at once and clears what the killed one left.
    nxt = start_builder(tmp_path, "k", 0)
    out, err = nxt.communicate(timeout=30)
    assert nxt.returncode == 0, err
    result = json.loads(out)
    assert result["built"] and result["waited_for"] == []
    assert not glob.glob(str(tmp_path / ".partial-*")) and usable(str(tmp_path / "k"))


def test_waiter_names_the_live_holder_only(tmp_path):
    """The holder writes its pid just after it takes the lock, over whatever a killed holder left: a waiter that
    looks in between must neither print '?' nor the dead process's pid."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "k.lock"
    path.write_text(f"{dead.pid}\n")
    held = os.open(path, os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # a second open file description conflicts, even in this process
    reports, result = [], []
    waiter = threading.Thread(
        target=lambda: result.append(_cache.BuildLock(str(path)).acquire(timeout=10, on_wait=reports.append))
    )
    waiter.start()
    time.sleep(0.4)
    assert reports == []  # the dead pid is not reported
    os.ftruncate(held, 0)
    os.write(held, f"{os.getpid()}\n".encode())
    deadline = time.time() + 5
    while not reports and time.time() < deadline:
        time.sleep(0.02)
    assert reports == [os.getpid()]
    os.close(held)
    waiter.join(10)
    assert result == [True]


def test_released_lock_names_no_holder(tmp_path):
    lock = _cache.BuildLock(str(tmp_path / "k.lock"))
    assert lock.acquire(timeout=0) and lock.holder() == os.getpid()
    lock.release()
    assert lock.holder() is None


def test_unreadable_lock_names_no_holder(tmp_path, monkeypatch):
    """Another user's lock file that this user may not read: no holder to name, and no error."""
    path = tmp_path / "k.lock"
    path.write_text("123\n")
    real_open = open

    def guarded(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", guarded)
    assert _cache.BuildLock(str(path)).holder() is None


def test_finding_a_copied_build_writes_nothing(tmp_path):
    (tmp_path / "built" / "k").mkdir(parents=True)
    (tmp_path / "built" / "k" / "plugin.so").write_text("x")
    copy = tmp_path / "copied"
    shutil.copytree(tmp_path / "built", copy)
    before = listing(copy)

    def must_not_build(folder):
        raise AssertionError("built although a usable build exists")

    assert _cache.build_once(str(copy), "k", must_not_build, usable) == (str(copy / "k"), False)
    assert listing(copy) == before and sorted(os.listdir(copy)) == ["k"]


def test_failed_build_leaves_no_entry(tmp_path):
    def fail(folder):
        open(os.path.join(folder, "half"), "w").close()
        raise RuntimeError("compiler error")

    with pytest.raises(RuntimeError, match="compiler error"):
        _cache.build_once(str(tmp_path), "k", fail, usable)
    assert sorted(os.listdir(tmp_path)) == ["k.lock"]
    assert _cache.BuildLock(str(tmp_path / "k.lock")).acquire(timeout=0)


def test_digest_follows_what_the_compiler_reads(tmp_path):
    root = str(tmp_path)
    _sources.copy_sources(_sources.source_root(), root)
    assert _sources.source_files(root) == _sources.source_files(_sources.source_root())
    h = _sources.digest(root)
    with open(os.path.join(root, "README.md"), "a") as f:
        f.write("more words\n")
    assert _sources.digest(root) == h
    with open(os.path.join(root, "csrc", "core", "rasterize.h"), "a") as f:
        f.write("// changed\n")
    assert _sources.digest(root) != h


def test_sdist_carries_every_build_input(tmp_path):
    tree = _sources.materialize(str(tmp_path / "src"))
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    (sdist,) = glob.glob(str(tmp_path / "dist" / "prerast-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = set(_sources.source_files(_sources.source_root())) | {
        "package/prerast/_loader.py",
        "prerast_meta/sources.py",
        "prerast_meta/version.py",
    }
    assert needed <= names, needed - names


# The loader's way to the cache, in subprocesses importing a copy of the installed prerast whose own plugin is
# refused, with a cache entry holding the real plugin (what a first-use build would have produced).
PROBE = (
    "import json, sys, prerast; from prerast import _loader, _demo; img, _ = _demo.render('cpu', 32); "
    "print(json.dumps({'source': _loader.status()['source'], 'path': _loader.require()['path'], "
    "'cpp_extension': 'torch.utils.cpp_extension' in sys.modules, 'lit': int((img > 0).any(-1).sum())}))"
)


def test_cached_build_is_loaded_when_named(tmp_path):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    before = listing(cache)
    out = run_python(["-c", PROBE], path, PRERAST_CACHE_DIR=cache)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["source"] == "cache" and os.path.dirname(report["path"]) == entry
    assert not report["cpp_extension"] and report["lit"] > 0
    assert listing(cache) == before


def test_cache_is_not_read_by_default(tmp_path):
    # The same build in the default cache folder: without the opt-in or PRERAST_CACHE_DIR nothing reads it.
    path, cache, _ = mismatched_copy_with_cache(tmp_path)
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    shutil.move(cache, xdg / "prerast")
    out = run_python(["-c", "import prerast"], path, XDG_CACHE_HOME=xdg)
    assert out.returncode == 1
    assert "BinaryMismatchError" in out.stderr and "PRERAST_BUILD_ON_MISMATCH is not set" in out.stderr
    # Both ways out are named: the fitting wheel (or building it), and the opt-in.
    assert "pip install --force-reinstall" in out.stderr and "python -m prerast build-wheel" in out.stderr
    assert "export PRERAST_BUILD_ON_MISMATCH=1" in out.stderr and str(xdg / "prerast") in out.stderr


def test_cached_build_of_other_sources_is_ignored(tmp_path, monkeypatch):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    shipped = os.path.join(path, "prerast", "_src")
    monkeypatch.setattr(_sources, "source_root", lambda: shipped)
    monkeypatch.setenv("PRERAST_CACHE_DIR", cache)
    assert [folder for folder, _ in _source_build.fitting_entries()] == [entry]
    with open(os.path.join(shipped, "csrc", "core", "rasterize.h"), "a") as f:
        f.write("// changed\n")
    assert _source_build.fitting_entries() == []


def test_opt_in_without_compiler_says_what_is_missing(tmp_path):
    path = copy_package(tmp_path / "site", abi="classic", torch_version="2.4.1+cu124")
    out = run_python(
        ["-c", "import prerast"],
        path,
        PRERAST_BUILD_ON_MISMATCH=1,
        PRERAST_CACHE_DIR=tmp_path / "c",
        PATH=os.path.dirname(sys.executable),
        CXX="",
    )
    assert out.returncode == 1
    assert "PRERAST_BUILD_ON_MISMATCH=1 is set, but building a plugin that fits failed" in out.stderr
    assert "a C++ compiler (c++ is not on PATH)" in out.stderr
    assert "pip install --force-reinstall" in out.stderr


def test_failed_first_use_build_keeps_its_log(tmp_path):
    path = copy_package(tmp_path / "site", abi="classic", torch_version="2.4.1+cu124")
    setup = os.path.join(path, "prerast", "_src", "setup.py")
    with open(setup) as f:
        text = f.read()
    with open(setup, "w") as f:
        f.write('raise SystemExit("setup.py: the compiler is broken")\n' + text)
    cache = tmp_path / "c"
    out = run_python(["-c", "import prerast"], path, PRERAST_BUILD_ON_MISMATCH=1, PRERAST_CACHE_DIR=cache)
    assert out.returncode == 1
    assert "building a plugin that fits failed: the build failed" in out.stderr
    assert "setup.py: the compiler is broken" in out.stderr
    (failed_log,) = glob.glob(str(cache / "*.failed.log"))
    assert "the compiler is broken" in open(failed_log).read()
    assert [n for n in os.listdir(cache) if not n.endswith((".lock", ".failed.log"))] == []


# Stands in for `setup.py build_ext`: compiler commands as ninja prints them, a quiet spell, then the plugin.
FAKE_SETUP = r"""
import os, sys, time
out = os.path.join(sys.argv[sys.argv.index("-b") + 1], "prerast")
print("[1/2] /usr/bin/c++ -MMD -O3 -c /tmp/prerast-build-x/src/csrc/core/rasterize.cpp -o build/rasterize.o")
print("some warning nobody needs on the terminal", flush=True)
time.sleep(1.5)
print("[2/2] /usr/bin/c++ build/rasterize.o -shared -o " + os.path.join(out, "_C.abi3.so"), flush=True)
os.makedirs(out)
open(os.path.join(out, "_C.abi3.so"), "w").close()
"""


def test_first_use_build_says_what_it_compiles_and_beats_while_quiet(tmp_path, monkeypatch, capsys):
    def fake_tree(dest, root=None):
        os.makedirs(dest)
        with open(os.path.join(dest, "setup.py"), "w") as f:
            f.write(FAKE_SETUP)
        return dest

    monkeypatch.setattr(_sources, "materialize", fake_tree)
    monkeypatch.setattr(_progress, "HEARTBEAT_S", 0.3)
    entry = tmp_path / "entry"
    entry.mkdir()
    _source_build.build_into(str(entry), str(tmp_path), [], None, str(tmp_path / "failed.log"))
    captured = capsys.readouterr()
    err = captured.err
    assert captured.out == ""  # progress goes to stderr: stdout belongs to the importing program
    assert "prerast: build: compiling csrc/core/rasterize.cpp [1/2]" in err
    assert "prerast: build: still running (0:0" in err  # the quiet spell got a heartbeat
    assert "prerast: build: linking _C.abi3.so [2/2]" in err
    assert "nobody needs" not in err and "nobody needs" in (entry / "build.log").read_text()
    assert (entry / "_C.abi3.so").exists()


@pytest.mark.parametrize(
    "line, step",
    [
        (
            "[3/7] c++ -MMD -MF a.o.d -I/x -c /tmp/t/src/csrc/bindings/ops.cpp -o /tmp/t/build/ops.o -O3",
            "compiling csrc/bindings/ops.cpp [3/7]",
        ),
        (
            "[1/7] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /s/csrc/cuda/raster.cu -o r.o",
            "compiling csrc/cuda/raster.cu [1/7]",
        ),
        ("gcc -pthread -fPIC -I/inc -c csrc/core/tile.cpp -o build/temp/tile.o", "compiling csrc/core/tile.cpp"),
        ("[7/7] c++ a.o b.o -shared -L/torch/lib -lc10 -o build/lib/prerast/_C.abi3.so", "linking _C.abi3.so [7/7]"),
        ("running build_ext", None),
    ],
)
def test_compile_step_names_the_source(line, step):
    assert _progress.compile_step(line) == step
