"""The dev loop: prerast's plugin built in place into package/prerast, recompiling only what changed, and pytest
run against that package. Standard library only; run it with the Python whose torch you build for (the build
virtualenv, which brings ninja and ccache: ci/requirements-build.txt).

    python -m ci dev --cpu                   # the CPU library only: no nvcc, under a minute when no CUDA changed
    python -m ci dev                         # the CPU and CUDA libraries, for this machine's GPU
    python -m ci dev --arch "8.0;9.0"        # ... for these GPU archs
    python -m ci dev --cpu -- tests/core/ops -x   # build, then pytest with these arguments against package/

The build is `setup.py build_ext --inplace --force` with its own build folder per variant (build/dev-cpu,
build/dev-cuda): --force only makes setuptools hand every extension to ninja, which recompiles the objects whose
source, included headers or command line changed (setuptools alone compares the .cpp files, never the headers),
and the library is relinked. The CUDA variant compiles for --arch, else PRERAST_CUDA_ARCH_LIST,
else the visible GPU's arch, else (no GPU) every arch setup.py defaults to: a change of archs recompiles every
CUDA object, and all of them take minutes per arch on few cores. ccache, where the interpreter's bin folder (or PATH) has it, serves objects another
folder's build already made (torch >= 2.13 puts it in front of the compilers itself). The library and its
_build_info.json land next to the Python files, where the loader looks; .gitignore ignores both, and neither a
wheel (setup.py's build_py ships no file that is not a package source) nor the shipped sources
(prerast_meta/sources.py) take them. pytest runs with PYTHONPATH=package:., so `import prerast` is this
checkout's package (and prerast_meta its own) even where a prerast wheel is installed.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # run as `python ci/builder/dev.py`: make the ci package importable
    sys.path.insert(0, ROOT)

from ci.builder.progress import clock, echo_compiler, log  # noqa: E402
from prerast_meta import build_env, build_wheel  # noqa: E402

PACKAGE = os.path.join("package", "prerast")
OBJECT_SUFFIXES = (".o",)


class ToolMissing(RuntimeError):
    """A program the in-place build needs is not there; the message says how to get it."""

    exit_code = 3


def build_dir(root, cpu):
    return os.path.join(root, "build", "dev-cpu" if cpu else "dev-cuda")


def objects(folder):
    """{object path relative to folder: mtime} of a build folder."""
    found = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.endswith(OBJECT_SUFFIXES):
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, folder)] = os.stat(path).st_mtime_ns
    return found


def recompiled(before, after):
    """The objects that are new or were rewritten between two `objects` snapshots, sorted."""
    return sorted(rel for rel, mtime in after.items() if before.get(rel) != mtime)


def build_spec(root, cpu, python=sys.executable, arch=None):
    """The in-place build of the one build route (prerast_meta/build_wheel.py): its environment puts the
    interpreter's bin folder first on PATH (its ninja and ccache) and tells ccache that paths under the checkout
    are relative (a copy of the checkout hits the same cache entries)."""
    archs = tuple(build_env.parse_arch_list(arch)) if arch and not cpu else ()
    temp = build_dir(root, cpu)
    return build_wheel.BuildSpec(
        source=root,
        out_dir=os.path.join(root, PACKAGE),
        python=python,
        kind="in-place",
        cuda_home=None if cpu else build_env.find_cuda_home(),
        archs=archs,
        build_temp=temp,
        log_path=temp + ".log",
    )


def check_tools(env):
    if not shutil.which("ninja", path=env["PATH"]):
        raise ToolMissing(
            "ninja is not on PATH nor next to this Python: without it every build recompiles "
            "everything. Install the build tools into this environment:\n"
            "    python -m pip install -r ci/requirements-build.txt"
        )


def visible_gpu_arch(python):
    """The first visible GPU's arch as "9.0", or None (no GPU, or a torch without CUDA)."""
    code = "import torch; print('%d.%d' % torch.cuda.get_device_capability() if torch.cuda.is_available() else '')"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def echo_compiler_line(line):
    """ninja's [n/m] lines and errors, as the other builds of ci/ echo them."""
    return line.strip()[:150] if echo_compiler(line) else None


def build(root=ROOT, cpu=False, python=sys.executable, arch=None):
    """Build the plugin in place under root; returns {"seconds", "recompiled": [object paths], "ccache"}."""
    if not cpu:
        arch = arch or os.environ.get("PRERAST_CUDA_ARCH_LIST") or visible_gpu_arch(python)
    spec = build_spec(root, cpu, python, arch)
    env = build_wheel.environment(spec)
    check_tools(env)
    temp = spec.build_temp
    package = spec.out_dir
    if cpu:  # a CUDA library of an earlier full build would sit there unlisted by the new _build_info.json
        for stale in glob.glob(os.path.join(package, "_C_cuda*.so")):
            os.remove(stale)
    os.makedirs(temp, exist_ok=True)
    open(spec.log_path, "w").close()  # the log of this build only
    before = objects(temp)
    ccache = shutil.which("ccache", path=env["PATH"])
    what = "CPU library only" if cpu else "CPU and CUDA libraries, GPU archs " + (arch or "setup.py's default")
    log(f"building in place ({what}) into {package}; objects in {temp}; ccache: {ccache or 'none found'}")
    took = build_wheel.run_build(
        spec, log=lambda text: log("  " + text), show=echo_compiler_line, label="in-place build"
    )
    changed = recompiled(before, objects(temp))
    log(
        f"built in {clock(took)}: {len(changed)} object(s) recompiled"
        + (": " + ", ".join(changed) if changed else " (nothing had changed)")
    )
    return {"seconds": took, "recompiled": changed, "ccache": ccache}


def pytest_env(root, base=None):
    """The environment of a process that imports the checkout's packages: prerast from package/, prerast_meta
    from the root, ahead of any installed wheel's."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(root, "package"), root, env.get("PYTHONPATH")]))
    return env


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci dev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cpu", action="store_true", help="build the CPU library only (as PRERAST_FORCE_CPU=1)")
    p.add_argument(
        "--arch",
        help="GPU archs of the CUDA library, e.g. '8.0;9.0' (default: PRERAST_CUDA_ARCH_LIST, else the visible GPU's)",
    )
    p.add_argument(
        "pytest_args",
        nargs="*",
        metavar="-- PYTEST_ARGS",
        help="after --: run pytest with these arguments against the in-place package",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    cpu = args.cpu or os.environ.get("PRERAST_FORCE_CPU") == "1"
    if cpu and args.arch:
        p.error("--arch is for the CUDA library: drop --cpu, or drop --arch")
    try:
        build(ROOT, cpu, arch=args.arch)
    except ToolMissing as e:
        print(f"prerast: {e}", file=sys.stderr)
        return ToolMissing.exit_code
    except (build_wheel.BuildFailed, ValueError) as e:
        print(f"prerast: {e}", file=sys.stderr)
        return 1
    if not args.pytest_args:
        return 0
    cmd = [sys.executable, "-m", "pytest", *args.pytest_args]
    log("$ PYTHONPATH=package python " + " ".join(cmd[1:]))
    t0 = time.time()
    rc = subprocess.run(cmd, cwd=ROOT, env=pytest_env(ROOT)).returncode
    log(f"pytest exited {rc} after {clock(time.time() - t0)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
