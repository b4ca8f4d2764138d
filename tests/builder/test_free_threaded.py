"""The one wheel under a free-threaded CPython: `import prerast` leaves the GIL off, and 8 threads rendering at once
through one shared context (rasterize, interpolate with derivatives, mipmapped texture, antialias, and the
backward of all four) give the bits one thread gives.

The interpreter is CPython 3.13 built with --disable-gil from Debian trixie's source package
(tests/support/free_threaded.py, cached in ~/.cache/prerast/free-threaded/), with PyPI's torch 2.12.0 cp313t (the
newest torch with a 3.13t build) installed once into a virtualenv kept beside it. The wheel under test is the one
ci/test.sh built (PRERAST_TEST_WHEEL, else the newest in dist/); it is installed into a folder of this test's own,
never into the kept virtualenv. Opt-in, since the first run builds CPython (minutes) and downloads torch:

    python -m pytest -q -m free_threaded tests/builder/test_free_threaded.py
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import free_threaded  # noqa: E402
from wheel_under_test import find_test_wheel  # noqa: E402

pytestmark = [pytest.mark.free_threaded, pytest.mark.slow, pytest.mark.wheel]

TORCH = "torch==2.12.0"
THREADS, FRAMES = 8, 5

RENDER = r"""
import json, sys, threading, time
gil = [sys._is_gil_enabled()]
t0 = time.perf_counter()
import torch
import prerast
from render_scene import grid_scene, render
import_s = time.perf_counter() - t0
gil.append(sys._is_gil_enabled())
THREADS, FRAMES = int(sys.argv[1]), int(sys.argv[2])
glctx = prerast.RasterizeCpuContext()  # one context, shared by every thread
scenes = [grid_scene(n=8, seed=f) for f in range(FRAMES)]
target = torch.full((1, 96, 96, 3), 0.25)


def frame(f):
    pos, tri, uv, tex = (t.clone() for t in scenes[f])
    for t in (pos, uv, tex):
        t.requires_grad_(True)
    color, loss = render(glctx, pos, tri, uv, tex, target)
    loss.backward()
    return [color.detach(), pos.grad, uv.grad, tex.grad]


t0 = time.perf_counter()
reference = [frame(f) for f in range(FRAMES)]
one_thread_s = time.perf_counter() - t0
results = [[None] * FRAMES for _ in range(THREADS)]
errors, start = [], threading.Barrier(THREADS)


def worker(i):
    try:
        start.wait()
        for k in range(FRAMES):
            f = (i + k) % FRAMES  # at any moment the threads render different frames
            results[i][f] = frame(f)
        gil.append(sys._is_gil_enabled())
    except BaseException as e:
        errors.append(f"thread {i}: {e!r}")


threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
t0 = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
threads_s = time.perf_counter() - t0
differ = [
    (i, f, j)
    for i in range(THREADS)
    for f in range(FRAMES)
    for j in range(4)
    if results[i][f] is None or not torch.equal(results[i][f][j], reference[f][j])
]
print(json.dumps({
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "prerast": prerast.__file__,
    "gil_enabled": gil,
    "errors": errors,
    "differ": differ[:10],
    "covered_pixels": [int((r[0].abs().sum(-1) > 0).sum()) for r in reference],
    "grad_nonzero": [bool(g.abs().sum() > 0) for r in reference for g in r[1:]],
    "import_s": round(import_s, 2),
    "one_thread_s": round(one_thread_s, 2),
    "threads_s": round(threads_s, 2),
}))
"""


@pytest.fixture(scope="module")
def interpreter(request):
    expr = request.config.getoption("markexpr") or ""
    if "free_threaded" not in expr or "not free_threaded" in expr:
        pytest.skip(
            "builds CPython with --disable-gil (minutes, cached) and downloads torch: run with -m free_threaded"
        )
    problem = free_threaded.missing_tools()
    if problem:
        pytest.skip(problem)
    python, seconds = free_threaded.build()
    print(f"\nfree-threaded CPython: {python} ({'built in %d s' % seconds if seconds else 'cached'})")
    return python


@pytest.fixture(scope="module")
def torch_venv(interpreter):
    """A virtualenv of the free-threaded interpreter with PyPI's torch 2.12.0 (cp313t) and numpy, kept beside the
    interpreter: marked complete only after the install, so a cut-short one is made again."""
    venv = os.path.join(os.path.dirname(free_threaded.default_prefix()), "venv-" + TORCH.replace("==", "-"))
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, "prerast-complete")
    if not os.path.exists(marker):
        subprocess.run([interpreter, "-m", "venv", "--clear", venv], check=True)
        out = subprocess.run(
            # Binaries only: numpy's newest release may have no 3.13t wheel (pip would build it from source).
            [python, "-m", "pip", "install", "-q", "--only-binary=:all:", TORCH, "numpy"],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        open(marker, "w").close()
    return python


def test_the_one_wheel_renders_from_8_threads_with_the_gil_off(torch_venv, tmp_path):
    wheel = find_test_wheel()
    assert "-py3-none-" in os.path.basename(wheel)
    site = str(tmp_path / "site")
    # The free-threaded interpreter's own pip takes the py3-none wheel (a cp310-abi3 one it would refuse).
    out = subprocess.run(
        [torch_venv, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.path.join(ROOT, "tests", "support")]))
    env.pop("PYTHON_GIL", None)  # PYTHON_GIL=1 would turn it on for the whole process
    out = subprocess.run(
        [torch_venv, "-c", RENDER, str(THREADS), str(FRAMES)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(report))
    assert report["prerast"].startswith(site), report["prerast"]  # the wheel's prerast, not the checkout's
    assert report["python"].startswith("3.13") and report["torch"].startswith("2.12.0")
    assert report["gil_enabled"] == [False] * (2 + THREADS), report["gil_enabled"]
    assert report["errors"] == [] and report["differ"] == [], report
    assert all(n > 0 for n in report["covered_pixels"]) and all(report["grad_nonzero"]), report
