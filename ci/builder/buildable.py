"""Whether this machine can build a cell: natively (its nvcc, its Pythons, the torch it reaches) or by
cross-compiling (ci/builder/cross.py). Above both ci/builder/local.py (what this machine has) and cross.py, which
imports local.py's tools check: with the verdict in local.py, local, cells and cross imported each other.
"""

import platform
import sys

from ci.builder import cross, local


def verdict(cell, python_version=None):
    """(True, '') if this machine can build `cell` with Python `python_version`, else (False, the reason). A cell
    of another machine is buildable where this one cross-builds it (can_cross_build)."""
    python_version = python_version or cell.pythons[0]
    if python_version not in cell.pythons:
        return False, f"torch {cell.torch} has no wheels for Python {python_version}"
    if not local.python_executable(python_version):
        return False, f"no python{python_version} here"
    if not cell.target.runs_here():
        ok, why = can_cross_build(cell)
        if not ok:
            return False, why
        requirement, extra = cell.host_torch_requirement()
        wanted = requirement.split("=")[-1]
        if wanted not in local.torch_versions() and wanted not in local.torch_versions(extra[1]):
            return False, f"its cross build compiles with torch {wanted} (headers), from {extra[1]}: not reachable here"
        return True, ""
    elif cell.cuda:
        home, have = local.nvcc()
        if have != cell.cuda:
            return False, f"needs CUDA {cell.cuda} nvcc; this machine has " + (f"CUDA {have}" if have else "none")
    if not local.allowed(cell.torch):
        specs = ",".join(op + b for op, b in local.torch_constraints())
        return False, f"pip's constraints here cap torch ({specs})"
    requirement, extra = cell.torch_requirement()
    wanted = requirement.split("=")[-1]
    if cell.on_pypi:
        if wanted not in local.torch_versions():
            return False, f"torch {wanted} not on the indexes reachable here"
    elif wanted not in local.torch_versions() and wanted not in local.torch_versions(cell.torch_index()):
        return False, f"torch {wanted} comes from {cell.torch_index()}, not reachable here"
    return True, ""


def can_cross_build(cell):
    """(True, '') if this machine cross-builds `cell` (its target's `cross` is this machine and the cell has no
    CUDA: nvcc's cross build stops here, python -m ci cross cuda-probe says where), else (False, why)."""
    target = cell.target
    if not target.cross:
        return False, f"built on {target.runner} in the workflow only (no {target.describe()} machine here)"
    if target.cross.lower() != platform.machine().lower() or not sys.platform.startswith("linux"):
        return False, f"cross-built on Linux {target.cross} only"
    if cell.cuda:
        return False, (
            f"its CUDA library does not cross-compile here (python -m ci cross cuda-probe says why): "
            f"built on {target.runner} in the workflow"
        )
    if target.machine != cross.TARGET:
        return False, f"python -m ci cross builds for {cross.TARGET}, not {target.machine}"
    try:
        cross.check_tools()
    except cross.ToolsMissing as e:
        return False, str(e).replace("\n", " ").replace("  - ", "")
    return True, ""
