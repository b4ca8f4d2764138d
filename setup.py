"""Builds prerast's compiled plugin against the torch installed in the build environment.

    pip wheel --no-build-isolation .          # CUDA build when torch has CUDA and a toolkit is found

Environment:
    CUDA_HOME                  CUDA toolkit to use (default: /usr/local/cuda, else where nvcc lives)
    PRERAST_CUDA_ARCH_LIST     GPU archs, e.g. "8.0;9.0+PTX" (falls back to TORCH_CUDA_ARCH_LIST, then to
                               every arch from 7.5 up that the installed torch was built for, plus PTX
                               of the newest)
    PRERAST_ABI                stable: one binary for every torch >= 2.10 (torch's stable C ABI; the default
                               with torch >= 2.10); classic: one binary per torch minor release (ATen; the
                               default, and the only choice, below 2.10)
    PRERAST_FORCE_CPU=1        build the CPU-only plugin even when CUDA is available
    PRERAST_NO_LOCAL_VERSION=1 leave the local tag (+pt<torch><cuda> classic, +cu<major>/+cpu stable) off
"""

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


# The import-safe half of the package (stdlib only; importing `prerast` itself would load its plugin). A PEP 517
# backend does not put this folder on sys.path, so it is put first: the build reads its own sources' copy.
sys.path.insert(0, ROOT)
from prerast_meta import build_env, build_info, compat, compiler_flags, platforms, sources  # noqa: E402
from prerast_meta.version import __version__ as VERSION  # noqa: E402

# torch guesses CUDA_HOME from the first nvcc on PATH, which may be a wrapper script outside the toolkit:
# settle it before torch.utils.cpp_extension is imported.
CUDA_HOME = build_env.find_cuda_home()
if CUDA_HOME:
    os.environ["CUDA_HOME"] = CUDA_HOME

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError:
    sys.exit(
        "prerast: building needs torch in the build environment. Install the torch you will run with, "
        "then: pip wheel --no-build-isolation ."
    )

# The CPU library (op schemas, bindings and CPU kernels; loads into any torch build) and the CUDA library (the same
# bindings registering the CUDA kernels, loaded only into a CUDA build of torch of the same CUDA major, so that a
# CUDA wheel also serves CPU-only torch): their sources are found by the per-folder rule of prerast_meta/sources.py.
SOURCES = sources.library_sources(ROOT, "cpu")
CUDA_SOURCES = sources.library_sources(ROOT, "cuda")


def use_cuda():
    if os.environ.get("PRERAST_FORCE_CPU") == "1":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


try:
    ABI = compat.abi_kind(torch.__version__, os.environ.get("PRERAST_ABI", ""))
except ValueError as e:
    sys.exit(f"prerast: {e}")
WITH_CUDA = use_cuda()
LOCAL_TAG = compat.local_tag(torch.__version__, torch.version.cuda if WITH_CUDA else None, ABI)
FULL_VERSION = (
    VERSION if os.environ.get("PRERAST_NO_LOCAL_VERSION") == "1" or not LOCAL_TAG else f"{VERSION}+{LOCAL_TAG}"
)
ARCHS = build_env.arch_list(torch, CUDA_HOME) if WITH_CUDA else []
if ABI == "stable":
    # Only torch's stable C shims are imported (libtorch_cpu and, for the CUDA library, libtorch_cuda).
    ABI_FLAGS = ["-DPRERAST_STABLE_ABI", f"-DTORCH_TARGET_VERSION={compat.STABLE_TARGET_VERSION}"]
    CPU_LIBS, CUDA_LIBS = ["torch_cpu"], ["torch_cpu", "torch_cuda", "cudart"]
else:
    ABI_FLAGS = []
    CPU_LIBS = CUDA_LIBS = None  # torch's defaults


def extensions():
    define = [compiler_flags.version_define(FULL_VERSION)]  # binary_info()'s version (library.cpp)
    # No -std flag: torch's BuildExtension adds the standard its headers need (C++17, or C++20 from 2.14).
    # The optimisation, visibility and no-contraction flags of this OS's compiler (prerast_meta/compiler_flags.py
    # says why each): the CPU's float arithmetic stays the CUDA kernels' (--fmad=false), with no fused
    # multiply-adds even where CFLAGS let the compiler use FMA instructions.
    platform_key = platforms.key()
    flags = compiler_flags.build_flags(platform_key)
    cxx = flags.cxx + define + ABI_FLAGS
    cpu = CppExtension("prerast._C", SOURCES, extra_compile_args={"cxx": cxx}, py_limited_api=True)
    exts = [cpu]
    if WITH_CUDA:
        cuda_cxx = cxx + ["-DPRERAST_CUDA_LIBRARY", "-DUSE_CUDA"]
        # Headers that torch's CUDA headers include but a partial toolkit may lack (cusparse.h, cublas_v2.h)
        # come from the nvidia-* wheels next to torch; searched after the toolkit's own (gcc and clang only: the
        # Windows toolkit installer has them all).
        if platform_key != "win32":
            for inc in build_env.nvidia_pip_include_dirs():
                cuda_cxx += ["-idirafter", inc]
        nvcc = flags.nvcc + build_env.gencode_flags(ARCHS)  # the version is the CPU library's alone
        exts.append(
            CUDAExtension(
                "prerast._C_cuda", CUDA_SOURCES, extra_compile_args={"cxx": cuda_cxx, "nvcc": nvcc}, py_limited_api=True
            )
        )
    # The plugin registers ops through the dispatcher and never touches Python's C API, so it needs neither
    # libtorch_python nor a per-Python build: one abi3 binary serves every CPython.
    for ext, libs in zip(exts, (CPU_LIBS, CUDA_LIBS)):
        ext.libraries = libs if libs is not None else [lib for lib in ext.libraries if lib != "torch_python"]
        ext.extra_link_args = list(flags.link)
    return exts


class BuildWithInfo(BuildExtension):
    """Writes _build_info.json beside the compiled plugin: what the binary was built for, and the size and SHA-256
    of each library, which the loader checks before it loads one. Each library compiles in a build folder of its
    own: both compile the same binding sources, whose objects would otherwise overwrite each other."""

    def build_extension(self, ext):
        shared = self.build_temp
        self.build_temp = os.path.join(shared, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared

    def run(self):
        super().run()
        out_dir = os.path.dirname(self.get_ext_fullpath("prerast._C"))
        nvcc = build_env.nvcc_version(CUDA_HOME) if WITH_CUDA else None
        info = build_info.make(torch, FULL_VERSION, WITH_CUDA, nvcc, ARCHS, ROOT, ABI)
        info["source_hash"] = sources.digest(ROOT)
        # A build from a copy of the sources (python -m prerast build-wheel) names the commit they came from.
        info["git_commit"] = info["git_commit"] or os.environ.get("PRERAST_SOURCE_COMMIT")
        build_info.write(
            out_dir,
            info,
            os.path.basename(self.get_ext_fullpath("prerast._C")),
            os.path.basename(self.get_ext_fullpath("prerast._C_cuda")) if WITH_CUDA else None,
        )


class BuildPyWithSources(build_py):
    """Ships the build inputs as prerast/_src, so that an installed prerast can build a wheel for another
    torch (`python -m prerast build-wheel`) or build its plugin at first use (PRERAST_BUILD_ON_MISMATCH=1)."""

    def run(self):
        super().run()
        if not self.dry_run:
            dest = os.path.join(self.build_lib, "prerast", "_src")
            shutil.rmtree(dest, ignore_errors=True)
            sources.copy_sources(ROOT, dest)


setup(
    name="prerast",
    version=FULL_VERSION,
    package_dir={"": "package", "prerast_meta": "prerast_meta"},
    packages=["prerast", "prerast_meta"],
    ext_modules=extensions(),
    cmdclass={
        "build_ext": BuildWithInfo.with_options(use_ninja=shutil.which("ninja") is not None),
        "build_py": BuildPyWithSources,
    },
    options={"bdist_wheel": {"py_limited_api": compat.PYTHON_TAG}},
)
