"""`python -m ci symbols` audits each library against what serves it (ci/repair/served.py), judged on libraries
planted here with gcc: a kernel library importing cudaStreamGetDevice (CUDA 12.8) from a stub libcudart is refused
by name, since torch 2.4's libcudart 12.1.105 lacks it; dlopen@GLIBC_2.34 is refused for manylinux_2_28; a RUNPATH
naming a folder is refused, an $ORIGIN one is not. The generated cudart lists are checked for what they claim."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.repair import served  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not all(shutil.which(t) for t in ("gcc", "nm", "readelf")),
    reason="builds and reads ELF libraries (gcc, binutils)",
)

STUB = (
    "int cudaMalloc(void** p, unsigned long n) { return 0; }\nint cudaStreamGetDevice(void* s, int* d) { return 0; }\n"
)
USER = """#include <dlfcn.h>
int cudaMalloc(void** p, unsigned long n);
int cudaStreamGetDevice(void* s, int* d);
int use(void) { void* p; int d; return cudaMalloc(&p, 4) + %s + (dlopen("x", 0) != 0); }
"""


def gcc(*args, cwd):
    subprocess.run(["gcc", "-shared", "-fPIC", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(a library importing cudaStreamGetDevice and dlopen with a RUNPATH of the build machine, a clean one)."""
    d = tmp_path_factory.mktemp("planted")
    (d / "stub.c").write_text(STUB)
    (d / "stub.map").write_text("libcudart.so.12 { global: *; };\n")  # the real library's version node
    gcc("stub.c", "-o", "libcudart.so.12", "-Wl,-soname,libcudart.so.12", "-Wl,--version-script,stub.map", cwd=d)
    os.symlink("libcudart.so.12", d / "libcudart.so")
    (d / "bad.c").write_text(USER % "cudaStreamGetDevice(0, &d)")
    gcc("bad.c", "-o", "_kernels_cu12.abi3.so", "-L.", "-lcudart", "-Wl,-rpath,/home/builder/lib", cwd=d)
    (d / "good.c").write_text((USER % "0").replace('(dlopen("x", 0) != 0)', "0"))
    gcc("good.c", "-o", "good.so", "-L.", "-lcudart", "-Wl,-rpath,$ORIGIN/../lib", cwd=d)
    return str(d / "_kernels_cu12.abi3.so"), str(d / "good.so")


def test_a_cudart_symbol_the_oldest_runtime_lacks_is_refused_by_name(planted):
    bad, good = planted
    problems = served.cudart_problems(bad, "12")
    assert len(problems) == 1 and "cudaStreamGetDevice" in problems[0] and "12.1.105" in problems[0], problems
    assert served.cudart_problems(good, "12") == []  # cudaMalloc: in every runtime


def test_symbol_versions_beyond_the_policy_are_refused(planted):
    bad, good = planted
    allowed = served.policy_versions("manylinux_2_28", "x86_64")
    glibc = {v for _, v in served.dynamic_symbols(bad) if v and v.startswith("GLIBC_")}
    problems = served.symbol_version_problems(bad, allowed, "manylinux_2_28")
    if "GLIBC_2.34" in glibc:  # dlopen's version on a glibc >= 2.34 host (this one builds with)
        assert any("GLIBC_2.34" in p and "dlopen" in p for p in problems), problems
    assert served.symbol_version_problems(good, allowed, "manylinux_2_28") == []
    assert served.symbol_version_problems(bad, served.policy_versions("manylinux_2_39", "x86_64"), "x") == []


def test_run_paths_naming_a_folder_are_refused(planted):
    bad, good = planted
    assert served.run_path_problems(bad) == ["RUNPATH names /home/builder/lib (a folder of the build machine)"]
    assert served.run_path_problems(good) == []


def test_ci_symbols_refuses_a_wheel_carrying_it(planted, tmp_path):
    bad, _ = planted
    wheel = tmp_path / "prerast-0.1.0+kernels.cu12-py3-none-manylinux_2_28_x86_64.whl"
    info = {"abi": None, "kernels": {"cu12": {"library": "_kernels_cu12.abi3.so", "cuda_version": "12.8"}}}
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(bad, "prerast/_kernels_cu12.abi3.so")
        z.writestr("prerast/_build_info.json", json.dumps(info))
    out = subprocess.run([sys.executable, "-m", "ci", "symbols", str(wheel)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "cudaStreamGetDevice" in out.stdout and "/home/builder/lib" in out.stdout, out.stdout


@pytest.mark.parametrize("major,runtime", [("12", "12.1.105"), ("13", "13.0.")])
def test_the_lists_are_the_oldest_served_runtimes(major, runtime):
    fields, names = served.cudart_exports(major)
    assert fields["version"].startswith(runtime), fields
    assert f"cudaMalloc@libcudart.so.{major}" in names and len(names) > 100
    # 12.1 lacks what 12.8 added; the list must not claim it.
    assert major != "12" or not any(n.startswith("cudaStreamGetDevice@") for n in names)
