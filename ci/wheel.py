"""Build, repair and install prerast wheels; make compiler-free runtime environments. Standard library only.

    python ci/wheel.py build  --out dist          # pip wheel + auditwheel repair, with the current interpreter
    python ci/wheel.py venv   PATH -r REQS...     # a virtualenv with the given requirements
    python ci/wheel.py smoke  VENV WHEEL --png F  # install WHEEL into VENV and render there with no compiler
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _load_repair_policy():
    """package/prerast/_repair.py, loaded by path: importing the prerast package would load its plugin."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prerast_repair", os.path.join(ROOT, "package", "prerast", "_repair.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_policy = _load_repair_policy()
AUDITWHEEL_EXCLUDES = _policy.AUDITWHEEL_EXCLUDES

# Programs a runtime image does not have; the smoke test checks none of them is reachable.
BUILD_TOOLS = ["cc", "gcc", "g++", "c++", "clang", "nvcc", "ninja", "make", "ld"]


def log(msg):
    print(f"[prerast {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def build_wheel(out_dir, python=sys.executable, source=ROOT):
    """pip wheel --no-build-isolation in `python`'s environment, then auditwheel repair into out_dir.
    Returns the repaired wheel's path."""
    env = dict(os.environ)
    if not env.get("CUDA_HOME") and os.path.exists("/usr/local/cuda/bin/nvcc"):
        env["CUDA_HOME"] = "/usr/local/cuda"
    raw = tempfile.mkdtemp(prefix="prerast-raw-")
    t0 = time.time()
    run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", raw, source], env=env)
    log(f"built in {time.time() - t0:.0f} s")
    (wheel,) = glob.glob(os.path.join(raw, "prerast-*.whl"))
    repaired = repair(wheel, out_dir, python)
    shutil.rmtree(raw, ignore_errors=True)
    return repaired


def repair(wheel, out_dir, python=sys.executable, plat=None):
    repaired = _policy.repair(wheel, out_dir, python, plat, log=log)
    log(f"repaired: {os.path.basename(repaired)} ({os.path.getsize(repaired) / 1e6:.1f} MB)")
    return repaired


def make_venv(path, requirements, python=sys.executable):
    if not os.path.exists(os.path.join(path, "bin", "python")):
        run([python, "-m", "venv", path])
    run([os.path.join(path, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        + list(requirements))
    return os.path.join(path, "bin", "python")


def runtime_env(venv, home):
    """The environment of a slim runtime image: only the venv on PATH, no CUDA_HOME, compilers that fail."""
    env = {
        "PATH": os.path.join(venv, "bin"),
        "HOME": home,
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "TORCH_EXTENSIONS_DIR": os.path.join(home, "torch_extensions"),
        "CC": "/bin/false",
        "CXX": "/bin/false",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key in ("CUDA_VISIBLE_DEVICES", "PRERAST_INDEX_URL"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


SMOKE_SCRIPT = r"""
import json, shutil, sys, time
t0 = time.perf_counter()
import prerast
from prerast import _demo, _png
img, frame = _demo.render(sys.argv[2])
_png.write_png(sys.argv[1], img)
print(json.dumps({
    "import_to_first_frame_s": time.perf_counter() - t0,
    "first_frame_s": frame,
    "cpp_extension_imported": "torch.utils.cpp_extension" in sys.modules,
    "tools_on_path": [t for t in %r if shutil.which(t)],
    "nonblack_pixels": int((img.max(-1) > 0).sum()),
    "binary": prerast._loader.require()["path"],
    "version": prerast.__version__,
}))
""" % (BUILD_TOOLS,)


def smoke(venv, wheel, png, device="cpu"):
    """Install `wheel` into `venv` (which already has torch) and render a scene there, as a compiler-free
    runtime image would. Returns the JSON report; raises if anything was compiled or written."""
    venv = os.path.abspath(venv)
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--disable-pip-version-check", wheel])
    home = tempfile.mkdtemp(prefix="prerast-runtime-home-")
    env = runtime_env(venv, home)
    out = subprocess.run([python, "-c", SMOKE_SCRIPT, os.path.abspath(png), device], env=env, cwd=home,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"smoke render failed:\n{out.stdout}\n{out.stderr}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    written = [os.path.relpath(os.path.join(d, f), home) for d, _, files in os.walk(home) for f in files]
    report["files_written"] = written
    shutil.rmtree(home, ignore_errors=True)
    if report["cpp_extension_imported"] or report["tools_on_path"] or written or report["nonblack_pixels"] == 0:
        raise RuntimeError(f"smoke test failed: {json.dumps(report, indent=2)}")
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=os.path.join(ROOT, "dist"))
    v = sub.add_parser("venv")
    v.add_argument("path")
    v.add_argument("-r", "--requirement", nargs="+", default=[])
    v.add_argument("packages", nargs="*")
    s = sub.add_parser("smoke")
    s.add_argument("venv")
    s.add_argument("wheel")
    s.add_argument("--png", required=True)
    s.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    if a.cmd == "build":
        print(build_wheel(a.out))
    elif a.cmd == "venv":
        reqs = [x for r in a.requirement for x in ("-r", r)] + a.packages
        make_venv(a.path, reqs)
    elif a.cmd == "smoke":
        print(json.dumps(smoke(a.venv, a.wheel, a.png, a.device), indent=2))


if __name__ == "__main__":
    main()
