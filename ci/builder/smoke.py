"""Smoke test of an installed wheel in the conditions of a slim runtime image, and the wrong-torch cross-check.

The runtime has no compiler, nvcc or ninja on PATH, no CUDA_HOME, CC/CXX pointing at a program that fails (and
records that it was called), the virtualenv mounted read-only where the kernel lets us (a private mount
namespace: root on Linux), and a fresh HOME and TMPDIR. The test imports prerast, renders a scene on the CPU (and
on the GPU when there is one and the wheel has CUDA code), and fails if a compiler was called, if
torch.utils.cpp_extension was imported, or if any file appeared in the venv, HOME or TMPDIR.
Standard library only: it also runs inside cibuildwheel's test environment.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

# Programs a runtime image does not have; the smoke test checks none of them is reachable.
BUILD_TOOLS = ["cc", "gcc", "g++", "c++", "clang", "cl", "nvcc", "ninja", "make", "ld"]

# Stands in for every compiler: records the call, then fails like a missing compiler would.
RECORDER = """#!/bin/sh
echo "$0 $*" >> "{marker}"
echo "prerast smoke test: a compiler was started in a runtime environment: $0 $*" >&2
exit 1
"""


def _windows():
    return os.name == "nt"


def venv_bin(venv):
    """The venv's folder of programs: bin/ on Linux and macOS, Scripts\\ on Windows."""
    return os.path.join(venv, "Scripts" if _windows() else "bin")


def venv_python(venv):
    return os.path.join(venv_bin(venv), "python.exe" if _windows() else "python")


def runtime_env(venv, home, compiler="/bin/false"):
    """The environment of a slim runtime image: only the venv on PATH, no CUDA_HOME, compilers that fail.
    On Windows also the system folder (SystemRoot: Python and the DLL loader need it) and the home, temporary and
    cache folders under their Windows names, all in `home`."""
    env = {
        "PATH": venv_bin(venv),
        "HOME": home,
        "TMPDIR": os.path.join(home, "tmp"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "TORCH_EXTENSIONS_DIR": os.path.join(home, "torch_extensions"),
        "CC": compiler,
        "CXX": compiler,
        "CUDAHOSTCXX": compiler,
        "PYTORCH_NVCC": compiler,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if _windows():
        system_root = os.environ.get("SystemRoot", r"C:\Windows")
        env.update(
            {
                "SystemRoot": system_root,
                "USERPROFILE": home,
                "TEMP": env["TMPDIR"],
                "TMP": env["TMPDIR"],
                "LOCALAPPDATA": os.path.join(home, "AppData", "Local"),
                "PATH": env["PATH"] + os.pathsep + os.path.join(system_root, "System32"),
            }
        )
    os.makedirs(env["TMPDIR"], exist_ok=True)
    for key in ("CUDA_VISIBLE_DEVICES", "PRERAST_INDEX_URL"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


SMOKE_SCRIPT = r"""
import json, shutil, sys, sysconfig, time
t0 = time.perf_counter()
import os
import torch
import prerast
import prerast_meta
from prerast import _demo, _png
# Both halves of the package come from the wheel (run from a checkout, its prerast_meta could stand in).
assert os.path.dirname(os.path.dirname(prerast_meta.__file__)) == os.path.dirname(os.path.dirname(prerast.__file__)), \
    (prerast.__file__, prerast_meta.__file__)
img, frame = _demo.render("cpu")
_png.write_png(sys.argv[1], img)
info = prerast._loader.require()
gpu = None
if sys.argv[2] in ("cuda", "auto") and torch.cuda.is_available() and info.get("cuda_version"):
    gimg, _ = _demo.render("cuda")
    gpu = {"name": torch.cuda.get_device_name(0), "same_as_cpu": bool((gimg == img).all()),
           "nonblack_pixels": int((gimg.max(-1) > 0).sum())}
elif sys.argv[2] == "cuda":
    raise SystemExit("--device cuda: no CUDA GPU here, or the wheel is CPU-only")
print(json.dumps({
    "import_to_first_frame_s": time.perf_counter() - t0,
    "first_frame_s": frame,
    "cpp_extension_imported": "torch.utils.cpp_extension" in sys.modules,
    "tools_on_path": [t for t in %r if shutil.which(t)],
    "nonblack_pixels": int((img.max(-1) > 0).sum()),
    "gpu": gpu,
    "binary": info["path"],
    "version": prerast.__version__,
    "torch": torch.__version__,
    "python": "%%d.%%d" %% sys.version_info[:2],
    # A free-threaded interpreter turns the GIL back on for an extension module that does not declare it safe
    # without one: prerast has none (py3-none), so after import and render it must still be off.
    "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
}))
""" % (BUILD_TOOLS,)


def _snapshot(root):
    """{path: (size, mtime)} of every file under root."""
    found = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            found[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return found


def _read_only_wrapper(venv):
    """A command prefix that runs the rest with `venv` mounted read-only, or [] where that is not possible
    (not root, no unshare, or a container that forbids mount namespaces)."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    if (
        not hasattr(os, "geteuid")
        or os.geteuid() != 0
        or not os.path.exists(unshare)
        or not os.path.exists("/bin/mount")
    ):
        return []
    # Absolute paths: the PATH of the command that follows is the runtime's, with no /bin in it.
    script = '/bin/mount --bind "$0" "$0" && /bin/mount -o remount,bind,ro "$0" && exec "$@"'
    wrapper = [unshare, "-m", "--propagation", "private", "/bin/sh", "-c", script, venv]
    if subprocess.run(wrapper + ["/bin/true"], capture_output=True).returncode != 0:
        return []
    return wrapper


def install(venv, wheel):
    python = venv_python(venv)
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--disable-pip-version-check", wheel],
        check=True,
    )


def smoke(venv, wheel, png, device="auto"):
    """Install `wheel` into `venv` (which already has torch; wheel=None: it is installed already) and render a
    scene there, as a compiler-free runtime image would. Returns the JSON report; raises if anything was compiled
    or written. device: cpu, cuda (must run on a GPU), or auto (GPU too where there is one)."""
    venv = os.path.abspath(venv)  # the render runs with another working directory
    if wheel:
        install(venv, wheel)
    python = venv_python(venv)
    work = tempfile.mkdtemp(prefix="prerast-smoke-")
    home, guard = os.path.join(work, "home"), os.path.join(work, "guard")
    os.makedirs(home)
    os.makedirs(guard)
    marker, compiler = os.path.join(guard, "compiler-calls"), os.path.join(guard, "fail-compiler")
    with open(compiler, "w") as f:
        f.write(RECORDER.format(marker=marker))
    os.chmod(compiler, 0o755)
    env = runtime_env(venv, home, compiler)
    wrapper = _read_only_wrapper(venv)
    before = _snapshot(venv)
    png = os.path.abspath(png)
    out = subprocess.run(
        wrapper + [python, "-c", SMOKE_SCRIPT, png, device], env=env, cwd=home, capture_output=True, text=True
    )
    changed = sorted(p for p, st in _snapshot(venv).items() if before.get(p) != st)
    written = sorted(_snapshot(home))
    calls = open(marker).read().splitlines() if os.path.exists(marker) else []
    shutil.rmtree(work, ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"smoke render failed:\n{out.stdout}\n{out.stderr}\ncompiler calls: {calls}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report.update(files_written=written, venv_files_changed=changed, compiler_calls=calls, venv_read_only=bool(wrapper))
    bad = (
        report["cpp_extension_imported"]
        or report["tools_on_path"]
        or written
        or changed
        or calls
        or report["nonblack_pixels"] == 0
        or (report["gpu"] and not report["gpu"]["same_as_cpu"])
        or (report["free_threaded"] and report["gil_enabled"])
    )
    if bad:
        raise RuntimeError(f"smoke test failed: {json.dumps(report, indent=2)}")
    return report


CROSS_RENDER = """
import torch, prerast, prerast_meta.compat
pos = torch.tensor([[[-0.8, -0.8, 0.0, 1.0], [0.8, -0.8, 0.0, 1.0], [0.0, 0.8, 0.0, 1.0]]])
rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos, torch.tensor([[0, 1, 2]], dtype=torch.int32), (64, 64))
assert int((rast[..., 3] > 0).sum()) > 0
print("loaded (" + prerast_meta.compat.describe(prerast._loader.require()) + ") and rendered on the CPU")
"""


def cross_check(venv, wheel, expect_load=False):
    """Install `wheel` next to the torch of `venv` (a different one) and import it. A wheel that does not serve that
    torch must fail with the loader's BinaryMismatchError naming both torch releases and the pip command that
    fixes it; one that serves it (expect_load: a stable wheel, or a classic one of the same minor) must import
    and render on the CPU. Returns (ok, message)."""
    install(venv, wheel)
    python = venv_python(venv)
    home = tempfile.mkdtemp(prefix="prerast-cross-")
    probe = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        env=runtime_env(venv, home),
    )
    running = probe.stdout.strip()
    code = "import prerast" if not expect_load else CROSS_RENDER
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=runtime_env(venv, home), cwd=home)
    shutil.rmtree(home, ignore_errors=True)
    if expect_load:
        return out.returncode == 0, (out.stdout.strip() or out.stderr.strip().splitlines()[-1:] or ["?"])[-1]
    message = out.stderr.strip().splitlines()
    text = "\n".join(message[-8:])
    ok = (
        out.returncode == 1
        and "BinaryMismatchError" in out.stderr
        and running in out.stderr
        and "built for: prerast" in out.stderr
        and "pip install" in out.stderr
    )
    return ok, text


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m ci smoke", description="Smoke-test an installed or given prerast wheel with no compiler."
    )
    p.add_argument("--venv", default=sys.prefix, help="virtualenv with torch (default: this interpreter's)")
    p.add_argument("--wheel", help="install this wheel first (default: test what is installed)")
    p.add_argument("--png", default=os.path.join(tempfile.gettempdir(), "prerast-smoke.png"))
    p.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"])
    a = p.parse_args(argv)
    print(json.dumps(smoke(a.venv, a.wheel, a.png, a.device), indent=2))


if __name__ == "__main__":
    main()
