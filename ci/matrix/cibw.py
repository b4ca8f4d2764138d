"""The parts of the matrix as cibuildwheel and GitHub Actions see them.

pyproject.toml's [tool.cibuildwheel] holds what every part shares (frontend, before-all per OS, repair); this module
supplies what differs per part and target, as environment variables that override it:

    python -m ci gh-matrix --pr                  # the wheel jobs: {"include": [{"part": "kernels-cu12",
                                                 #   "target": "linux-x86_64", "runner": "ubuntu-24.04", ...}]}
    python -m ci gh-matrix --pr --jobs targets   # the merge and smoke jobs: one row per target
    python -m ci cibw-env --part kernels-cu12 >> "$GITHUB_ENV"
    cibuildwheel --platform linux                # (the row's os) builds the part's wheel once (py3-none) and
                                                 # tests it under the oldest, newest and free-threaded Python

A part (ci/matrix/parts.py) is built alone: PRERAST_PARTS=kernels (no torch installed; a CUDA kernels part gets its
toolkit, CUDA_HOME and arch list) or PRERAST_PARTS=binding with PRERAST_ABI (its torch pinned; no nvcc). The wheel
is py3-none, so cibuildwheel builds it with the first of the part's identifiers and, finding it compatible, reuses
it for the others (no second build). A part cannot run by itself (a binding calls its kernels, kernels need a
binding to be called): its test under each Python is python -m ci part-check (installed without dependencies: pip
takes it, the files are whole), and the workflow smoke-tests each target's merged wheel.

Per OS: Linux builds in the target's manylinux image, a CUDA kernels part with the toolkit from NVIDIA's RHEL 8
repository and gcc-toolset; Windows on the runner with MSVC (the build started in its developer environment:
python -m ci msvc-env --run) and, for a part with `cuda`, the toolkit that `python -m ci toolkit-redist --part` unpacked into
redist_toolkit_dir; macOS on the runner, CPU only.
"""

import argparse
import json
import os
import re
import sys

from ci import matrix
from ci.matrix import parts as _parts
from prerast_meta import sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toolkit_packages(part, path=matrix.MATRIX_FILE):
    """NVIDIA's RHEL packages of the part's toolkit, e.g. cuda-nvcc-12-8 (none for a part without nvcc)."""
    if not part.nvcc:
        return []
    suffix = part.toolkit.replace(".", "-")
    return [f"{p}-{suffix}" for p in matrix.toolkit(path)["packages"]]


# torch's cpp_extension puts a ccache found on PATH in front of the host compiler from 2.13 on (ci/builder/cells.py
# reads it from the source: wraps_compiler); a binding built with older torch compiles uncached (CXX names
# gcc-toolset's g++ itself: a ccache in front of it would fail torch's compiler check). The kernel libraries put
# ccache in front of gcc and nvcc themselves (prerast_meta/kernel_build.py).
WRAPS_COMPILER_FROM = (2, 13)


def uses_ccache(part):
    """Does the part's build go through ccache in the manylinux image? (Linux only: the container reaches the
    runner's cache folder at /host; Windows and macOS builds compile uncached.)"""
    if part.target.os != "linux":
        return False
    return part.kind == "kernels" or matrix._vkey(part.cell.torch)[:2] >= WRAPS_COMPILER_FROM


def _host_path(workspace, *parts):
    """A path under the workspace as the build on the runner itself sees it (Windows, macOS), with forward
    slashes: CIBW_ENVIRONMENT is parsed like a shell line, where a backslash escapes."""
    return os.path.join(workspace, *parts).replace("\\", "/")


def host_state_dir(workspace=None):
    """Where a Windows or macOS wheel job keeps what its build needs outside the checkout's sources: the torch
    constraint file and the CUDA toolkit unpacked from NVIDIA's archives (.cibw/, ignored by git)."""
    return _host_path(workspace or os.environ.get("GITHUB_WORKSPACE") or ROOT, ".cibw")


def redist_toolkit_dir(part, workspace=None):
    """CUDA_HOME of a Windows part with `cuda`: where `python -m ci toolkit-redist --part` unpacks its toolkit."""
    return f"{host_state_dir(workspace)}/cuda-{part.cuda}"


def deployment_target(target):
    """MACOSX_DEPLOYMENT_TARGET of a macOS target, from its platform tag: macosx_11_0_arm64 -> '11.0'."""
    m = re.fullmatch(r"macosx_(\d+)_(\d+)_\w+", target.plat)
    if not m:
        raise matrix.MatrixError(f"[target.{target.name}]: {target.plat} is not a macosx_<major>_<minor>_<machine> tag")
    return f"{m.group(1)}.{m.group(2)}"


def _linux_environment(part, workspace, inner):
    if uses_ccache(part):
        inner.update(
            {
                # The container reaches the host's file system at /host: the compiler cache outlives the container.
                "CCACHE_DIR": "/host" + os.path.join(workspace, ".ccache"),
                # The workflow saves this cache once per part and source state: capped, so no entry grows unbounded.
                "CCACHE_MAXSIZE": "500M",
            }
        )
    if part.nvcc:
        home = f"/usr/local/cuda-{part.toolkit}"
        gcc = f"/opt/rh/gcc-toolset-{part.host_gcc}/root/usr/bin"
        inner.update(
            {
                "PRERAST_HOST_GCC": str(part.host_gcc),
                "PRERAST_TOOLKIT_PACKAGES": " ".join(toolkit_packages(part)),
                "PRERAST_TOOLKIT_REPO": part.target.toolkit,
                "CUDA_HOME": home,
                "CC": f"{gcc}/gcc",
                "CXX": f"{gcc}/g++",
                "PATH": f"{home}/bin:$PATH",
            }
        )


def _windows_environment(part, workspace, inner):
    # MSVC comes from the developer environment the build starts in (python -m ci msvc-env --run): cl.exe, which
    # nvcc needs as its host compiler, and link.exe first on PATH. DISTUTILS_USE_SDK tells setuptools (and torch's
    # build_ext) to use that environment rather than look for a Visual Studio of its own.
    inner["DISTUTILS_USE_SDK"] = "1"
    if part.cuda:
        # NVIDIA's redistributable archives, unpacked by the workflow before cibuildwheel starts.
        inner["CUDA_HOME"] = redist_toolkit_dir(part, workspace)


def _macos_environment(part, workspace, inner):
    inner["MACOSX_DEPLOYMENT_TARGET"] = deployment_target(part.target)


def constraints_file(part, workspace=None):
    """The pip constraint file that pins the part's torch (written by before-all): in the manylinux container's
    /tmp on Linux, under the workspace's .cibw/ on Windows and macOS (the build runs on the runner itself)."""
    if part.target.os == "linux":
        return "/tmp/prerast-constraints.txt"
    return f"{host_state_dir(workspace)}/constraints.txt"


# The free-threaded CPython a part is also tested under: the one PyPI's torch ships for every release from 2.9 on,
# and that cibuildwheel provides for every target (manylinux x86-64 and aarch64, win_amd64, macosx_arm64).
FREE_THREADED_PYTHON = "3.14t"


def test_pythons(part):
    """The Pythons cibuildwheel tests a part under: the one it is built with (the oldest its torch ships for, else
    the floor), the newest its torch ships for (for a part without torch: any cell of its target), and the
    free-threaded one."""
    cells = [part.cell] if part.cell else [c for c in matrix.load() if c.target == part.target]
    newest = max((p for c in cells for p in c.pythons), key=matrix._vkey, default=part.python)
    return list(dict.fromkeys([part.python, newest, FREE_THREADED_PYTHON]))


# before-build of a part without torch: pyproject.toml's, less the torch that its line adds.
BEFORE_BUILD_NO_TORCH = "python -m pip install -r {project}/ci/requirements-cell.txt"


def environment(part, workspace=None):
    """CIBW_* variables of one part. CIBW_ENVIRONMENT reaches before-all, the build and the repair."""
    workspace = workspace or os.environ.get("GITHUB_WORKSPACE") or ROOT
    target = part.target
    inner = {"PRERAST_PART": part.id, "PRERAST_PARTS": part.kind}
    # The commit's date for every date the build and the repair write (wheel's and auditwheel's zip members,
    # _build_info.json's built_at): a part built again from the same commit has the same bytes.
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or sources.commit_epoch(ROOT)
    if epoch:
        inner["SOURCE_DATE_EPOCH"] = epoch
    if part.kind == "binding":
        inner["PRERAST_ABI"] = part.abi
    if part.cell:
        requirement, extra = part.cell.torch_requirement()
        inner["PRERAST_TORCH_REQUIREMENT"] = requirement
        # Written by before-all (ci/manylinux_setup.sh, python -m ci pin-torch): pins the part's torch.
        inner["PIP_CONSTRAINT"] = constraints_file(part, workspace)
        if extra:
            inner["PIP_EXTRA_INDEX_URL"] = extra[1]
    if part.nvcc:
        inner.update({"PRERAST_CUDA": part.toolkit, "PRERAST_CUDA_ARCH_LIST": part.arch_list()})
    elif part.kind == "kernels":
        inner["PRERAST_FORCE_CPU"] = "1"
    {"linux": _linux_environment, "windows": _windows_environment, "macos": _macos_environment}[target.os](
        part, workspace, inner
    )
    env = {"CIBW_BUILD": " ".join(target.identifier(p) for p in test_pythons(part)), "CIBW_ARCHS": target.machine}
    if target.os == "linux":
        env[f"CIBW_MANYLINUX_{target.machine.upper()}_IMAGE"] = target.image
    env["CIBW_ENVIRONMENT"] = " ".join(f'{k}="{v}"' for k, v in inner.items())
    if not part.cell:
        env["CIBW_BEFORE_BUILD"] = BEFORE_BUILD_NO_TORCH
    # A part does not run alone (the workflow's smoke job renders with the target's merged wheel): under each
    # Python, its wheel alone, without torch, whole and py3-none.
    env["CIBW_TEST_COMMAND"] = "python {project}/ci/cli.py part-check"
    env["CIBW_TEST_ENVIRONMENT"] = 'PIP_NO_DEPS="1"'
    return env


def pin_torch_main(argv=None, environ=None):
    """`python -m ci pin-torch`: cibuildwheel's before-all on Windows and macOS (ci/manylinux_setup.sh does the
    same in the manylinux image): $PRERAST_TORCH_REQUIREMENT into the file $PIP_CONSTRAINT names, so that every
    pip call that follows installs the part's torch; nothing for a part without torch."""
    environ = os.environ if environ is None else environ
    if not environ.get("PRERAST_PART"):
        print(
            "pin-torch: PRERAST_PART not set: run through cibuildwheel with the environment of "
            "python -m ci cibw-env --part PART",
            file=sys.stderr,
        )
        return 2
    if not environ.get("PRERAST_TORCH_REQUIREMENT"):
        print(f"prerast: part {environ['PRERAST_PART']}, no torch (its build needs none)")
        return 0
    if not environ.get("PIP_CONSTRAINT"):
        print("pin-torch: PRERAST_TORCH_REQUIREMENT is set but PIP_CONSTRAINT is not", file=sys.stderr)
        return 2
    path = environ["PIP_CONSTRAINT"]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(environ["PRERAST_TORCH_REQUIREMENT"] + "\n")
    print(f"prerast: part {environ['PRERAST_PART']}, {environ['PRERAST_TORCH_REQUIREMENT']} (pinned in {path})")
    return 0


def env_lines(part, workspace=None):
    """NAME=VALUE lines for $GITHUB_ENV."""
    return "\n".join(f"{k}={v}" for k, v in environment(part, workspace).items())


# Minutes per step of a wheel job on a GitHub-hosted ubuntu-24.04 runner, from builds on 2 cores: a cold
# one-arch CUDA build takes about 1 min, 7-8 archs + PTX about 3 min; the CPU library's cold compile 1:14 on idle
# cores and 2:59 on shared ones. A binding compiles its sources once per library (a CUDA torch: a CPU and a CUDA
# part) with the host compiler. A CUDA torch with its nvidia-* wheels is 3.5-4 GB to fetch and ~7 GB to unpack:
# 2-3 min on a runner, the largest step of a binding job; a kernels job downloads no torch.
MINUTES = {
    "setup": 5,  # runner, checkout, disk clean-up, manylinux image pull, build tools
    "toolkit": 5,  # dnf: nvcc, cudart, cccl, nvrtc + gcc-toolset (CUDA kernels)
    "build_cpu": 3,  # the CPU kernels, or one library of a binding
    "build_per_arch": 0.5,  # plus 1 for the host code and linking
    "torch_cpu": 1,  # download + install of the part's torch
    "torch_cuda": 3,
}
# Windows and macOS jobs, estimates: no image to pull, but MSVC's prompt and a slower file system on
# windows-2022; the toolkit is a few zip archives from NVIDIA's redist (nvcc's is the largest, ~100 MB) rather than
# dnf; nvcc with cl.exe compiles about half as fast again as with gcc. macos-15 (3 Apple M1 cores) builds the CPU
# library about as fast as a Linux runner does.
OS_MINUTES = {
    "windows": {"setup": 4, "toolkit": 3, "build_factor": 1.5},
    "macos": {"setup": 3, "toolkit": 0, "build_factor": 1.0},
}


def expected_minutes(part):
    """What one part's wheel job should take: set-up, its toolkit and torch (where it has them), the compile."""
    m = dict(MINUTES, build_factor=1.0)
    m.update(OS_MINUTES.get(part.target.os, {}))
    minutes = m["setup"] + (m["toolkit"] if part.cuda else 0)
    if part.cell:
        minutes += m["torch_cuda"] if part.cell.cuda and not part.torch_for_repair else m["torch_cpu"]
    if part.nvcc:
        return minutes + m["build_factor"] * (1 + m["build_per_arch"] * len(part.archs))
    libraries = 2 if part.kind == "binding" and part.cell.cuda else 1
    return minutes + m["build_factor"] * m["build_cpu"] * libraries


def runner_minutes(parts):
    """Runner minutes of the wheel jobs of one run over `parts`."""
    return sum(expected_minutes(p) for p in parts)


def timeout_minutes(part):
    """The job's timeout: twice the expected time (a slow mirror, a cold cache), in steps of 5 minutes."""
    return int(-(-2 * expected_minutes(part) // 5) * 5)


def artifact_name(part):
    """The wheel job's artifact: part-<target>-<part>, so that a target's merge downloads part-<target>-*."""
    return f"part-{part.target.name}-{part.name}"


def github_matrix(selected):
    """strategy.matrix of the wheel job: one job per part, with its target (runner, cibuildwheel --platform),
    timeout and artifact. `cuda` is '' for a part without a toolkit: the steps that install one on the runner
    test it."""
    return {
        "include": [
            {
                "part": p.id,
                "kind": p.kind,
                "target": p.target.name,
                "os": p.target.os,
                "runner": p.target.runner,
                "cuda": p.cuda,
                "ccache": uses_ccache(p),
                "timeout": timeout_minutes(p),
                "artifact": artifact_name(p),
            }
            for p in selected
        ]
    }


def smoke_torch(target_parts):
    """The torch the smoke job installs next to a target's merged wheel: PyPI's build of the release its stable
    binding was built with (a CUDA 13 one on Linux, the CPU one on Windows and macOS), as `pip install torch` there
    gets it; the newest classic binding's where a run builds no stable one."""
    bindings = [p for p in target_parts if p.kind == "binding"]
    chosen = next((b for b in bindings if b.abi == "stable"), bindings[-1] if bindings else None)
    if chosen is None:
        raise matrix.MatrixError(f"{target_parts[0].target.name}: a merged wheel needs a binding part")
    return f"torch==={chosen.cell.torch}"


def smoke_free_threaded(target):
    """The free-threaded Python the smoke job also renders the target's one wheel under ('' for none): Linux
    x86-64's, where GitHub's runner and PyPI's torch both have it (setup-python takes '3.14t')."""
    return FREE_THREADED_PYTHON if (target.os, target.machine) == ("linux", "x86_64") else ""


def target_matrix(selected):
    """strategy.matrix of the merge and smoke jobs: one row per target of the selected parts."""
    return {
        "include": [
            {
                "target": name,
                "os": group[0].target.os,
                "runner": group[0].target.runner,
                "parts": " ".join(p.id for p in group),
                "smoke_torch": smoke_torch(group),
                "free_threaded": smoke_free_threaded(group[0].target),
            }
            for name, group in _parts.by_target(selected).items()
        ]
    }


def env_main(argv=None):
    e = argparse.ArgumentParser(
        prog="python -m ci cibw-env", description="The cibuildwheel environment of one part, as NAME=VALUE lines."
    )
    e.add_argument("--part", required=True, help="a part of python -m ci matrix, e.g. kernels-cu12")
    a = e.parse_args(argv)
    print(env_lines(_parts.find(a.part)))
    return 0


def gh_matrix_main(argv=None):
    g = argparse.ArgumentParser(prog="python -m ci gh-matrix", description="The CI workflow's job matrix, as JSON.")
    g.add_argument("--published", action="store_true")
    g.add_argument("--pr", action="store_true")
    g.add_argument(
        "--jobs",
        choices=["parts", "targets"],
        default="parts",
        help="the wheel jobs (one per part, default) or the merge and smoke jobs (one per target)",
    )
    a = g.parse_args(argv)
    selected = _parts.select(_parts.load(), published=a.published, pr=a.pr)
    # A job on a retired runner label is never picked up: say so here rather than leave the run queued for days.
    problems = matrix.retired_runners(matrix.runners_in_use())
    if problems:
        print("gh-matrix: " + "\n".join(problems), file=sys.stderr)
        return 1
    rows = github_matrix(selected) if a.jobs == "parts" else target_matrix(selected)
    print(json.dumps(rows, separators=(",", ":")))
    return 0
