"""The loader: metadata checks, the message of BinaryMismatchError, and GPU arch matching. Subprocess tests run
a copy of the installed package whose metadata was edited."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import prerast
from prerast import _loader


def copy_package(tmp_path, **overrides):
    src = os.path.dirname(prerast.__file__)
    dst = tmp_path / "prerast"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    info = json.loads((dst / "_build_info.json").read_text())
    info.update(overrides)
    (dst / "_build_info.json").write_text(json.dumps(info))
    return tmp_path


def run_python(code, path):
    env = dict(os.environ, PYTHONPATH=str(path))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(path))


def test_other_torch_version_is_refused(tmp_path):
    path = copy_package(tmp_path, torch_version="2.12.0+cu130")
    out = run_python("import prerast", path)
    assert out.returncode == 1, out.stderr
    assert "prerast.errors.BinaryMismatchError" in out.stderr
    assert "2.12.0+cu130" in out.stderr and torch.__version__ in out.stderr
    assert "pip install --force-reinstall" in out.stderr
    assert "Segmentation" not in out.stderr and "undefined symbol" not in out.stderr


def test_error_is_an_import_error(tmp_path):
    path = copy_package(tmp_path, cuda_version="11.8", cxx11_abi=False)
    out = run_python("try:\n import prerast\nexcept ImportError as e:\n print(type(e).__name__); print(e)", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("BinaryMismatchError")
    assert "CUDA 11.8 (built)" in out.stdout and "C++11 ABI" in out.stdout


def test_missing_plugin_is_explained(tmp_path):
    path = copy_package(tmp_path)
    for f in (path / "prerast").glob("_C*.so"):
        f.unlink()
    (path / "prerast" / "_build_info.json").unlink()
    out = run_python("import prerast", path)
    assert out.returncode == 1
    assert "no compiled plugin" in out.stderr and "pip install" in out.stderr


def test_corrupt_plugin_keeps_os_error_as_cause(tmp_path):
    path = copy_package(tmp_path)
    for f in (path / "prerast").glob("_C*.so"):
        f.write_bytes(b"not an ELF file")
    out = run_python("try:\n import prerast\nexcept ImportError as e:\n print(type(e.__cause__).__name__)", path)
    assert out.stdout.strip() == "OSError", out.stderr


def test_problems_lists_every_mismatch():
    info = dict(_loader.require())
    assert _loader.problems(info) == []
    info.update(torch_version="1.0.0", cuda_version="9.9", cxx11_abi=not info["cxx11_abi"], prerast_version="0.0.1")
    assert len(_loader.problems(info)) == 4


def test_fix_command_names_the_right_wheel():
    run = {"python": "3.11.7", "torch_version": "2.14.1+cu130", "cuda_version": "13.0", "cxx11_abi": True}
    cmd = _loader.fix_command(run)
    assert f"prerast=={prerast.__version__.split('+')[0]}+pt214cu130" in cmd
    assert cmd.endswith("/torch-2.14.1+cu130.html")
    run.update(torch_version="2.13.0+cpu", cuda_version=None)
    assert "+pt213cpu" in _loader.fix_command(run) and _loader.fix_command(run).endswith("torch-2.13.0+cpu.html")


@pytest.mark.parametrize("arch,cap,ok", [
    ("8.0", (8, 0), True), ("8.0", (8, 6), True), ("8.6", (8, 0), False), ("8.0", (9, 0), False),
    ("9.0+PTX", (10, 0), True), ("12.0+PTX", (9, 0), False), ("9.0a", (9, 0), True), ("9.0a", (10, 0), False),
    ("7.5", (7, 5), True), ("12.0", (12, 1), True),
])
def test_arch_serves(arch, cap, ok):
    assert _loader.arch_serves(arch, cap) is ok


def test_never_imports_cpp_extension():
    out = subprocess.run([sys.executable, "-c", "import prerast, sys; print('torch.utils.cpp_extension' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
