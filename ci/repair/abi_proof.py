"""Which torch releases one wheel really serves: install it into fresh virtualenvs with other torch releases and
run the op tests there. Prints a Markdown table (and writes it as JSON with --json).

    python -m ci abi-proof dist/prerast-0.1.0-py3-none-*.whl                      # the stable wheel, default set
    python -m ci abi-proof WHEEL --torch 2.11.0 --torch 2.14.1@3.12 --torch 2.13.0+cpu
    python -m ci abi-proof --build 2.4.0 --cpu --torch 2.4.1 --refused 2.9.1      # build a classic wheel first

Each target is TORCH[@PYTHON] (Python 3.11 by default): a fresh venv in .venv/proof/<target> (removed after) with that torch, numpy
and pytest, the wheel installed with --no-deps, then `pytest tests/core/ops` on the CPU there, and the time from a
fresh process's `import prerast` to its first rendered frame. A --refused target must fail at import with
BinaryMismatchError. The wheel's own audits run once: `python -m ci symbols` (torch's C shims only) and its guard
of the py3-none tag (no Python C API).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":
    sys.path.insert(0, ROOT)

from ci.builder import local
from ci.builder.progress import clock, log  # noqa: E402
from ci.repair import python_api, symbols  # noqa: E402
from prerast_meta import build_env, build_wheel as _route, sources  # noqa: E402

STABLE_TARGETS = ["2.11.0", "2.12.0", "2.12.1", "2.14.0", "2.14.1", "2.14.1@3.12", "2.14.1@3.13", "2.13.0+cpu"]

FIRST_FRAME = """
import time; t0 = time.time()
import torch, prerast
pos = torch.tensor([[[-0.8, -0.8, 0.0, 1.0], [0.8, -0.8, 0.0, 1.0], [0.0, 0.8, 0.0, 1.0]]])
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, resolution=(256, 256))
assert int((rast[..., 3] > 0).sum()) > 0
print(prerast._loader.status()["info"]["abi"], round(time.time() - t0, 2))
"""


def parse_target(text):
    torch_spec, _, python = text.partition("@")
    return torch_spec, python or "3.11"


def make_venv(path, torch_spec, python):
    """A venv with exactly torch_spec, numpy and pytest (reused when it already has that torch)."""
    py = os.path.join(path, "bin", "python")
    if os.path.exists(py):
        have = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        if have.returncode == 0 and have.stdout.strip().startswith(torch_spec):
            return py
        shutil.rmtree(path)
    interpreter = local.python_executable(python)  # through pyenv's shims to the real interpreter
    if not interpreter:
        raise RuntimeError(f"no python{python} here")
    subprocess.run([interpreter, "-m", "venv", path], check=True)
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"torch=={torch_spec}", "numpy", "pytest"],
        check=True,
    )
    return py


# Op tests of the plugin's own arithmetic on large inputs (exact rasterization against rational arithmetic,
# gradients of big images): the same instructions compute the same bits under whatever torch loads the plugin,
# and the main suite runs them. What another torch release can change is each call across the ABI (argument
# checks, allocation, dispatch, errors, autograd), which the other files of tests/core/ops make on every op.
# --all-op-tests runs them here too (about 40 s more on two cores).
NUMERICS_ONLY = ["test_rasterize_exact.py", "test_large_image_gradients.py"]


def run_target(wheel, target, work, refused=False, keep=False, all_tests=False):
    """Install and test wheel next to one torch; the venv (several GB with a CUDA torch) is removed afterwards
    unless keep: pip's cache makes the next one quick."""
    venv = os.path.join(work, re.sub(r"[^\w.]+", "_", target))
    try:
        return _run_target(wheel, target, venv, work, refused, all_tests)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:  # one target's failure is one row
        log(f"{target}: {e}")
        return {"target": target, "torch": parse_target(target)[0], "ok": False, "result": f"failed: {e}"}
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)


def _run_target(wheel, target, venv, work, refused, all_tests=False):
    torch_spec, python = parse_target(target)
    t0 = time.time()
    log(f"{target}: virtualenv with torch {torch_spec} on Python {python}")
    py = make_venv(venv, torch_spec, python)
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--disable-pip-version-check", wheel],
        check=True,
    )
    row = {
        "target": target,
        "torch": subprocess.run(
            [py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
        ).stdout.strip(),
    }
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    frame = subprocess.run([py, "-c", FIRST_FRAME], capture_output=True, text=True, cwd=work, env=env)
    if refused:
        row["ok"] = frame.returncode != 0 and "BinaryMismatchError" in frame.stderr
        row["result"] = "refused: " + next(
            (ln.strip() for ln in frame.stderr.splitlines() if "mismatch:" in ln),
            frame.stderr.strip().splitlines()[-1] if frame.stderr.strip() else "?",
        )
        return row
    if frame.returncode != 0:
        row.update(ok=False, result="import failed: " + frame.stderr.strip().splitlines()[-1])
        return row
    abi, seconds = frame.stdout.split()
    row.update(abi=abi, first_frame_s=float(seconds))
    skip = (
        []
        if all_tests
        else [a for f in NUMERICS_ONLY for a in ("--ignore", os.path.join(ROOT, "tests", "core", "ops", f))]
    )
    tests = subprocess.run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(ROOT, "tests", "core", "ops"), *skip],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
    )
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else tests.stderr[-300:]
    row.update(ok=tests.returncode == 0, result=summary, minutes=clock(time.time() - t0))
    log(f"{target}: {summary}")
    return row


def build_wheel(torch_spec, work, cpu_only, abi=None):
    """A wheel built (not repaired) in a fresh venv with torch_spec, as `pip wheel --no-build-isolation .` does."""
    venv = os.path.join(work, "build-" + re.sub(r"[^\w.]+", "_", torch_spec))
    py = make_venv(venv, torch_spec, "3.11")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "setuptools>=64", "wheel", "ninja"],
        check=True,
    )
    out = os.path.join(work, "wheels-" + re.sub(r"[^\w.]+", "_", torch_spec))
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    log(f"building a wheel against torch {torch_spec}" + (" (CPU only)" if cpu_only else ""))
    src = sources.materialize(os.path.join(work, "src-" + os.path.basename(venv)), ROOT)
    # The one build route (prerast_meta/build_wheel.py), unrepaired: the proof installs the raw wheel.
    spec = _route.BuildSpec(
        source=src,
        out_dir=out,
        python=py,
        abi=abi or "",
        repair=False,
        cuda_home=None if cpu_only else build_env.find_cuda_home(),
        log_path=os.path.join(work, "build-" + os.path.basename(venv) + ".log"),
    )
    _route.build(spec, log=lambda text: log("  " + text))
    shutil.rmtree(src, ignore_errors=True)
    log(f"built in {clock(time.time() - t0)}")
    shutil.rmtree(venv, ignore_errors=True)
    (wheel,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return wheel


def audits(wheel, python=sys.executable):
    """The symbol audit (a stable wheel imports only torch's C shims, the C/C++ runtime and cudart; a classic one
    links torch's C++ API by design) and the Python C-API guard of the py3-none tag (ci/repair/python_api.py)."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        info = json.loads(z.read("prerast/_build_info.json"))
    report = symbols.audit_wheel(wheel, only_held=True)
    others = sorted(n for kinds in report.values() for n in kinds.get("other", []))
    if info.get("abi") != "stable":
        sym = f"classic: links {len(others)} C++ symbols of torch {info['torch_version']} (serves its minor only)"
        others = []
    elif not others:
        sym = "ok: only " + ", ".join(sorted({k for kinds in report.values() for k in kinds}))
    else:
        sym = f"{len(others)} not allowed: {', '.join(others[:5])}"
    uses = {lib: problems for lib, problems in python_api.audit_wheel(wheel).items() if problems}
    api = "ok" if not uses else "used: " + "; ".join(f"{lib} {', '.join(p[:3])}" for lib, p in sorted(uses.items()))
    return {"symbols": sym, "python_api": api, "symbols_ok": not others, "python_api_ok": not uses}


def table(wheel, rows, audit):
    lines = [
        f"wheel: {os.path.basename(wheel)} ({os.path.getsize(wheel) / 1e6:.1f} MB)",
        f"undefined-symbol audit: {audit['symbols']}; Python C API: {audit['python_api']}",
        "",
        "| target | torch | result | import → first frame |",
        "|---|---|---|---|",
    ]
    for r in rows:
        frame = f"{r['first_frame_s']:.2f} s" if "first_frame_s" in r else "-"
        lines.append(f"| {r['target']} | {r['torch']} | {'✅' if r['ok'] else '❌'} {r['result']} | {frame} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci abi-proof", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("wheel", nargs="?", help="the wheel to test (or --build one)")
    p.add_argument("--build", metavar="TORCH", help="first build a wheel against this torch in a fresh venv")
    p.add_argument("--cpu", action="store_true", help="with --build: a CPU-only build (PRERAST_FORCE_CPU=1)")
    p.add_argument("--abi", choices=["stable", "classic"], help="with --build: PRERAST_ABI")
    p.add_argument("--torch", action="append", help="TORCH[@PYTHON] to serve (default: the stable set)")
    p.add_argument("--refused", action="append", default=[], help="TORCH[@PYTHON] that must refuse the wheel")
    p.add_argument("--work", default=os.path.join(ROOT, ".venv", "proof"))
    p.add_argument("--json")
    p.add_argument("--keep", action="store_true", help="keep the virtualenvs (several GB each)")
    p.add_argument(
        "--all-op-tests",
        action="store_true",
        help=f"also the op tests of the plugin's own arithmetic alone: {', '.join(NUMERICS_ONLY)}",
    )
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    if not a.wheel and not a.build:
        p.error("give a wheel or --build TORCH")
    wheel = os.path.abspath(a.wheel) if a.wheel else build_wheel(a.build, a.work, a.cpu, a.abi)
    rows = [run_target(wheel, t, a.work, keep=a.keep, all_tests=a.all_op_tests) for t in (a.torch or STABLE_TARGETS)]
    rows += [run_target(wheel, t, a.work, refused=True, keep=a.keep) for t in a.refused]
    audit = audits(wheel)
    print(table(wheel, rows, audit))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"wheel": wheel, "rows": rows, "audit": audit}, f, indent=2)
    return 0 if all(r["ok"] for r in rows) and audit["symbols_ok"] and audit["python_api_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
