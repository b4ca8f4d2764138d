"""Builds prerast's compiled plugin against the torch installed in the build environment.

    pip wheel --no-build-isolation .          # CUDA build when torch has CUDA and a toolkit is found

Environment:
    CUDA_HOME                  CUDA toolkit to use (default: /usr/local/cuda, else where nvcc lives)
    PRERAST_CUDA_ARCH_LIST     GPU archs, e.g. "8.0;9.0+PTX" (falls back to TORCH_CUDA_ARCH_LIST, then to
                               every arch from 7.5 up that the installed torch was built for, plus PTX
                               of the newest)
    PRERAST_FORCE_CPU=1        build the CPU-only plugin even when CUDA is available
    PRERAST_NO_LOCAL_VERSION=1 leave the +pt<torch><cuda> local tag off the version
"""
import json
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _load_build_env():
    """ci/build_env.py (toolkit discovery shared with the wheel builder), loaded by path so that no other
    module of ci/ can shadow a real package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prerast_build_env", os.path.join(ROOT, "ci", "build_env.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_env = _load_build_env()

# torch guesses CUDA_HOME from the first nvcc on PATH, which may be a wrapper script outside the toolkit:
# settle it before torch.utils.cpp_extension is imported.
CUDA_HOME = build_env.find_cuda_home()
if CUDA_HOME:
    os.environ["CUDA_HOME"] = CUDA_HOME

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError:
    sys.exit("prerast: building needs torch in the build environment. Install the torch you will run with, "
             "then: pip wheel --no-build-isolation .")

SOURCES = [
    "csrc/bindings/library.cpp",
    "csrc/bindings/rasterize.cpp",
    "csrc/core/rasterize_cpu.cpp",
]
CUDA_SOURCES = [
    "csrc/core/rasterize_cuda.cu",
]


def base_version():
    text = open(os.path.join(ROOT, "package", "prerast", "_version.py")).read()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def use_cuda():
    if os.environ.get("PRERAST_FORCE_CPU") == "1":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


WITH_CUDA = use_cuda()
VERSION = base_version()
LOCAL_TAG = build_env.local_tag(torch.__version__, torch.version.cuda if WITH_CUDA else None)
FULL_VERSION = VERSION if os.environ.get("PRERAST_NO_LOCAL_VERSION") == "1" else f"{VERSION}+{LOCAL_TAG}"
ARCHS = build_env.arch_list(torch, CUDA_HOME) if WITH_CUDA else []


def extension():
    define = [f'-DPRERAST_VERSION="{FULL_VERSION}"']
    # No -std flag: torch's BuildExtension adds the standard its headers need (C++17, or C++20 from 2.14).
    cxx = ["-O3", "-fvisibility=hidden"] + define
    if not WITH_CUDA:
        ext = CppExtension("prerast._C", SOURCES, extra_compile_args={"cxx": cxx}, py_limited_api=True)
    else:
        cxx += ["-DPRERAST_WITH_CUDA"]
        # Headers that torch's CUDA headers include but a partial toolkit may lack (cusparse.h, cublas_v2.h)
        # come from the nvidia-* wheels next to torch; searched after the toolkit's own.
        for inc in build_env.nvidia_pip_include_dirs():
            cxx += ["-idirafter", inc]
        nvcc = ["-O3", "--fmad=false", "-DPRERAST_WITH_CUDA", "-Xcompiler", "-fvisibility=hidden"]
        nvcc += define + build_env.gencode_flags(ARCHS)
        ext = CUDAExtension("prerast._C", SOURCES + CUDA_SOURCES, extra_compile_args={"cxx": cxx, "nvcc": nvcc},
                            py_limited_api=True)
    # The plugin registers ops through the dispatcher and never touches Python's C API, so it needs neither
    # libtorch_python nor a per-Python build: one abi3 binary serves every CPython.
    ext.libraries = [lib for lib in ext.libraries if lib != "torch_python"]
    return ext


class BuildWithInfo(BuildExtension):
    """Writes _build_info.json beside the compiled plugin: what the binary was built for."""

    def run(self):
        super().run()
        out_dir = os.path.dirname(self.get_ext_fullpath("prerast._C"))
        info = build_env.build_info(torch, FULL_VERSION, WITH_CUDA, CUDA_HOME, ARCHS, ROOT)
        info["library"] = os.path.basename(self.get_ext_fullpath("prerast._C"))
        with open(os.path.join(out_dir, "_build_info.json"), "w") as f:
            json.dump(info, f, indent=2, sort_keys=True)


setup(
    name="prerast",
    version=FULL_VERSION,
    package_dir={"": "package"},
    packages=["prerast"],
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildWithInfo.with_options(use_ninja=shutil.which("ninja") is not None)},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
