"""The matrix as cibuildwheel and GitHub Actions see it.

pyproject.toml's [tool.cibuildwheel] holds what every cell shares (image, frontend, repair, smoke test); this
module supplies what differs per cell, as environment variables that override it:

    python -m ci gh-matrix --pr          # the workflow's job list: {"include": [{"cell": "2.14.1+cu130", ...}]}
    python -m ci cibw-env --cell 2.14.1+cu130 >> "$GITHUB_ENV"
    cibuildwheel --platform linux        # builds the cell's wheel once (abi3), tests it under each of its Pythons
"""
import os
import sys

from ci import matrix, wheel


def toolkit_packages(cell, path=matrix.MATRIX_FILE):
    """NVIDIA's RHEL packages of the cell's CUDA version, e.g. cuda-nvcc-13-0."""
    if not cell.cuda:
        return []
    suffix = cell.cuda.replace(".", "-")
    return [f"{p}-{suffix}" for p in matrix.toolkit(path)["packages"]]


def environment(cell, workspace=None):
    """CIBW_* variables of one cell. CIBW_ENVIRONMENT reaches before-all, the build, the repair and the tests."""
    workspace = workspace or os.environ.get("GITHUB_WORKSPACE") or wheel.ROOT
    requirement, extra = cell.torch_requirement()
    inner = {
        "PRERAST_CELL": cell.id,
        "PRERAST_TORCH_REQUIREMENT": requirement,
        # The container reaches the host's file system at /host: the compiler cache outlives the container there.
        "CCACHE_DIR": "/host" + os.path.join(workspace, ".ccache"),
        "PIP_CONSTRAINT": "/tmp/prerast-constraints.txt",  # written by ci/manylinux_setup.sh: pins the cell's torch
    }
    if extra:
        inner["PIP_EXTRA_INDEX_URL"] = extra[1]
    if cell.cuda:
        home = f"/usr/local/cuda-{cell.cuda}"
        gcc = f"/opt/rh/gcc-toolset-{cell.host_gcc}/root/usr/bin"
        inner.update({
            "PRERAST_CUDA": cell.cuda,
            "PRERAST_HOST_GCC": str(cell.host_gcc),
            "PRERAST_TOOLKIT_PACKAGES": " ".join(toolkit_packages(cell)),
            "PRERAST_TOOLKIT_REPO": matrix.toolkit()["repo"],
            "PRERAST_CUDA_ARCH_LIST": cell.arch_list(),
            "CUDA_HOME": home,
            "CC": f"{gcc}/gcc",
            "CXX": f"{gcc}/g++",
            "PATH": f"{home}/bin:$PATH",
        })
    else:
        inner["PRERAST_FORCE_CPU"] = "1"
    return {
        "CIBW_BUILD": " ".join(cell.build_identifiers()),
        "CIBW_ENVIRONMENT": " ".join(f'{k}="{v}"' for k, v in inner.items()),
    }


def env_lines(cell, workspace=None):
    """NAME=VALUE lines for $GITHUB_ENV."""
    return "\n".join(f"{k}={v}" for k, v in environment(cell, workspace).items())


def github_matrix(cells):
    """strategy.matrix of the wheel job: one job per cell."""
    return {"include": [{"cell": c.id, "torch": c.torch, "platform": c.platform, "pythons": " ".join(c.pythons)}
                        for c in cells]}


def policy_platform(path=matrix.MATRIX_FILE):
    """The one platform tag every CI wheel carries: manylinux_2_28_x86_64 (the matrix's [policy])."""
    policy = matrix.policy(path)
    return f"{policy['manylinux']}_{policy['machine']}"


def repair_and_check(raw_wheel, dest_dir, plat=None):
    """cibuildwheel's repair step: the package's auditwheel policy, tagged exactly `plat` (the matrix's policy
    unless given), then the checks that no torch or CUDA library was grafted in and that the tag is that one."""
    plat = plat or policy_platform()
    image = os.environ.get("AUDITWHEEL_PLAT")  # what the manylinux image itself is built for
    if image and image != plat:
        raise SystemExit(f"repair: the image is {image}, but the wheels must be tagged {plat}: change the image")
    repaired = wheel.repair(raw_wheel, dest_dir, sys.executable, plat, only_plat=True)
    found = wheel.inspect(repaired)
    if found["forbidden"]:
        raise SystemExit(f"repair: torch/CUDA libraries were grafted into {repaired}: {found['forbidden']}")
    if wheel.wheel_tags(repaired)[2] != [plat]:
        raise SystemExit(f"repair: {os.path.basename(repaired)} is not tagged exactly {plat}")
    return repaired
