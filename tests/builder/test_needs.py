"""`python -m ci` tells a Python that lacks what a command needs which packages and the command that installs
them, before the command starts (exit status 2, no traceback): run for real in a bare virtualenv (no pip, no
torch, no wheel), and the declarations checked against the requirements files whose install they name."""

import os
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import __main__ as needs  # noqa: E402
from ci.__main__ import COMMANDS, REQUIRES  # noqa: E402


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """The python of a virtualenv with nothing installed, not even pip (the system's site-packages unseen)."""
    folder = tmp_path_factory.mktemp("bare")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(folder)
    python = os.path.join(folder, "Scripts" if os.name == "nt" else "bin", "python")
    probe = "import importlib.util as u; print([m for m in ('torch', 'wheel', 'pip', 'twine') if u.find_spec(m)])"
    assert subprocess.run([python, "-s", "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"
    return python


def run_ci(python, *args, cwd=ROOT):
    # -s: no user site-packages, which could hold what the venv lacks.
    return subprocess.run([python, "-s", "-m", "ci", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_wheel_local_without_torch_and_wheel_is_told_up_front(bare, tmp_path):
    out_dir = tmp_path / "out"
    out = run_ci(bare, "wheel-local", "--archs", "8.0", "--classic", "2.4", "--out", str(out_dir))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    first = out.stderr.splitlines()[0]
    assert first.startswith("python -m ci wheel-local: this Python") and bare in first
    for name in ("torch", "wheel", "setuptools", "pip"):
        assert name in first
    assert f"{bare} -m ensurepip --upgrade" in out.stderr
    assert f"{bare} -m pip install -r ci/requirements-build.txt" in out.stderr
    assert not out_dir.exists()  # nothing was started


def test_rehearse_names_its_tools_and_the_build_only_without_wheels(bare, tmp_path):
    given = run_ci(bare, "rehearse", "--wheels", str(tmp_path))
    assert given.returncode == 2 and "Traceback" not in given.stderr
    assert "pypiserver, twine, pyyaml," in given.stderr and "torch" not in given.stderr
    assert "-m pip install -r ci/requirements-ci.txt" in given.stderr
    assert "-m pip install -r ci/requirements-build.txt" not in given.stderr
    # Either way it names the one command that makes the virtualenv it runs from (README.md).
    assert given.stderr.rstrip().endswith(
        "-m ci wheel venv .venv/build -r ci/requirements-build.txt ci/requirements-ci.txt"
    )
    built = run_ci(bare, "rehearse")
    assert (
        built.returncode == 2
        and "torch" in built.stderr
        and "-m pip install -r ci/requirements-build.txt" in built.stderr
    )


def test_commands_that_need_nothing_run_and_help_is_never_refused(bare):
    # Can fail the other way: a check that refused every command in a bare Python.
    out = run_ci(bare, "fact", "stable-floor")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    helped = run_ci(bare, "wheel-local", "--help")
    assert helped.returncode == 0 and "usage: python -m ci wheel-local" in helped.stdout


def test_every_declared_need_is_a_command_and_installed_by_a_requirements_file():
    for key, declared in REQUIRES.items():
        command, _, sub = key.partition(" ")
        assert command in COMMANDS, key
        for need in declared:
            if need.module == "pip":
                continue
            # The message names a requirements file for it, never a bare `pip install NAME`.
            commands = needs.install_commands([need], python="py")
            assert commands and all(c.startswith("py -m pip install -r ci/requirements-") for c in commands), key


def test_needs_follow_the_platform_the_options_and_the_subcommand():
    table = {
        "repair": (needs.Need("auditwheel", platform="linux"), needs.Need("delvewheel", platform="win32")),
        "dev": (needs.Need("torch"), needs.Need("pytest", only_with="--")),
        "rehearse": (needs.Need("twine"), needs.Need("torch", unless="--wheels")),
        "wheel build": (needs.Need("wheel"),),
    }
    assert [n.module for n in needs.needs("repair", [], table, platform="win32")] == ["delvewheel"]
    assert [n.module for n in needs.needs("repair", [], table, platform="linux")] == ["auditwheel"]
    assert [n.module for n in needs.needs("dev", ["--cpu"], table)] == ["torch"]
    assert [n.module for n in needs.needs("dev", ["--cpu", "--", "-q"], table)] == ["torch", "pytest"]
    assert [n.module for n in needs.needs("rehearse", ["--wheels=dist"], table)] == ["twine"]
    assert [n.module for n in needs.needs("wheel", ["build", "--out", "d"], table)] == ["wheel"]
    both = {"cross": (needs.Need("pip"),), "cross build": (needs.Need("pip"), needs.Need("torch"))}
    assert [n.module for n in needs.needs("cross", ["build"], both)] == ["pip", "torch"]  # each once
    assert needs.needs("wheel", ["venv", "v"], table) == []
    nothing = lambda module: None  # noqa: E731  (find_spec of a Python with nothing installed)
    assert "python -m ci wheel build: " in needs.check("wheel", ["build"], table, find_spec=nothing)
    assert needs.check("wheel", ["build"], table, find_spec=lambda m: object()) is None


def test_requirement_files_are_read_with_their_includes():
    build = needs.listed(os.path.join(ROOT, "ci", "requirements-build.txt"))
    assert {"torch", "pytest", "setuptools", "wheel", "auditwheel"} <= build  # wheel etc. via -r requirements-cell
    assert "pypiserver" in needs.listed(os.path.join(ROOT, "ci", "requirements-ci.txt")) and "pypiserver" not in build
