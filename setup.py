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
    PRERAST_PARTS              binding, kernels, or both (the default): the op library for this torch, the
                               torch-free kernel library (CPU, or with a toolkit the CUDA one), or a plugin
                               with both (python -m ci merge combines parts into one wheel)
    PRERAST_NO_LOCAL_VERSION=1 leave the local tag (+pt<torch><cuda> classic, +cu<major>/+cpu stable) off
"""

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))


# The import-safe half of the package (stdlib only; importing `prerast` itself would load its plugin). A PEP 517
# backend does not put this folder on sys.path, so it is put first: the build reads its own sources' copy.
sys.path.insert(0, ROOT)
from prerast_meta import build_env, build_info, compat, compiler_flags, kernel_build, platforms, sources  # noqa: E402
from prerast_meta.version import __version__ as VERSION  # noqa: E402

# torch guesses CUDA_HOME from the first nvcc on PATH, which may be a wrapper script outside the toolkit:
# settle it before torch.utils.cpp_extension is imported.
CUDA_HOME = build_env.find_cuda_home()
if CUDA_HOME:
    os.environ["CUDA_HOME"] = CUDA_HOME

# What this build makes (PRERAST_PARTS): the binding (the op library for the torch of this environment: a CPU part
# and, for a CUDA torch, a CUDA part), the kernel library (csrc/core, torch-free), or both (the default: a plugin
# that runs by itself, as the dev loop and `pip wheel .` build it). A kernels-only build imports no torch.
try:
    PARTS = compat.build_parts(os.environ.get("PRERAST_PARTS", ""))
except ValueError as e:
    sys.exit(f"prerast: {e}")
FORCE_CPU = os.environ.get("PRERAST_FORCE_CPU") == "1"

torch = None
if "binding" in PARTS:
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
    except ImportError:
        sys.exit(
            "prerast: building needs torch in the build environment. Install the torch you will run with, "
            "then: pip wheel --no-build-isolation ."
        )
    BuildExt = BuildExtension
else:
    BuildExt = kernel_build.KernelBuildExt

# The binding (its sources: csrc/bindings) and the kernel libraries (csrc/core): found by the per-folder rule of
# prerast_meta/sources.py.
BINDING_SOURCES = sources.library_sources(ROOT, "binding")
CPU_KERNEL_SOURCES = sources.library_sources(ROOT, "kernels-cpu")
CUDA_KERNEL_SOURCES = sources.library_sources(ROOT, "kernels-cuda")

if torch is not None:
    try:
        ABI = compat.abi_kind(torch.__version__, os.environ.get("PRERAST_ABI", ""))
    except ValueError as e:
        sys.exit(f"prerast: {e}")
    # The binding's CUDA part needs a CUDA torch and CUDA's headers (no nvcc: it compiles no device code): a
    # binding alone takes them from the nvidia-* wheel of torch's CUDA runtime where no toolkit is given; a build
    # with the kernels needs the toolkit anyway.
    CUDA_INCLUDE = build_env.cuda_include_dir(CUDA_HOME, from_wheels="kernels" not in PARTS)
    WITH_CUDA = not FORCE_CPU and torch.version.cuda is not None and CUDA_INCLUDE is not None
    CUDA_VERSION = torch.version.cuda if WITH_CUDA else None
else:
    ABI = None
    WITH_CUDA = not FORCE_CPU and CUDA_HOME is not None
    CUDA_VERSION = build_env.toolkit_version(CUDA_HOME) if WITH_CUDA else None
NVCC_VERSION = build_env.nvcc_version(CUDA_HOME) if WITH_CUDA and "kernels" in PARTS else None
# A kernels-only build with CUDA makes the CUDA kernel library alone: each kernel library is a part of its own.
CPU_KERNELS = "kernels" in PARTS and not ("binding" not in PARTS and WITH_CUDA)
CUDA_KERNELS = "kernels" in PARTS and WITH_CUDA
CUDA_MAJOR = compat.cuda_major(NVCC_VERSION or CUDA_VERSION) if WITH_CUDA else None
if PARTS == ("binding",):
    LOCAL_TAG = compat.binding_tag(torch.__version__, ABI)
elif "binding" in PARTS:
    LOCAL_TAG = compat.local_tag(torch.__version__, CUDA_VERSION, ABI)
else:
    LOCAL_TAG = compat.kernels_tag(CUDA_MAJOR if CUDA_KERNELS else None)
FULL_VERSION = (
    VERSION if os.environ.get("PRERAST_NO_LOCAL_VERSION") == "1" or not LOCAL_TAG else f"{VERSION}+{LOCAL_TAG}"
)
ARCHS = build_env.arch_list(torch, CUDA_HOME) if CUDA_KERNELS else []
if ABI == "stable":
    # Only torch's stable C shims are imported (libtorch_cpu and, for the CUDA part, libtorch_cuda).
    ABI_FLAGS = ["-DPRERAST_STABLE_ABI", f"-DTORCH_TARGET_VERSION={compat.STABLE_TARGET_VERSION}"]
    CPU_LIBS, CUDA_LIBS = ["torch_cpu"], ["torch_cpu", "torch_cuda"]
else:
    ABI_FLAGS = []
    CPU_LIBS, CUDA_LIBS = None, ["c10_cuda"]  # torch's defaults, and c10's CUDA streams for the CUDA part


def binding_extensions(flags):
    define = [compiler_flags.version_define(FULL_VERSION)]  # binary_info()'s version (library.cpp)
    # No -std flag: torch's BuildExtension adds the standard its headers need (C++17, or C++20 from 2.14).
    cxx = flags.cxx + define + ABI_FLAGS
    exts = [CppExtension("prerast._C", BINDING_SOURCES, extra_compile_args={"cxx": cxx}, py_limited_api=True)]
    if WITH_CUDA:
        # The CUDA part calls no CUDA function of its own (the kernel library does): it needs CUDA's headers for
        # torch's stream types, and links torch's CUDA library, whatever its CUDA major. Headers a partial toolkit
        # lacks come from the nvidia-* wheels next to torch, searched after the toolkit's own (gcc and clang only:
        # the Windows toolkit installer has them all).
        cuda_cxx = cxx + ["-DPRERAST_CUDA_LIBRARY", "-DUSE_CUDA"]
        if platforms.key() != "win32":
            for inc in build_env.nvidia_pip_include_dirs():
                cuda_cxx += ["-idirafter", inc]
        cuda = CppExtension(
            "prerast._C_cuda", BINDING_SOURCES, extra_compile_args={"cxx": cuda_cxx}, py_limited_api=True
        )
        cuda.include_dirs = include_paths() + [CUDA_INCLUDE]
        exts.append(cuda)
    # The plugin registers ops through the dispatcher and never touches Python's C API, so it needs neither
    # libtorch_python nor a per-Python build: one binary serves every CPython (the wheel is py3-none: PyWheel).
    # py_limited_api only names the files (_C.abi3.so; _C.pyd on Windows) as the loader and every published
    # _build_info.json know them: they are opened by path, never imported, so the suffix means nothing to Python.
    for ext, libs in zip(exts, (CPU_LIBS, CUDA_LIBS)):
        default = [lib for lib in ext.libraries if lib != "torch_python"]
        ext.libraries = libs if ABI == "stable" else default + (libs or [])
        ext.extra_link_args = list(flags.link)
    return exts


def kernel_extensions(flags):
    """The torch-free kernel libraries (prerast_meta/kernel_build.py): their float arithmetic is the same on the
    CPU and the GPU (no contraction: compiler_flags.py says why)."""
    exts = []
    if CPU_KERNELS:
        exts.append(
            kernel_build.KernelExtension(kernel_build.CPU_NAME, CPU_KERNEL_SOURCES, flags.cxx, link_flags=flags.link)
        )
    if CUDA_KERNELS:
        nvcc = flags.nvcc + build_env.gencode_flags(ARCHS)
        exts.append(
            kernel_build.KernelExtension(
                kernel_build.cuda_name(CUDA_MAJOR),
                CUDA_KERNEL_SOURCES,
                flags.cxx,
                nvcc,
                CUDA_HOME,
                flags.link,
            )
        )
    return exts


def extensions():
    # The optimisation, visibility and no-contraction flags of this OS's compiler (prerast_meta/compiler_flags.py
    # says why each).
    flags = compiler_flags.build_flags(platforms.key())
    # The source folder and torch's written as "." and "torch" in the objects: the same commit built in any folder
    # or virtualenv gives the same libraries.
    maps = {ROOT: "."} if torch is None else {ROOT: ".", os.path.dirname(torch.__file__): "torch"}
    compiler = compiler_flags.compiler_for(platforms.key(), os.environ.get("CXX"))
    mapped = compiler_flags.prefix_map(platforms.key(), compiler, maps)
    flags = compiler_flags.Flags(*(a + b for a, b in zip(flags, mapped)))
    return (binding_extensions(flags) if "binding" in PARTS else []) + kernel_extensions(flags)


class BuildWithInfo(BuildExt):
    """Writes _build_info.json beside the compiled plugin: what the binary was built for, and the size and SHA-256
    of each library, which the loader checks before it loads one. Each library compiles in a build folder of its
    own: both binding parts compile the same sources, whose objects would otherwise overwrite each other. Kernel
    libraries are compiled by prerast_meta/kernel_build.py, without torch's flags."""

    def build_extension(self, ext):
        shared = self.build_temp
        self.build_temp = os.path.join(shared, ext.name)
        try:
            if isinstance(ext, kernel_build.KernelExtension):
                kernel_build.build_kernel_library(self, ext)
            else:
                kernel_build.drop_run_paths(self.compiler)  # torch loaded its libraries: no run path needed
                super().build_extension(ext)
        finally:
            self.build_temp = shared

    def file_of(self, name):
        return os.path.basename(self.get_ext_fullpath(name))

    def run(self):
        super().run()
        out_dir = os.path.dirname(self.get_ext_fullpath(kernel_build.CPU_NAME))
        kernels = {}
        if CPU_KERNELS:
            kernels["cpu"] = build_info.kernel_entry(self.file_of(kernel_build.CPU_NAME), None, None, [])
        if CUDA_KERNELS:
            kernels[f"cu{CUDA_MAJOR}"] = build_info.kernel_entry(
                self.file_of(kernel_build.cuda_name(CUDA_MAJOR)),
                build_env.toolkit_version(CUDA_HOME),
                NVCC_VERSION,
                ARCHS,
            )
        info = build_info.make(torch, FULL_VERSION, ROOT, ABI, CUDA_VERSION if "binding" in PARTS else None)
        info["source_hash"] = sources.digest(ROOT)
        # A build from a copy of the sources (python -m prerast build-wheel) names the commit they came from.
        info["git_commit"] = info["git_commit"] or os.environ.get("PRERAST_SOURCE_COMMIT")
        build_info.write(
            out_dir,
            info,
            self.file_of("prerast._C") if "binding" in PARTS else None,
            self.file_of("prerast._C_cuda") if "binding" in PARTS and WITH_CUDA else None,
            kernels,
        )


class PyWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: its libraries use no Python C API (python -m ci symbols checks), so
    every CPython from Requires-Python on takes it, the free-threaded ones too (they take no abi3 wheel). The
    platform tag stays bdist_wheel's (the repair turns linux_* into manylinux_*)."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        python, abi = compat.WHEEL_TAG.split("-")
        return python, abi, plat


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
        "build_ext": BuildWithInfo.with_options(use_ninja=shutil.which("ninja") is not None)
        if torch
        else BuildWithInfo,
        "build_py": BuildPyWithSources,
        "bdist_wheel": PyWheel,
    },
)
