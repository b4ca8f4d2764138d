"""The compiler and linker flags of prerast's plugin for each (operating system, compiler), chosen by one pure
function (flags) that setup.py calls with the build machine's platform and compiler; a test asks it for every
platform without being on one. Standard library only.

What every choice keeps: the CPU core's float arithmetic is the CUDA kernels' (nvcc --fmad=false), so no compiler
may contract a * b + c into a fused multiply-add, whatever instructions the target has:

- gcc and clang (Linux), Apple clang (macOS): -ffp-contract=off. clang's default for C++ is `on` since clang 14
  (contraction within one expression), and Apple's arm64 targets always have FMA, so it matters most there.
- MSVC (Windows): /fp:precise. Under /fp:precise, MSVC from Visual Studio 2022 (17.0) generates no floating-point
  contractions unless /fp:contract is also given (earlier versions could contract under /fp:precise); /fp:fast
  would turn them on. https://learn.microsoft.com/cpp/build/reference/fp-specify-floating-point-behavior and
  https://learn.microsoft.com/cpp/preprocessor/fp-contract ("In Visual Studio 2022 version 17.0 and later,
  fp_contract defaults to off"). x64 code is SSE2: float intermediates are not kept at a wider precision.

No flag names a language standard: torch's BuildExtension adds the one its headers need (-std=c++17, or c++20
from torch 2.14; /std:c++20 with MSVC) only where none was given, so a /std:c++17 here would break the build
against a torch whose headers need C++20. No flag asks for OpenMP: the CPU loops run on torch's intra-op thread
pool (at::parallel_for / the stable ABI's parallel_for), never on OpenMP of their own.
"""

import collections
import os

from prerast_meta import platforms

# cxx: the host compiler's flags (the CPU library, and the .cpp files of the CUDA library); nvcc: nvcc's own flags,
# the host compiler's behind -Xcompiler; link: the linker's.
Flags = collections.namedtuple("Flags", "cxx nvcc link")

# The compilers a build may use on each OS (platforms.key()'s names), the first being the default: a new OS names
# its compiler families in its platforms.PLATFORMS row.
COMPILERS = {key: p.compilers for key, p in platforms.PLATFORMS.items()}
GNU_STYLE = ("gcc", "clang", "apple-clang")  # take -O3, -f..., -W...; MSVC takes /O2, /fp:..., /EH...

# What turns off the contraction of a * b + c into a fused multiply-add, per compiler family (tests check it).
CONTRACTION_OFF = {
    "gcc": "-ffp-contract=off",
    "clang": "-ffp-contract=off",
    "apple-clang": "-ffp-contract=off",
    "msvc": "/fp:precise",
    "nvcc": "--fmad=false",
}


# nvcc's defines on every platform. CCCL_DISABLE_NVTX: CCCL (cub::DeviceScan) marks its calls with NVTX ranges
# wherever the toolkit has the nvtx3 headers (CUDA 12.8 and 13), which load libnvToolsExt at run time through
# dlopen/dlsym/dlclose: imports that a glibc >= 2.34 host versions GLIBC_2.34 (auditwheel: manylinux_2_34), for
# ranges prerast has no use for.
NVCC_DEFINES = ["-DCCCL_DISABLE_NVTX"]


def compiler_for(platform_key, cxx=None):
    """The compiler a build on this OS uses: MSVC on Windows (torch's BuildExtension supports no other there),
    Apple clang on macOS, and on Linux clang when $CXX names it, else gcc."""
    if platform_key not in COMPILERS:
        raise ValueError(f"prerast builds on {', '.join(COMPILERS)}, not on {platform_key!r}")
    if platform_key == "linux" and cxx and "clang" in os.path.basename(cxx.split()[0]):
        return "clang"
    return COMPILERS[platform_key][0]


def flags(platform_key, compiler, deployment_target=None):
    """Flags for building the plugin on platform_key ('linux', 'darwin', 'win32') with compiler (one of
    COMPILERS[platform_key]). deployment_target: macOS only, the oldest macOS to run on (MACOSX_DEPLOYMENT_TARGET,
    e.g. '11.0'), passed to compiler and linker as -mmacosx-version-min."""
    if compiler not in COMPILERS.get(platform_key, ()):
        raise ValueError(
            f"no flags for compiler {compiler!r} on {platform_key!r}: expected one of "
            f"{', '.join(COMPILERS.get(platform_key, ())) or 'nothing (unknown OS)'}"
        )
    # nvcc: no contraction in device code either, whatever the host compiler.
    nvcc = ["-O3", CONTRACTION_OFF["nvcc"], *NVCC_DEFINES]
    if compiler == "msvc":
        # /O2: cl's fastest (it has no /O3); /EHsc: C++ exceptions, which the bindings throw as errors for users
        # (torch's BuildExtension adds it too). No -fvisibility: a DLL exports only what is declared
        # __declspec(dllexport), and cl emits no debug information unless asked (/Zi), so no -g0 either.
        # /permissive- is not needed (csrc uses no alternative tokens or other MSVC-permissive constructs) and is
        # left to torch, whose headers it would also apply to.
        return Flags(
            cxx=["/O2", CONTRACTION_OFF["msvc"], "/EHsc"], nvcc=nvcc + ["-Xcompiler", CONTRACTION_OFF["msvc"]], link=[]
        )
    # -g0 after Python's own -g: debug info would triple the libraries' size in every wheel. -fvisibility=hidden:
    # the plugin's symbols stay its own (it exports only what torch's registration macros mark visible).
    cxx = ["-O3", "-g0", "-fvisibility=hidden", CONTRACTION_OFF[compiler]]
    nvcc += ["-Xcompiler", "-fvisibility=hidden"]
    if compiler == "apple-clang":
        # ld64 has no --exclude-libs, nor the need: macOS links libc++ from the system, never statically.
        version_min = [f"-mmacosx-version-min={deployment_target}"] if deployment_target else []
        return Flags(cxx=cxx + version_min, nvcc=nvcc, link=version_min)
    # GNU ld (and lld): whatever a toolchain links in statically (libstdc++_nonshared.a of gcc-toolset, or all of
    # libstdc++ where a compiler links it statically) stays private to the plugin: exported, those copies would be
    # mixed with the process's libstdc++ one symbol at a time, and crash (e.g. formatting an error message).
    return Flags(cxx=cxx, nvcc=nvcc, link=["-Wl,--exclude-libs,ALL"])


def version_define(version):
    """The define that gives the plugin its version: the characters' codes (-DPRERAST_VERSION_BYTES=48,46,49,...),
    which library.cpp makes a string of. A define holding quotes (-DPRERAST_VERSION="0.1.0") needs each command
    line's own escaping (a ninja file run through cmd.exe's rules on Windows loses them, and cl then sees 0.1.0 as
    tokens); digits and commas pass every shell, ninja file and compiler driver unchanged. Host compilers only:
    nvcc reads commas in -D as a list of macros."""
    codes = [ord(c) for c in version]
    if not codes or any(c < 32 or c > 126 for c in codes):
        raise ValueError(f"version {version!r}: expected printable ASCII characters")
    return "-DPRERAST_VERSION_BYTES=" + ",".join(map(str, codes))


def build_flags(platform_key, environ=None):
    """flags() for the machine setup.py runs on: its OS, the compiler $CXX names, $MACOSX_DEPLOYMENT_TARGET."""
    environ = os.environ if environ is None else environ
    return flags(
        platform_key, compiler_for(platform_key, environ.get("CXX")), environ.get("MACOSX_DEPLOYMENT_TARGET") or None
    )


def prefix_map(platform_key, compiler, maps):
    """Flags that write each folder of `maps` ({path: what to write instead}: the source folder as ".", torch's
    package folder as "torch") wherever a compiler would embed it (__FILE__ in an assertion's message, in ours or
    in torch's inline headers): the same commit built in two folders or virtualenvs gives the same objects. gcc
    and clang (Apple's too) take -ffile-prefix-map; nvcc passes it to its host compiler (device code sees the
    source paths nvcc is given, which kernel_build.py keeps relative). MSVC embeds no path without /Zi, but cl and
    link stamp the time of the build into each object and PE header: /Brepro writes a hash of the contents there
    instead (for cl, for nvcc's host compile through -Xcompiler, and for link)."""
    if compiler not in COMPILERS.get(platform_key, ()):
        raise ValueError(f"no flags for compiler {compiler!r} on {platform_key!r}")
    if compiler == "msvc":
        return Flags(cxx=["/Brepro"], nvcc=["-Xcompiler", "/Brepro"], link=["/Brepro"])
    flags = [f"-ffile-prefix-map={os.path.abspath(path)}={new}" for path, new in maps.items()]
    return Flags(cxx=flags, nvcc=[x for f in flags for x in ("-Xcompiler", f)], link=[])
