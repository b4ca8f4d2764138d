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
from installs import overridden, restamp
from prerast import _loader
from prerast_meta import compat


def copy_package(tmp_path, **overrides):
    src = os.path.dirname(prerast.__file__)
    dst = tmp_path / "prerast"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    # prerast_meta beside it, as a wheel installs it (an in-place build's checkout has it only at its root).
    meta = os.path.dirname(compat.__file__)
    shutil.copytree(meta, tmp_path / "prerast_meta", ignore=shutil.ignore_patterns("__pycache__"))
    info = json.loads((dst / "_build_info.json").read_text())
    (dst / "_build_info.json").write_text(json.dumps(overridden(info, overrides)))
    return tmp_path


def run_python(code, path):
    env = dict(os.environ, PYTHONPATH=str(path))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(path))


def test_stable_binary_serves_other_torch_releases(tmp_path):
    # A stable-ABI binary loads into any torch from its floor on, whatever release it was built with.
    path = copy_package(tmp_path, abi="stable", torch_version="2.99.0+cu130", cxx11_abi=False)
    out = run_python("import prerast; print(prerast._loader.status()['info']['abi'])", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "stable"


def test_stable_binary_refuses_torch_below_its_floor(tmp_path):
    path = copy_package(tmp_path, abi="stable", torch_floor="2.99")
    out = run_python("import prerast", path)
    assert out.returncode == 1, out.stderr
    assert "prerast.errors.BinaryMismatchError" in out.stderr
    assert "older than 2.99" in out.stderr and torch.__version__ in out.stderr
    assert "pip install --force-reinstall" in out.stderr


def test_classic_binary_serves_every_patch_release_of_its_minor(tmp_path):
    major, minor = torch.__version__.split(".")[:2]
    path = copy_package(tmp_path, abi="classic", torch_version=f"{major}.{minor}.99")
    out = run_python("import prerast", path)
    assert out.returncode == 0, out.stderr


def test_classic_binary_refuses_another_minor(tmp_path):
    path = copy_package(tmp_path, abi="classic", torch_version="2.4.0+cu121")
    out = run_python("import prerast", path)
    assert out.returncode == 1, out.stderr
    assert "prerast.errors.BinaryMismatchError" in out.stderr
    assert "2.4.0+cu121" in out.stderr and torch.__version__ in out.stderr and "serves torch 2.4.x" in out.stderr
    assert "pip install --force-reinstall" in out.stderr
    assert "Segmentation" not in out.stderr and "undefined symbol" not in out.stderr


def test_error_is_an_import_error(tmp_path):
    path = copy_package(tmp_path, abi="classic", cuda_version="11.8", cxx11_abi=not torch._C._GLIBCXX_USE_CXX11_ABI)
    code = "try:\n import prerast\nexcept ImportError as e:\n print(type(e).__name__); print(e)"
    out = run_python(code, path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("BinaryMismatchError")
    # A classic binding's CUDA part calls no CUDA function itself: the torch it was built with may have had another
    # CUDA; only the CUDA kernel library's major has to be torch's.
    assert "CUDA 11.8 (built)" not in out.stdout
    assert "C++11 ABI" in out.stdout


def test_missing_plugin_is_explained(tmp_path):
    path = copy_package(tmp_path)
    for f in (path / "prerast").glob("_C*.so"):
        f.unlink()
    (path / "prerast" / "_build_info.json").unlink()
    out = run_python("import prerast", path)
    assert out.returncode == 1
    assert "no compiled plugin" in out.stderr and "pip install" in out.stderr


def test_corrupt_plugin_is_refused_before_loading(tmp_path):
    # Not an ELF file, although its size and hash were stamped for it: refused by its header, never dlopen'ed.
    # (Damage the stamps catch, and a library that fails to load, are tests/runtime/test_integrity.py.)
    path = copy_package(tmp_path)
    info = json.loads((path / "prerast" / "_build_info.json").read_text())
    for name in info["libraries"]:
        (path / "prerast" / name).write_bytes(b"not an ELF file")
    restamp(str(path / "prerast"))
    out = run_python(
        "try:\n import prerast\nexcept ImportError as e:\n print(type(e).__name__, e.__cause__); print(e)", path
    )
    assert out.stdout.startswith("BinaryMismatchError None"), out.stderr
    assert "not an ELF library (first bytes 6e 6f 74 20" in out.stdout
    assert str(path / "prerast" / info["library"]) in out.stdout


def test_problems_lists_every_mismatch():
    info = dict(_loader.require())
    assert _loader.problems(info) == []
    info.update(
        abi="classic",
        torch_version="1.0.0",
        cuda_version="9.9",
        cxx11_abi=not info["cxx11_abi"],
        prerast_version="0.0.1",
    )
    run = dict(_loader.running(), cuda_version="12.1")
    found = _loader.problems(info, run)
    assert len(found) == 3 and not any("CUDA" in p for p in found), found  # the CUDA kernels are chosen apart


def test_cpu_only_classic_binary_fits_a_cuda_torch():
    info = {
        "abi": "classic",
        "torch_version": "2.4.0",
        "cuda_version": None,
        "cxx11_abi": False,
        "prerast_version": prerast.__version__,
        "cuda_path": None,
    }
    run = {"python": "3.11.7", "torch_version": "2.4.1+cu121", "cuda_version": "12.1", "cxx11_abi": False}
    assert _loader.problems(info, run) == []
    assert "CPU-only" in _loader.cuda_skip_reason(info, run)


def test_cuda_kernels_load_only_into_a_cuda_torch_of_their_major():
    info = {
        "abi": "stable",
        "torch_version": "2.14.1+cu130",
        "cuda_version": "13.0",
        "cuda_path": "/x/_C_cuda.so",
        "prerast_version": prerast.__version__,
    }
    run = {"python": "3.11.7", "torch_version": "2.11.0+cu130", "cuda_version": "13.0", "cxx11_abi": True}
    assert _loader.problems(info, run) == [] and _loader.cuda_skip_reason(info, run) is None
    assert _loader.cuda_skip_reason(info, dict(run, cuda_version="13.2")) is None
    assert "CUDA 13.x" in _loader.cuda_skip_reason(info, dict(run, cuda_version="12.6"))
    assert "CPU-only build" in _loader.cuda_skip_reason(info, dict(run, torch_version="2.13.0+cpu", cuda_version=None))


@pytest.mark.parametrize(
    "torch_version,cuda",
    [
        ("2.14.1+cu130", "13.0"),
        ("2.11.0", "13.0"),
        ("2.13.0+cpu", None),
        ("2.10.0+cu132", "13.2"),
        ("2.12.1+cu126", "12.6"),
        ("2.10.0+cu128", "12.8"),
        ("2.4.1+cu121", "12.1"),
        ("2.9.0+cpu", None),
    ],
)
def test_fix_command_names_the_right_wheel(torch_version, cuda):
    """The one wheel (untagged: it serves every torch build the matrix serves) from the page of the running build."""
    run = {"python": "3.11.7", "torch_version": torch_version, "cuda_version": cuda, "cxx11_abi": True}
    cmd = _loader.fix_command(run)
    assert f'"prerast=={prerast.__version__.split("+")[0]}"' in cmd
    platform = "cpu" if cuda is None else "cu" + cuda.replace(".", "")
    assert cmd.endswith(f"/torch-{torch_version.split('+')[0]}+{platform}.html")


@pytest.mark.parametrize(
    "arch,cap,ok",
    [
        ("8.0", (8, 0), True),
        ("8.0", (8, 6), True),
        ("8.6", (8, 0), False),
        ("8.0", (9, 0), False),
        ("9.0+PTX", (10, 0), True),
        ("12.0+PTX", (9, 0), False),
        ("9.0a", (9, 0), True),
        ("9.0a", (10, 0), False),
        ("7.5", (7, 5), True),
        ("12.0", (12, 1), True),
    ],
)
def test_arch_serves(arch, cap, ok):
    assert compat.arch_serves(arch, cap) is ok


def test_never_imports_cpp_extension():
    out = subprocess.run(
        [sys.executable, "-c", "import prerast, sys; print('torch.utils.cpp_extension' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
