"""`python -m ci repair` on each OS's wheels: the tool is the wheel's target's (auditwheel, delvewheel, delocate),
run with that tool's exclude list, and the checks after it (nothing of torch or CUDA grafted, exactly the
target's tag) hold on every OS. The repair tools themselves are stood in for by a fake that does what each does
to the file (copies it, grafts what it is told to, retags where told to); tests/builder/test_repair_real.py runs the
real delocate and delvewheel.
Also the host-side pieces of the Windows and macOS jobs: the torch pin (python -m ci pin-torch) and the smoke
test's runtime environment on Windows."""

import json
import os
import shutil
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import smoke  # noqa: E402
from ci.matrix import cibw
from ci.repair import check
from prerast_meta import repair  # noqa: E402


def raw_wheel(folder, plat, library):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"prerast-0.2.0-py3-none-{plat}.whl")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/_build_info.json", json.dumps({"abi": "stable"}))
        z.writestr(f"prerast/{library}", b"binary")
        z.writestr("prerast-0.2.0.dist-info/RECORD", "")
    return path


@pytest.fixture
def fake_tool(monkeypatch):
    """Stands in for the repair tools: records the command, writes the repaired wheel into -w's folder under
    the name the tool would give it (fake_tool.retag), with fake_tool.graft added."""
    state = {"calls": [], "graft": None, "retag": None}

    def run(cmd, check=False, env=None):
        state["calls"].append(cmd)
        out = cmd[cmd.index("-w") + 1]
        raw = next(w for w in cmd if w.endswith(".whl"))
        name = os.path.basename(raw)
        if "auditwheel" in cmd:  # tagged what --plat says
            name = name[: -len(".whl")].rsplit("-", 1)[0] + "-" + cmd[cmd.index("--plat") + 1] + ".whl"
        if state["retag"]:
            name = name[: -len(".whl")].rsplit("-", 1)[0] + "-" + state["retag"] + ".whl"
        dest = os.path.join(out, name)
        shutil.copy(raw, dest)
        if state["graft"]:
            with zipfile.ZipFile(dest, "a") as z:
                z.writestr(state["graft"], b"grafted")

    monkeypatch.setattr(repair.subprocess, "run", run)
    monkeypatch.delenv("AUDITWHEEL_PLAT", raising=False)
    return state


def test_windows_wheels_go_through_delvewheel(tmp_path, fake_tool):
    raw = raw_wheel(str(tmp_path / "raw"), "win_amd64", "_C.pyd")
    repaired = check.repair_and_check(raw, str(tmp_path / "out"))
    assert os.path.basename(repaired) == "prerast-0.2.0-py3-none-win_amd64.whl"
    (cmd,) = fake_tool["calls"]
    assert cmd[1:4] == ["-m", "delvewheel", "repair"]
    assert cmd[cmd.index("--exclude") + 1].split(os.pathsep) == repair.DELVEWHEEL_EXCLUDES
    # delvewheel's name mangling (c10-<hash>.dll) does not hide a grafted torch library.
    fake_tool["graft"] = "prerast.libs/c10-0123456789abcdef0123456789abcdef.dll"
    with pytest.raises(SystemExit, match="torch/CUDA libraries were grafted.*c10-"):
        check.repair_and_check(raw, str(tmp_path / "out"))
    # What is not torch's may be grafted (a runtime the plugin itself links).
    fake_tool["graft"] = "prerast.libs/msvcp140-0123456789abcdef0123456789abcdef.dll"
    assert check.repair_and_check(raw, str(tmp_path / "out")).endswith("win_amd64.whl")


def test_macos_wheels_go_through_delocate_for_arm64_and_keep_the_targets_tag(tmp_path, fake_tool):
    raw = raw_wheel(str(tmp_path / "raw"), "macosx_11_0_arm64", "_C.abi3.so")
    assert check.repair_and_check(raw, str(tmp_path / "out")).endswith("-macosx_11_0_arm64.whl")
    (cmd,) = fake_tool["calls"]
    assert os.path.basename(cmd[0]) == "delocate-wheel" and cmd[cmd.index("--require-archs") + 1] == "arm64"
    assert [cmd[i + 1] for i, w in enumerate(cmd) if w == "--exclude"] == repair.DELOCATE_EXCLUDES
    fake_tool["graft"] = "prerast/.dylibs/libomp.dylib"
    with pytest.raises(SystemExit, match="grafted.*libomp.dylib"):
        check.repair_and_check(raw, str(tmp_path / "out"))
    # delocate raises the tag when a library needs a newer macOS than the deployment target: refused.
    fake_tool["graft"], fake_tool["retag"] = None, "macosx_14_0_arm64"
    with pytest.raises(SystemExit, match="not tagged exactly macosx_11_0_arm64"):
        check.repair_and_check(raw, str(tmp_path / "out"))


def test_linux_aarch64_wheels_get_the_aarch64_policy_tag(tmp_path, fake_tool, monkeypatch):
    from ci.repair import python_api, served, symbols

    monkeypatch.setattr(symbols, "audit_wheel", lambda path, only_held=False: {})
    monkeypatch.setattr(python_api, "audit_wheel", lambda path: {"_C.abi3.so": []})  # the stand-in is no ELF file
    monkeypatch.setattr(served, "audit", lambda path: {"_C.abi3.so": []})
    raw = raw_wheel(str(tmp_path / "raw"), "linux_aarch64", "_C.abi3.so")
    assert check.repair_and_check(raw, str(tmp_path / "out")).endswith("-manylinux_2_28_aarch64.whl")
    (cmd,) = fake_tool["calls"]
    assert cmd[1:4] == ["-m", "auditwheel", "repair"] and cmd[cmd.index("--plat") + 1] == "manylinux_2_28_aarch64"
    assert "--only-plat" in cmd


def test_tool_of_a_platform_tag():
    assert [
        repair.tool_for(t) for t in ("linux_x86_64", "manylinux_2_28_aarch64", "win_amd64", "macosx_11_0_arm64")
    ] == ["auditwheel", "auditwheel", "delvewheel", "delocate"]
    with pytest.raises(ValueError, match="no repair tool for the platform tag 'any'"):
        repair.tool_for("any")
    with pytest.raises(ValueError, match="unknown repair tool 'zip'"):
        repair.repair_command("zip", "a.whl", "out")


def test_pin_torch_writes_the_constraint_file(tmp_path, capsys):
    path = tmp_path / ".cibw" / "constraints.txt"
    env = {
        "PRERAST_PART": "binding-stable-macos-arm64",
        "PRERAST_TORCH_REQUIREMENT": "torch===2.14.1",
        "PIP_CONSTRAINT": str(path),
    }
    assert cibw.pin_torch_main([], env) == 0
    assert path.read_text() == "torch===2.14.1\n"
    assert cibw.pin_torch_main([], {"PIP_CONSTRAINT": str(path)}) == 2
    assert "PRERAST_PART not set" in capsys.readouterr().err
    # A part without torch (a Windows kernels part) pins nothing; a torch without its constraint file is refused.
    path.unlink()
    assert cibw.pin_torch_main([], {"PRERAST_PART": "kernels-cpu-windows-amd64", "PIP_CONSTRAINT": str(path)}) == 0
    assert not path.exists() and "no torch" in capsys.readouterr().out
    assert cibw.pin_torch_main([], dict(env, PIP_CONSTRAINT="")) == 2


def test_smoke_runtime_on_windows_keeps_the_system_folder_and_moves_home_and_temp(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "_windows", lambda: True)
    monkeypatch.setenv("SystemRoot", "WINDOWS")  # (no drive letter: os.pathsep is ':' where this runs)
    venv, home = str(tmp_path / "venv"), str(tmp_path / "home")
    assert smoke.venv_python(venv) == os.path.join(venv, "Scripts", "python.exe")
    env = smoke.runtime_env(venv, home)
    assert env["PATH"].split(os.pathsep) == [os.path.join(venv, "Scripts"), os.path.join("WINDOWS", "System32")]
    assert env["SystemRoot"] == "WINDOWS" and env["USERPROFILE"] == home
    assert env["TEMP"] == env["TMP"] == env["TMPDIR"] and env["LOCALAPPDATA"].startswith(home)
    monkeypatch.setattr(smoke, "_windows", lambda: False)
    assert smoke.runtime_env(venv, home)["PATH"] == os.path.join(venv, "bin") and "SystemRoot" not in smoke.runtime_env(
        venv, home
    )
