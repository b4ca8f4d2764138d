"""An unrepaired kernel library names no folder of the build machine: the linker command that setuptools takes
from Python's LDSHARED (which, for pyenv's and framework Pythons, adds -Wl,-rpath,<Python's lib folder>) loses its
run paths in kernel_build.plain_compiler. Judged by readelf on a library linked with and without the filter."""

import shlex
import shutil
import subprocess
import sys
import sysconfig

import pytest

from prerast_meta import kernel_build

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not shutil.which("readelf") or not shutil.which("gcc"),
    reason="links ELF libraries with gcc, reads them with readelf",
)


def runpaths(library):
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "RPATH" in line or "RUNPATH" in line]


def test_python_ldshared_run_paths_are_left_out(tmp_path):
    source = tmp_path / "k.c"
    source.write_text("int k(void) { return 1; }\n")
    subprocess.run(["gcc", "-fPIC", "-c", str(source), "-o", str(tmp_path / "k.o")], check=True)
    # Python's LDSHARED as it is, plus each spelling of a run path, as an older setuptools links with it.
    linker = shlex.split(sysconfig.get_config_var("LDSHARED") or "gcc -shared")
    linker = ["gcc", *linker[1:], "-Wl,-rpath,/build/a", "-Wl,-rpath=/build/b", "-Wl,-R,/build/c", "-Wl,-O1,-R/build/d"]
    subprocess.run([*linker, str(tmp_path / "k.o"), "-o", str(tmp_path / "with.so")], check=True)
    named = " ".join(runpaths(tmp_path / "with.so"))
    assert all(f"/build/{x}" in named for x in "abcd"), named
    filtered = kernel_build.without_rpath(linker)
    assert "-Wl,-O1" in filtered  # other linker options stay
    subprocess.run([*filtered, str(tmp_path / "k.o"), "-o", str(tmp_path / "without.so")], check=True)
    assert runpaths(tmp_path / "without.so") == []


def test_the_kernel_build_compiler_links_without_run_paths():
    class Command:  # what plain_compiler reads of a build_ext command
        compiler, force, define = None, False, None

    compiler = kernel_build.plain_compiler(Command())
    for linker in ("linker_so", "linker_so_cxx"):
        command = " ".join(getattr(compiler, linker, None) or [])
        assert "rpath" not in command and " -R" not in command, (linker, command)
