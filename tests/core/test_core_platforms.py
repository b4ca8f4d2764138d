"""The torch-free core (csrc/core) on every platform's compiler, with the same bits: tests/core/host/core_driver.cpp renders
a fixed scene through every CPU entry point (rasterize, interpolate with derivatives, 2D and cube textures
linear-mipmap-linear, antialias; forward and backward) and prints a checksum of each output. It is built here with
each toolchain found, with setup.py's optimisation and -ffp-contract=off, and run natively, under wine (Windows
x86-64, mingw-w64) or under qemu (Linux aarch64); every build must print exactly what the host g++ build prints.

The host g++ build (the reference) and clang run in the default suite (clang only where it is installed); the other
builds are marked `platforms` and run only when asked for, with `-m platforms`:

    apt-get install -y clang g++-mingw-w64-x86-64-posix wine64 g++-aarch64-linux-gnu qemu-user-static
    python -m pytest -q -m platforms tests/core/test_core_platforms.py

(clang's aarch64 build, run under qemu, stands in for Apple clang on macOS arm64: the same code generator.)

Each toolchain that is missing is skipped, naming the Debian package that provides it. Times measured on two cores
shared with other builds: compiling takes 20-40 s per toolchain (17-19 s of CPU time: five sources at -O3, compiled in
parallel), so the default suite spends some 45 s here; running takes 0.1 s natively, 1 s under qemu and 0.3 s under
wine once its prefix exists (creating it costs 7-22 s, once per run).
"""

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORE = os.path.join(ROOT, "csrc", "core")
# The CPU core's sources, as the CPU kernel library compiles them (prerast_meta/sources.py's rule), and the driver.
sys.path.insert(0, ROOT)
from prerast_meta import sources as _sources  # noqa: E402

CORE_SOURCES = [os.path.basename(rel) for rel in _sources.library_sources(ROOT, "kernels-cpu")]
DRIVER = os.path.join(ROOT, "tests", "core", "host", "core_driver.cpp")
# setup.py's CPU flags that change code generation (prerast_meta/compiler_flags.py's for Linux;
# test_sources_and_flags_are_setup_pys checks), C++17 as the oldest torch
# headers need, and every warning clang and gcc give with -Wall -Wextra, which the core has none of.
CXXFLAGS = ["-std=c++17", "-O3", "-ffp-contract=off", "-Wall", "-Wextra", "-I", CORE]

needs_source = pytest.mark.skipif(not os.path.isfile(os.path.join(CORE, "common.h")), reason="needs the source tree")


def wine_runner():
    # Debian's wine64 package puts the loader in /usr/lib/wine; the wine package adds /usr/bin/wine.
    for cand in (shutil.which("wine64"), "/usr/lib/wine/wine64", shutil.which("wine")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


CLANG_AARCH64 = "--target=aarch64-linux-gnu"

# name: (compiler, its Debian package, extra flags, link flags, runner, the runner's package, opt-in)
TOOLCHAINS = {
    "gcc-avx2-scalar": ("g++", "g++", ["-DPRERAST_NO_AVX2"], [], None, None, True),
    "gcc-portable": ("g++", "g++", ["-DPRERAST_PORTABLE"], [], None, None, True),
    "clang": ("clang++", "clang", [], [], None, None, False),
    "mingw-wine": (
        "x86_64-w64-mingw32-g++-posix",
        "g++-mingw-w64-x86-64-posix",
        [],
        ["-static"],
        "wine",
        "wine64",
        True,
    ),
    "aarch64-qemu": (
        "aarch64-linux-gnu-g++",
        "g++-aarch64-linux-gnu",
        [],
        ["-static"],
        "qemu-aarch64-static",
        "qemu-user-static",
        True,
    ),
    # clang's arm64 code generation, the nearest this machine gets to Apple clang on macOS arm64 (libc and
    # libstdc++ from the aarch64 cross toolchain).
    "clang-aarch64-qemu": (
        "clang++",
        "clang",
        [CLANG_AARCH64],
        ["-static"],
        "qemu-aarch64-static",
        "qemu-user-static",
        True,
    ),
}
# Toolchains that also need another one's files: clang's cross build takes the sysroot of g++-aarch64-linux-gnu.
ALSO_NEEDS = {"clang-aarch64-qemu": ("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")}


def build(cxx, flags, link, out_dir):
    """Compiles the driver and the core (one process per source), links; returns (exe, warnings, seconds)."""
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()

    def compile_one(src):
        obj = os.path.join(out_dir, os.path.basename(src) + ".o")
        r = subprocess.run([cxx, *CXXFLAGS, *flags, "-c", src, "-o", obj], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cxx} {src} failed:\n{r.stderr}"
        return obj, r.stderr

    sources = [DRIVER] + [os.path.join(CORE, s) for s in CORE_SOURCES]
    with ThreadPoolExecutor(max_workers=min(len(sources), os.cpu_count() or 1)) as pool:
        results = list(pool.map(compile_one, sources))
    exe = os.path.join(out_dir, "core_driver")
    r = subprocess.run(
        [cxx, *flags, *[o for o, _ in results], *link, "-o", exe], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, f"linking with {cxx} failed:\n{r.stderr}"
    if os.path.isfile(exe + ".exe"):  # mingw adds the suffix
        exe += ".exe"
    return exe, "".join(err for _, err in results) + r.stderr, time.perf_counter() - start


def run(cmd, env=None):
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"{cmd} exited with {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout.replace("\r\n", "\n"), time.perf_counter() - start  # Windows' text mode writes CRLF


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The host g++ build's output (the widest SIMD rasterizer the CPU runs: AVX-512, AVX2 or none) and its
    executable."""
    if not shutil.which("g++"):
        pytest.skip("needs g++ (Debian package g++)")
    exe, warnings, seconds = build("g++", [], [], str(tmp_path_factory.mktemp("gcc")))
    out, run_seconds = run([exe])
    print(f"\ngcc: compile {seconds:.1f} s, run {run_seconds:.2f} s")
    return out, warnings, exe


def checksums(out):
    return dict(re.findall(r"^checksum (\S+)\s+([0-9a-f]{16})", out, re.M))


@needs_source
def test_reference_renders_the_whole_pipeline_warning_free(reference):
    out, warnings, _ = reference
    assert not warnings, f"g++ -Wall -Wextra warns on the core:\n{warnings}"
    sums = checksums(out)
    assert len(sums) == 21 and len(set(sums.values())) == 21, out  # every output present, none empty or repeated
    # Every output has non-zero content: each stage of the pipeline, forward and backward, did something.
    for name, nonzero in re.findall(r"^checksum (\S+)\s+\S+\s+elements \d+ nonzero (\d+)", out, re.M):
        assert int(nonzero) > 0, name
    covered, blended = map(int, re.search(r"^covered (\d+) blended (\d+)", out, re.M).groups())
    assert 0.3 * 15200 < covered < 0.9 * 15200 and blended > 100, out  # 2 images of 76 x 100


@needs_source
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.platforms) if t[-1] else n for n, t in TOOLCHAINS.items()]
)
def test_same_bits_as_the_host_gcc_build(name, reference, tmp_path, request):
    cxx, package, flags, link, runner, runner_package, opt_in = TOOLCHAINS[name]
    if opt_in and "platforms" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a cross or emulated build (20-40 s each): run with -m platforms")
    for tool, tool_package in [(cxx, package)] + ([ALSO_NEEDS[name]] if name in ALSO_NEEDS else []):
        if not shutil.which(tool):
            pytest.skip(f"needs {tool} (Debian package {tool_package})")
    cmd, env = [], None
    if runner == "wine":
        wine = wine_runner()
        if not wine:
            pytest.skip(f"needs wine64 (Debian package {runner_package})")
        cmd = [wine]
        env = dict(os.environ, WINEDEBUG="-all", WINEPREFIX=str(tmp_path / "wineprefix"))
    elif runner:
        if not shutil.which(runner):
            pytest.skip(f"needs {runner} (Debian package {runner_package})")
        cmd = [runner]
    exe, warnings, seconds = build(cxx, flags, link, str(tmp_path / "build"))
    assert not warnings, f"{cxx} -Wall -Wextra warns on the core:\n{warnings}"
    out, run_seconds = run(cmd + [exe], env)
    print(f"\n{name}: compile {seconds:.1f} s, run {run_seconds:.2f} s")
    want = reference[0]
    assert checksums(out) == checksums(want), (
        "\n".join(
            f"{k}: {checksums(want)[k]} (host g++) != {v} ({name})"
            for k, v in checksums(out).items()
            if checksums(want).get(k) != v
        )
        or out
    )
    assert out == want  # the counts and sample values too


@needs_source
@pytest.mark.parametrize("path", ["avx2", "scalar"])
def test_narrower_simd_paths_give_the_same_bits(reference, path):
    """The host build again with its rasterizer capped by PRERAST_CPU_SIMD (cpu_simd.h); where the CPU lacks a
    wider path, this runs the reference's path once more."""
    out, _ = run([reference[2]], dict(os.environ, PRERAST_CPU_SIMD=path))
    assert checksums(out) == checksums(reference[0]) and out == reference[0]


@needs_source
@pytest.mark.platforms
def test_contraction_changes_the_bits_on_arm64(reference, tmp_path, request):
    """What -ffp-contract=off (compiler_flags' switch for gcc, clang and Apple clang) is for: clang's own default
    for C++, -ffp-contract=on (a * b + c fused within an expression), on arm64 where every core has FMA, gives other
    bits (measured: all 21 checksums change), so the same-bits tests above catch a build that loses the switch."""
    if "platforms" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a cross build run under qemu (20-40 s): run with -m platforms")
    for tool, package in (
        ("clang++", "clang"),
        ALSO_NEEDS["clang-aarch64-qemu"],
        ("qemu-aarch64-static", "qemu-user-static"),
    ):
        if not shutil.which(tool):
            pytest.skip(f"needs {tool} (Debian package {package})")
    exe, _, seconds = build("clang++", [CLANG_AARCH64, "-ffp-contract=on"], ["-static"], str(tmp_path / "build"))
    out, _ = run(["qemu-aarch64-static", exe])
    want = checksums(reference[0])
    changed = [k for k, v in checksums(out).items() if want.get(k) != v]
    print(f"\nclang aarch64 -ffp-contract=on: compile {seconds:.1f} s, {len(changed)} of {len(want)} checksums differ")
    assert len(checksums(out)) == len(want) and changed, out


@needs_source
def test_sources_and_flags_are_setup_pys():
    """The driver builds what setup.py builds, the way it does: the CPU core's sources and the flags that decide
    its arithmetic (the optimisation level, no contraction of float operations)."""
    text = open(os.path.join(ROOT, "setup.py")).read()
    assert re.search(r'^CPU_KERNEL_SOURCES = sources\.library_sources\(ROOT, "kernels-cpu"\)$', text, re.M), (
        "setup.py no longer takes the CPU kernel library's sources from prerast_meta/sources.py; the driver builds "
        "those"
    )
    assert len(CORE_SOURCES) >= 4 and all(name.endswith("_cpu.cpp") for name in CORE_SOURCES), CORE_SOURCES
    assert "compiler_flags.build_flags(" in text  # tests/builder/test_compiler_flags.py: setup.py builds with these
    sys.path.insert(0, ROOT)
    from prerast_meta import compiler_flags

    for compiler in compiler_flags.COMPILERS["linux"]:
        cxx = compiler_flags.flags("linux", compiler).cxx
        assert "-O3" in cxx and "-ffp-contract=off" in cxx, cxx
