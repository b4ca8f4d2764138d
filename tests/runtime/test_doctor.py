"""`python -m prerast doctor` (and the command line around it) for a working install, a mismatched binary, a
missing binary and a GPU the plugin has no code for: output and exit codes."""

import glob
import json
import os
import re
import shlex

import pytest
import torch

import prerast
from installs import copy_package, doctor, remove_plugin
from prerast import __main__ as cli, _doctor, _loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_working_install(capsys):
    # This process has a working install: the command line, run here, reports it and exits 0.
    assert cli.main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["exit_code"] == 0 and report["fixes"] == []
    plugin = report["plugin"]
    assert plugin["loaded"] and plugin["error"] is None
    assert plugin["path"] == _loader.require()["path"] and plugin["source"] == _loader.status()["source"]
    assert plugin["build_info"]["torch_version"] == _loader.require()["torch_version"]
    run = report["running"]
    assert run["torch_version"] == torch.__version__ and run["cuda_version"] == torch.version.cuda
    assert run["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    assert report["prerast"]["version"] == prerast.__version__
    assert cli.main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert f"plugin:   loaded from the package: {plugin['path']}" in text
    assert "status:   OK" in text and "fix:" not in text
    # Which kind of binary it is, and why it serves this torch.
    kind = _loader.require().get("abi", "classic")
    assert plugin["kind"] == kind and plugin["fits"] in text and torch.__version__ in plugin["fits"]
    assert ("every torch from 2.10 on" if kind == "stable" else "classic binary") in plugin["fits"]
    expected = "loaded" if _loader.status()["cuda"] is None else f"not loaded: {_loader.status()['cuda']}"
    assert plugin["cuda_kernels"] == expected and f"CUDA kernels {expected}" in text


def test_cuda_plugin_in_a_cpu_torch_loads_the_cpu_ops_and_says_so(tmp_path):
    # A stable CUDA wheel serves a CPU-only torch too: its CUDA library is not loaded, and doctor says why.
    if _loader.require().get("abi") != "stable" or not _loader.require().get("cuda_path"):
        pytest.skip("needs the stable CUDA plugin")
    # Its kernels for one CUDA major only, 12 (the library of the installed build, recorded as CUDA 12.6).
    kernels = _loader.require()["kernels"]
    cuda = kernels[max((k for k in kernels if k != "cpu"), key=lambda k: int(k[2:]))]
    path = copy_package(tmp_path, kernels={"cpu": kernels["cpu"], "cu12": dict(cuda, cuda_version="12.6")})
    out, report = doctor(path, "--json")
    assert report["plugin"]["loaded"], out.stderr
    if torch.version.cuda and torch.version.cuda.split(".")[0] != "12":
        assert "built for CUDA 12.x" in report["plugin"]["cuda_kernels"]


def test_mismatched_binary(tmp_path):
    path = copy_package(tmp_path, abi="classic", torch_version="2.4.1+cu124", cuda_version="12.4")
    out, report = doctor(path, "--json")
    assert out.returncode == 1, out.stderr
    assert not report["ok"] and not report["plugin"]["loaded"]
    assert any("2.4.1+cu124" in p for p in report["bundled"]["problems"])
    assert "2.4.1+cu124" in report["plugin"]["error"] and torch.__version__ in report["plugin"]["error"]
    # The exact command that fixes it comes first; building (a wheel, or at first use) follow.
    assert report["fixes"][0] == _loader.fix_command()
    assert any("build-wheel" in f for f in report["fixes"])
    assert any("PRERAST_BUILD_ON_MISMATCH=1" in f for f in report["fixes"])
    text, _ = doctor(path)
    assert text.returncode == 1
    assert "none loaded" in text.stdout and "prerast cannot run here" in text.stdout
    assert f"fix:      {_loader.fix_command()}" in text.stdout
    assert "Traceback" not in text.stderr


def test_missing_binary(tmp_path):
    path = copy_package(tmp_path)
    remove_plugin(path)
    out, report = doctor(path, "--json")
    assert out.returncode == 1, out.stderr
    assert report["bundled"]["path"] is None
    assert "no compiled plugin" in report["bundled"]["problems"][0]
    assert report["fixes"][0] == _loader.fix_command()
    assert "no compiled plugin" in _doctor.format_text(report)


def test_custom_torch_build_is_sent_to_build_wheel():
    # No published wheel follows a vendor's torch: no pip command for it, build-wheel first.
    assert _doctor.published_torch("2.14.1+cu130") and _doctor.published_torch("2.13.0")
    assert not _doctor.published_torch("2.5.0a0+nv24.10")
    report = {
        "running": dict(_loader.running(), torch_version="2.5.0a0+nv24.10"),
        "gpus": [],
        "plugin": {"loaded": False},
        "source_build": {"cache_dir": "/c"},
    }
    found = _doctor.fixes(report)
    assert found[0].startswith("python -m prerast build-wheel")
    assert not any(f.startswith("pip install") for f in found)


def test_gpu_without_code_exits_2(monkeypatch):
    # Two GPUs, one the plugin serves (9.0) and one it does not (12.0): doctor names the arch to build.
    caps = [(9, 0), (12, 0)]
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: caps[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU model {i}")
    info = dict(_loader.require(), cuda_version="13.0", cuda_archs=["8.0", "9.0"])
    monkeypatch.setitem(_loader._state, "info", info)
    monkeypatch.setitem(_loader._state, "cuda", None)  # its CUDA kernels loaded (an in-place CPU build has none)
    report = _doctor.collect()
    assert [g["served"] for g in report["gpus"]] == [True, False]
    assert report["exit_code"] == _doctor.GPU_NOT_SERVED == 2
    assert report["fixes"] == ["python -m prerast build-wheel --arch 12.0 --out dist && pip install dist/prerast-*.whl"]
    text = _doctor.format_text(report)
    assert "GPU 1:    GPU model 1, compute capability 12.0: NO CODE FOR IT" in text


def test_documented_commands_parse():
    # Every `python -m prerast ...` command in the README, the guides and the Dockerfile is accepted by the command line.
    commands = []
    guides = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for name in ["README.md", os.path.join("examples", "Dockerfile")] + guides:
        with open(os.path.join(ROOT, name)) as f:
            for m in re.finditer(r"python3? -m prerast ([^\n`]+)", f.read()):
                words = shlex.split(m.group(1).rstrip("\\ "), comments=True)
                ends = [i for i, w in enumerate(words) if w in ("&&", "||", "|", ";", ")")]
                commands.append(words[: ends[0]] if ends else words)
    assert {"doctor", "build-wheel"} <= {c[0] for c in commands}
    for words in commands:
        cli.parser().parse_args(words)
