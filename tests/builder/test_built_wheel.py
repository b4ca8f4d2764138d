"""The repaired wheel that ci/test.sh builds (one GPU arch) is what the matrix promises: nothing of torch or CUDA
grafted in (those libraries stay external, resolved from torch at run time), the manylinux tag auditwheel derives
from its symbol versions, the name of its cell, and build metadata for the torch it is tested with. The smoke test
of the same wheel is in test_runtime_wheel.py."""

import os
import re
import sys
import zipfile

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix
from ci.builder import wheel  # noqa: E402
from ci.repair import python_api, symbols
from prerast_meta import build_info  # noqa: E402
from wheel_under_test import find_test_wheel  # noqa: E402

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def built():
    return find_test_wheel()


def needed_libraries(wheel_path, tmp_path, library="_C"):
    """DT_NEEDED of one plugin library inside the wheel, read with pyelftools (auditwheel's own dependency)."""
    elffile = pytest.importorskip("elftools.elf.elffile")
    with zipfile.ZipFile(wheel_path) as z:
        (name,) = [n for n in z.namelist() if re.search(rf"prerast/{library}\.[^/]*so$", n)]
        target = tmp_path / f"{library}.so"
        target.write_bytes(z.read(name))
    with open(target, "rb") as f:
        dynamic = elffile.ELFFile(f).get_section_by_name(".dynamic")
        return [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


def test_no_torch_or_cuda_library_inside(built, tmp_path):
    found = wheel.inspect(built)
    info = found["build_info"]
    assert found["grafted"] == [], f"auditwheel grafted libraries into the wheel: {found['grafted']}"
    assert found["forbidden"] == []
    expected = sorted(build_info.library_names(info))
    assert sorted(os.path.basename(n) for n in found["libraries"]) == expected
    assert info["library"] == "_C.abi3.so" and "_kernels_cpu.abi3.so" in expected
    # The bindings link torch's libraries: they must be left for torch to provide, not copied. The CPU part never
    # needs CUDA, so that it loads into a CPU-only torch; the CUDA part links torch's CUDA library but no CUDA
    # runtime, so that it serves every CUDA major.
    needed = needed_libraries(built, tmp_path)
    assert any(n.startswith("libtorch") for n in needed)
    assert not any("cuda" in n for n in needed), needed
    if info.get("cuda_library"):
        cuda_needed = needed_libraries(built, tmp_path, "_C_cuda")
        assert any(n.startswith("libtorch_cuda") for n in cuda_needed) and "libcudart" not in str(cuda_needed)
    # The kernel libraries need no torch: the CPU one nothing but the C and C++ runtimes, a CUDA one the CUDA runtime
    # of its major, which the CUDA torch of that major has loaded.
    cpu_needed = needed_libraries(built, tmp_path, "_kernels_cpu")
    assert not any("torch" in n or "c10" in n or "cuda" in n for n in cpu_needed), cpu_needed
    for key in info["kernels"]:
        if key != "cpu":
            kernel_needed = needed_libraries(built, tmp_path, f"_kernels_{key}")
            assert f"libcudart.so.{key[2:]}" in kernel_needed and not any("torch" in n for n in kernel_needed)


def test_stable_plugin_imports_only_torchs_c_shims(built):
    """The stable-ABI binding imports nothing of torch but its C shims: no at::/c10::/torch:: symbol that would tie
    it to one torch release. The kernel libraries import nothing of torch at all."""
    info = wheel.inspect(built)["build_info"]
    if info.get("abi") != "stable":
        pytest.skip("a classic (per-release) wheel links torch's C++ API by design")
    report = symbols.audit_wheel(built)
    assert set(report) == set(build_info.library_names(info))
    for lib in (info["library"], info["cuda_library"]):
        if lib:
            assert report[lib].get("other", []) == [], f"{lib} imports symbols outside torch's stable C shims"
            assert report[lib]["torch-shim"], lib
    for kern in info["kernels"].values():
        kinds = report[kern["library"]]
        assert "torch-shim" not in kinds and kinds.get("other", []) == [], (kern["library"], kinds)


def test_py3_none_tag_holds(built):
    """The wheel is py3-none-<platform> in its name and its WHEEL file, and none of its libraries (every binding
    and kernel library its metadata names) uses Python's C API: the guard of python -m ci symbols."""
    py, abi, plats = wheel.wheel_tags(built)
    assert (py, abi) == ("py3", "none")
    with zipfile.ZipFile(built) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        assert re.findall(r"^Tag: (\S+)$", z.read(meta).decode(), re.M) == [f"py3-none-{p}" for p in plats]
    report = python_api.audit_wheel(built)
    assert sorted(report) == sorted(build_info.library_names(wheel.inspect(built)["build_info"]))
    assert {lib: problems for lib, problems in report.items() if problems} == {}


def test_manylinux_tag_is_the_one_its_symbols_allow(built):
    pytest.importorskip("auditwheel")
    tag, text = wheel.auditwheel_show(built)
    plat_tags = wheel.wheel_tags(built)[2]
    assert tag in plat_tags, text
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", tag)
    assert m, f"not a manylinux tag: {tag}"
    glibc = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    assert (int(m.group(1)), int(m.group(2))) <= glibc
    if os.environ.get("AUDITWHEEL_PLAT"):  # inside a manylinux image: exactly the matrix's policy
        assert tag == f"{matrix.load()[0].manylinux}_x86_64"


def test_named_after_its_cell_and_built_for_this_torch(built):
    info = wheel.inspect(built)["build_info"]
    assert info["torch_version"] == torch.__version__
    cell = matrix.cell_for_build(info)
    assert cell is not None and cell.kind == info["abi"]
    version = info["prerast_version"].split("+")[0]
    assert os.path.basename(built) == cell.wheel_name(version, ".".join(wheel.wheel_tags(built)[2]))
    archs = os.environ.get("PRERAST_CUDA_ARCH_LIST")
    if info.get("cuda_version") and archs:
        assert info["cuda_archs"] == archs.replace(",", ";").split(";")


def pip_dry_run(wheel, python, abi, plat):
    """pip's own compatibility check of `wheel` for another interpreter: pip install --dry-run with its tags."""
    import subprocess

    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--no-index"]
    argv += ["--python-version", python]
    argv += ["--implementation", "cp", "--abi", abi, "--platform", plat, "--only-binary=:all:", wheel]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_pip_takes_the_wheel_under_every_cpython_free_threaded_too(built, tmp_path):
    """This environment's pip (26.3, ci/requirements-build.txt's venv) takes the wheel for the oldest and newest
    CPython and the free-threaded 3.13t and 3.14t; Requires-Python still refuses 3.9. The same file named
    cp310-abi3, as the wheels were, is refused under 3.14t: the check tells the tags apart."""
    import shutil

    plat = wheel.wheel_tags(built)[2][0]
    for python, abi in [("3.10", "cp310"), ("3.14", "cp314"), ("3.13", "cp313t"), ("3.14", "cp314t")]:
        out = pip_dry_run(built, python, abi, plat)
        assert out.returncode == 0 and "Would install prerast-" in out.stdout, (abi, out.stdout + out.stderr)
    old = pip_dry_run(built, "3.9", "cp39", plat)
    assert old.returncode != 0 and "requires a different Python" in old.stderr, old.stdout + old.stderr
    abi3 = str(tmp_path / os.path.basename(built).replace("-py3-none-", "-cp310-abi3-"))
    shutil.copy(built, abi3)
    refused = pip_dry_run(abi3, "3.14", "cp314t", plat)
    assert refused.returncode != 0 and "is not a supported wheel on this platform" in refused.stderr, refused.stderr
