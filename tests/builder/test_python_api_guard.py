"""The guard behind the wheels' py3-none tag (ci/repair/python_api.py, run by `python -m ci symbols`), on libraries
planted for it: compiled here with gcc (ELF) and, where installed, mingw-w64 (PE), each using Python's C API in
one way (an imported Py* function, a PyInit_* module init, a linked libpython), next to a clean one that uses
the C library only. The guard must name each use, pass the clean library, and make the command fail a wheel that
carries a planted library where the import audit does not look (a classic binding)."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from ci.repair import python_api  # noqa: E402

USES_THE_C_API = """
long PyLong_FromLong(long);
EXPORT void *PyInit_planted(void) { return (void *)PyLong_FromLong(1); }
"""
CLEAN = """
#include <math.h>
EXPORT double prerast_planted(double x) { return sqrt(x); }
"""


def compile_library(cc, source, out, *extra, export=""):
    c = out + ".c"
    with open(c, "w") as f:
        f.write(f"#define EXPORT {export}\n" + source)
    subprocess.run([cc, "-shared", "-fPIC", "-o", out, c, *extra, "-lm"], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def gcc():
    if not shutil.which("gcc") or not shutil.which("nm") or not shutil.which("objdump"):
        pytest.skip("needs gcc and binutils (apt-get install gcc binutils)")
    return "gcc"


def test_guard_names_each_use_of_the_c_api_in_an_elf_library(gcc, tmp_path):
    planted = compile_library(gcc, USES_THE_C_API, str(tmp_path / "planted.so"))
    clean = compile_library(gcc, CLEAN, str(tmp_path / "clean.so"))
    # A stand-in libpython, linked by name as an embedding library would link the real one.
    fake = compile_library(gcc, "int Py_planted_marker;", str(tmp_path / "libpython3.99.so"))
    linked = compile_library(
        gcc, CLEAN, str(tmp_path / "linked.so"), f"-L{tmp_path}", "-Wl,--no-as-needed", "-lpython3.99"
    )
    assert python_api.file_format(planted) == "elf"
    assert python_api.library_problems(planted) == ["imports PyLong_FromLong", "defines PyInit_planted"]
    assert python_api.library_problems(clean) == []
    assert python_api.library_problems(linked) == ["links libpython3.99.so"]
    assert python_api.library_problems(fake) == []  # defines a Py* name, imports none: not a use


def test_guard_reads_a_windows_pyd(tmp_path):
    cc = "x86_64-w64-mingw32-gcc"
    if not shutil.which(cc) or not shutil.which("objdump"):
        pytest.skip("needs mingw-w64 and binutils (apt-get install gcc-mingw-w64-x86-64 binutils)")
    dll = compile_library(
        cc,
        "EXPORT long PyLong_FromLong(long x) { return x; }",
        str(tmp_path / "python3.dll"),
        export="__declspec(dllexport)",
    )
    planted = compile_library(cc, USES_THE_C_API, str(tmp_path / "planted.pyd"), dll, export="__declspec(dllexport)")
    clean = compile_library(cc, CLEAN, str(tmp_path / "clean.pyd"), export="__declspec(dllexport)")
    assert python_api.file_format(planted) == "pe"
    assert python_api.library_problems(planted) == [
        "imports PyLong_FromLong",
        "defines PyInit_planted",
        "links python3.dll",
    ]
    assert python_api.library_problems(clean) == []


def wheel_with(path, library_bytes):
    """A wheel whose metadata names a stable binding and the CPU kernels, and which also carries a classic binding
    (_C_pt24.abi3.so): the library under test."""
    info = {"library": "_C.abi3.so", "abi": "stable", "kernels": {"cpu": {"library": "_kernels_cpu.abi3.so"}}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/_build_info.json", json.dumps(info))
        z.writestr("prerast/_C_pt24.abi3.so", library_bytes)
    return path


def symbols_command(wheel):
    return subprocess.run(
        [sys.executable, "-m", "ci", "symbols", wheel], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_symbols_command_fails_a_wheel_with_a_planted_library(gcc, tmp_path):
    planted = open(compile_library(gcc, USES_THE_C_API, str(tmp_path / "planted.so")), "rb").read()
    clean = open(compile_library(gcc, CLEAN, str(tmp_path / "clean.so")), "rb").read()
    name = "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl"  # a wheel's name: the audit reads its platform tag
    os.makedirs(tmp_path / "bad"), os.makedirs(tmp_path / "good")
    bad = symbols_command(wheel_with(str(tmp_path / "bad" / name), planted))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "_C_pt24.abi3.so: the py3-none tag does not hold" in bad.stdout
    assert "imports PyLong_FromLong" in bad.stdout and "defines PyInit_planted" in bad.stdout
    good = symbols_command(wheel_with(str(tmp_path / "good" / name), clean))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "none used by its 1 libraries" in good.stdout


def test_repair_refuses_a_linux_wheel_whose_library_uses_the_c_api(gcc, tmp_path, monkeypatch):
    """python -m ci repair (cibuildwheel's repair command) runs the guard on the repaired wheel: the repair tool
    stands in here, handing back a wheel with the planted library, then one with the clean library."""
    from ci.builder import wheel as wheels
    from ci.repair import check
    from prerast_meta import repair

    planted = open(compile_library(gcc, USES_THE_C_API, str(tmp_path / "planted.so")), "rb").read()
    clean = open(compile_library(gcc, CLEAN, str(tmp_path / "clean.so")), "rb").read()
    repaired = str(tmp_path / "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl")
    monkeypatch.setattr(repair, "repair", lambda *args, **kwargs: repaired)
    monkeypatch.setattr(wheels, "inspect", lambda path: {"forbidden": [], "build_info": {"abi": "classic"}})
    monkeypatch.delenv("AUDITWHEEL_PLAT", raising=False)
    wheel_with(repaired, planted)
    with pytest.raises(SystemExit, match="uses Python's C API"):
        check.repair_and_check("prerast-0.1.0-py3-none-linux_x86_64.whl", str(tmp_path))
    wheel_with(repaired, clean)
    assert check.repair_and_check("prerast-0.1.0-py3-none-linux_x86_64.whl", str(tmp_path)) == repaired
