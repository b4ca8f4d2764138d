"""prerast_meta.compiler_flags gives each (OS, compiler) the switch that keeps a * b + c uncontracted and no flag of
another compiler family, and setup.py builds its extensions with exactly those flags: setup.py is run in a
subprocess with torch, its extension classes and setuptools.setup faked and sys.platform set to each OS, and the
extensions it would build are read back."""

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from prerast_meta import compiler_flags  # noqa: E402

CASES = [(p, c) for p, cs in compiler_flags.COMPILERS.items() for c in cs]


def is_msvc_flag(f):
    return f.startswith("/")


def is_gnu_flag(f):
    return f.startswith("-") and not f.startswith(("-D", "-I", "-O3"))  # -D/-I and -O3 mean the same to nvcc


@pytest.mark.parametrize("platform_key,compiler", CASES)
def test_contraction_is_off_and_no_other_familys_flag(platform_key, compiler):
    f = compiler_flags.flags(platform_key, compiler, "11.0" if platform_key == "darwin" else None)
    assert compiler_flags.CONTRACTION_OFF[compiler] in f.cxx
    assert "--fmad=false" in f.nvcc and "--fmad=true" not in f.nvcc
    host = f.nvcc[f.nvcc.index("-Xcompiler") + 1]  # what nvcc hands the host compiler
    everything = f.cxx + f.link + [host]
    for bad in (
        "-ffast-math",
        "-Ofast",
        "-ffp-contract=fast",
        "-ffp-contract=on",
        "/fp:fast",
        "/fp:contract",
        "-fopenmp",
        "/openmp",
        "-Xpreprocessor",
    ):
        assert bad not in everything, (platform_key, compiler, bad)
    if compiler == "msvc":
        assert host == "/fp:precise"
        assert all(is_msvc_flag(x) for x in everything), everything  # no -f..., -g0, -Wl,... reaches cl or link
        assert not any(x.startswith("/std:") for x in f.cxx)  # torch's BuildExtension picks the standard
    else:
        assert not any(is_msvc_flag(x) for x in everything), everything
        assert "-fvisibility=hidden" in f.cxx and host == "-fvisibility=hidden"
        assert not any(x.startswith("-std=") for x in f.cxx)


def test_macos_deployment_target_and_linker():
    f = compiler_flags.flags("darwin", "apple-clang", "11.0")
    assert "-mmacosx-version-min=11.0" in f.cxx and f.link == ["-mmacosx-version-min=11.0"]
    assert not any("--exclude-libs" in x for x in f.link)  # ld64 rejects it
    assert not any(x.startswith("-mmacosx") for x in compiler_flags.flags("darwin", "apple-clang").cxx)
    assert compiler_flags.build_flags("darwin", {"MACOSX_DEPLOYMENT_TARGET": "12.3"}).link == [
        "-mmacosx-version-min=12.3"
    ]
    assert compiler_flags.flags("linux", "gcc").link == ["-Wl,--exclude-libs,ALL"]


def test_compiler_choice_and_bad_input():
    assert compiler_flags.compiler_for("win32") == "msvc"
    assert compiler_flags.compiler_for("darwin", "clang++") == "apple-clang"
    assert compiler_flags.compiler_for("linux") == "gcc"
    assert compiler_flags.compiler_for("linux", "/usr/bin/clang++-18 -stdlib=libstdc++") == "clang"
    assert compiler_flags.compiler_for("linux", "g++") == "gcc"
    with pytest.raises(ValueError, match="not on 'sunos5'"):
        compiler_flags.compiler_for("sunos5")
    with pytest.raises(ValueError, match="expected one of msvc"):
        compiler_flags.flags("win32", "gcc")


# Runs setup.py as pip would, with fakes for what needs torch and a build; prints the extensions as JSON.
FAKE_BUILD = r"""
import json, os, runpy, sys, types
platform, cuda, root = sys.argv[1], sys.argv[2] == "cuda", sys.argv[3]

class Ext:
    def __init__(self, name, sources, extra_compile_args=None, py_limited_api=False):
        self.name, self.extra_compile_args = name, extra_compile_args
        self.libraries, self.extra_link_args = ["c10", "torch", "torch_cpu", "torch_python"], []

class BuildExtension:
    @classmethod
    def with_options(cls, **kwargs):
        return cls

torch = types.ModuleType("torch")
torch.__version__ = "2.14.1"
torch.__file__ = "/fake/site-packages/torch/__init__.py"
torch.version = types.SimpleNamespace(cuda="13.0" if cuda else None)
cpp = types.ModuleType("torch.utils.cpp_extension")
cpp.BuildExtension, cpp.CppExtension, cpp.CUDAExtension = BuildExtension, Ext, Ext
cpp.include_paths = lambda *args, **kwargs: []
utils = types.ModuleType("torch.utils")
utils.cpp_extension = cpp
torch.utils = utils
sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.cpp_extension": cpp})
import setuptools
import setuptools.command.build_py
import setuptools.command.build_ext  # before sys.platform is faked: it reads this platform's config
seen = {}
setuptools.setup = lambda **kwargs: seen.update(kwargs)
sys.platform = platform
sys.argv = ["setup.py", "--name"]
runpy.run_path(os.path.join(root, "setup.py"), run_name="__main__")
def flags(e):  # a kernel library's (prerast_meta/kernel_build.py), or a binding's
    if hasattr(e, "cxx_flags"):
        return {"cxx": e.cxx_flags, **({"nvcc": e.nvcc_flags} if e.cuda_home else {})}
    return e.extra_compile_args
print(json.dumps([{"name": e.name, "compile": flags(e), "link": e.extra_link_args} for e in seen["ext_modules"]]))
"""


def setup_extensions(platform, cuda, tmp_path, **env):
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True, exist_ok=True)
    (cuda_home / "include").mkdir(exist_ok=True)
    (cuda_home / "include" / "cuda_runtime_api.h").write_text("")  # the CUDA part's headers
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CXX", "MACOSX_DEPLOYMENT_TARGET", "PRERAST_ABI", "PRERAST_FORCE_CPU")
    }
    environ.update(CUDA_HOME=str(cuda_home), PRERAST_CUDA_ARCH_LIST="9.0", **env)
    r = subprocess.run(
        [sys.executable, "-c", FAKE_BUILD, platform, "cuda" if cuda else "cpu", ROOT],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    return {e["name"]: e for e in json.loads(r.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("platform_key,compiler", CASES)
def test_setup_py_builds_with_these_flags(platform_key, compiler, tmp_path):
    cuda = platform_key != "darwin"  # torch has no CUDA build for macOS
    env = {"MACOSX_DEPLOYMENT_TARGET": "11.0"} if platform_key == "darwin" else {}
    if compiler == "clang":
        env["CXX"] = "clang++"
    want = compiler_flags.flags(platform_key, compiler, env.get("MACOSX_DEPLOYMENT_TARGET"))
    # Then the folders the objects must not name: the sources as ".", torch's package as "torch".
    mapped = compiler_flags.prefix_map(platform_key, compiler, {ROOT: ".", "/fake/site-packages/torch": "torch"})
    want = compiler_flags.Flags(*(a + b for a, b in zip(want, mapped)))
    exts = setup_extensions(platform_key, cuda, tmp_path, **env)
    bindings, kernels = ["prerast._C", "prerast._C_cuda"], ["prerast._kernels_cpu", "prerast._kernels_cu13"]
    assert sorted(exts) == sorted(bindings + kernels if cuda else bindings[:1] + kernels[:1])
    for name, ext in exts.items():
        cxx = ext["compile"]["cxx"]
        assert cxx[: len(want.cxx)] == want.cxx, cxx  # the function's flags, then only defines (and includes)
        assert all(
            x.startswith("-D") for x in cxx[len(want.cxx) :] if not x.startswith("-idirafter") and not os.path.isabs(x)
        ), cxx
        if compiler == "msvc":
            assert not any(x == "-idirafter" for x in cxx), cxx
        assert ext["link"] == want.link
        # The version is the binding's (binary_info); a kernel library carries no torch or version define.
        assert sum(x.startswith("-DPRERAST_VERSION_BYTES=") for x in cxx) == (name in bindings), cxx
        assert "nvcc" not in ext["compile"] or name == "prerast._kernels_cu13"
        if name == "prerast._kernels_cu13":
            nvcc = ext["compile"]["nvcc"]
            assert nvcc[: len(want.nvcc)] == want.nvcc, nvcc
            assert not any("PRERAST_VERSION" in x for x in nvcc), nvcc  # nvcc splits -D at commas
            assert "-gencode" in nvcc or any(x.startswith("-gencode") for x in nvcc), nvcc


def test_setup_py_spells_no_flags_itself():
    """The flags live in compiler_flags alone: no string in setup.py's code names one that decides code generation
    or linking (comments and the docstring may)."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    strings.remove(ast.get_docstring(tree, clean=False))
    for flag in ("-O", "-g0", "-ffp-contract", "-fvisibility", "--fmad", "-Xcompiler", "-Wl,", "/fp:", "/O2"):
        assert not any(flag in s for s in strings), flag
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "build_flags"
    ]
    assert len(calls) == 1


VERSION_PROGRAM = """
#include <cstdio>
constexpr char kVersion[] = {PRERAST_VERSION_BYTES, 0};  // as csrc/bindings/library.cpp spells it
int main() { std::fputs(kVersion, stdout); }
"""


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ (Debian package g++)")
def test_version_define_compiles_back_to_the_version(tmp_path):
    text = open(os.path.join(ROOT, "csrc", "bindings", "library.cpp")).read()
    assert "constexpr char kVersion[] = {PRERAST_VERSION_BYTES, 0};" in text
    src = tmp_path / "version.cpp"
    src.write_text(VERSION_PROGRAM)
    for version in ("0.4.0.dev1+pt214cu130", "1.0.0+cpu", "2.0.0rc1"):
        exe = tmp_path / "version"
        subprocess.run(
            ["g++", "-std=c++17", compiler_flags.version_define(version), str(src), "-o", str(exe)],
            check=True,
            timeout=120,
        )
        assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout == version
    assert compiler_flags.version_define("0.1") == "-DPRERAST_VERSION_BYTES=48,46,49"
    for bad in ("", "0.1\n", "0.1\u00e9"):
        with pytest.raises(ValueError, match="printable ASCII"):
            compiler_flags.version_define(bad)
