"""The Linux aarch64 CPU wheel, cross-built here (ci/builder/cross.py) and run under qemu-user with Debian's arm64 Python
and PyPI's torch 2.10.0 aarch64 build: every library in it is aarch64 code, its platform tag is the one its glibc
symbol versions allow, it imports only torch's stable C shims (each defined by torch 2.10's aarch64 libtorch_cpu),
and under qemu the CPU op tests pass and a rendered scene has the same bits as the x86-64 wheel's render.

The cross build and the qemu runs are marked `platforms` (downloads the first time, then minutes):

    apt-get install -y g++-aarch64-linux-gnu qemu-user-static
    python -m pytest -q -m platforms tests/builder/test_aarch64_wheel.py

PRERAST_AARCH64_WHEEL=path tests that wheel instead of building one. Measured on two shared cores: the cross build
20-75 s, the render under qemu 155 s, the op tests under qemu 350 s, the CUDA probe 45 s: about 10 minutes in all
(docs/platforms-core.md has the details).
"""

import json
import os
import re
import subprocess
import sys
import time
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from ci.builder import buildable, cross, wheel as wheels
from ci.builder.tools import ToolsMissing  # noqa: E402
from ci.repair import symbols  # noqa: E402

EM_AARCH64 = 183  # e_machine of an ELF file for aarch64 (x86-64 is 62)
# CPU op tests run under qemu: every op, forward and backward, against the NumPy references and finite
# differences; 121 tests, 6 minutes under qemu here (all of tests/core/ops would take some 50).
QEMU_TESTS = [
    "tests/core/ops/test_rasterize.py",
    "tests/core/ops/test_interpolate.py",
    "tests/core/ops/test_antialias.py",
    "tests/core/ops/test_texture_cube.py",
    "tests/core/ops/test_rasterize_grad.py",
    "tests/core/ops/test_texture_lod.py",
    "tests/core/ops/test_depth_peel.py",
]

platforms = pytest.mark.platforms


def test_cross_env_points_the_build_at_the_target():
    """The environment the one build route gives the cross build (prerast_meta.build_wheel with cross_vars)."""
    from prerast_meta import build_wheel

    p = cross.paths("/cache/aarch64")
    spec = build_wheel.BuildSpec(source=ROOT, out_dir="/out", python=sys.executable, env=cross.cross_vars(p))
    env = build_wheel.environment(spec, base={"CFLAGS": "-march=native", "PATH": "/usr/bin"})
    assert env["CXX"] == "aarch64-linux-gnu-g++" and env["LDSHARED"].startswith("aarch64-linux-gnu-g++ -shared")
    # torch 2.10.0's aarch64 libraries come first on the library path, and nothing may stay undefined.
    assert env["LDFLAGS"].split()[0] == "-L/cache/aarch64/site/torch/lib" and "-Wl,--no-undefined" in env["LDFLAGS"]
    assert env["_PYTHON_HOST_PLATFORM"] == "linux-aarch64" and env["PRERAST_FORCE_CPU"] == "1"
    assert "CFLAGS" not in env and env["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin"])
    # The torch it links against is the stable ABI's floor, the oldest torch the wheel serves.
    from prerast_meta import compat

    assert tuple(int(x) for x in cross.TORCH.split(".")[:2]) == compat.STABLE_FLOOR


def test_missing_toolchain_names_its_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolsMissing) as e:
        cross.check_tools()
    for program, package in cross.TOOLS.items():
        assert f"{program}: apt-get install {package}" in str(e.value)


def test_cache_is_outside_the_repository(monkeypatch):
    monkeypatch.delenv("PRERAST_PLATFORMS_CACHE", raising=False)
    assert cross.cache_dir() == os.path.expanduser("~/.cache/prerast-platforms/aarch64")
    monkeypatch.setenv("PRERAST_PLATFORMS_CACHE", "/tmp/elsewhere")
    assert cross.paths()["sysroot"] == "/tmp/elsewhere/aarch64/sysroot"


def elf_machine(data):
    """e_machine of an ELF image (little-endian, as both targets are), None for anything else."""
    if data[:4] != b"\x7fELF":
        return None
    return int.from_bytes(data[18:20], "little")


@pytest.fixture(scope="module")
def aarch64_wheel(tmp_path_factory, request):
    if "platforms" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a cross build and qemu runs (minutes): run with -m platforms")
    given = os.environ.get("PRERAST_AARCH64_WHEEL")
    if given:
        return given
    try:
        cross.check_tools()
    except ToolsMissing as e:
        pytest.skip(str(e))
    start = time.perf_counter()
    wheel = cross.build(str(tmp_path_factory.mktemp("aarch64")))
    print(f"\ncross build (fetch + compile + repair): {time.perf_counter() - start:.0f} s")
    return wheel


@platforms
def test_every_binary_in_the_wheel_is_aarch64(aarch64_wheel):
    found = {}
    with zipfile.ZipFile(aarch64_wheel) as z:
        for name in z.namelist():
            machine = elf_machine(z.read(name)[:20])
            if machine is not None:
                found[name] = machine
    assert "prerast/_C.abi3.so" in found, sorted(found)
    assert not any("_C_cuda" in n for n in found), "the aarch64 cell built here is the CPU library only"
    assert all(m == EM_AARCH64 for m in found.values()), {n: m for n, m in found.items() if m != EM_AARCH64}


@platforms
def test_no_x86_code_in_the_library(aarch64_wheel, tmp_path):
    """objdump decodes the library as aarch64 code, and the x86-64 disassembler refuses it."""
    with zipfile.ZipFile(aarch64_wheel) as z:
        lib = z.extract("prerast/_C.abi3.so", tmp_path)
    header = subprocess.run(["readelf", "-h", lib], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Machine:\s+AArch64", header), header
    assert re.search(r"Class:\s+ELF64", header), header
    sections = subprocess.run(["readelf", "-S", "-W", lib], capture_output=True, text=True, check=True).stdout
    assert ".text" in sections
    # x86's AVX2 rasterizer is built only for x86-64: none of its code (vector registers) is in this library.
    asm = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"\bfadd\s+[sv]\d", asm) and not re.search(r"%ymm|%xmm|vfmadd", asm)
    # Fused multiply-adds would break the bits the x86-64 build gives (-ffp-contract=off keeps them out; GCC
    # contracts by default on aarch64): the core's float arithmetic uses none.
    # fmadd/fmsub/fnmadd/fnmsub (scalar) and fmla/fmls (vector lanes).
    assert not re.search(r"^\s*[0-9a-f]+:\s+(fn?m(add|sub)|fml[as])\s", asm, re.M)


def glibc_floor(library):
    """The newest GLIBC_x.y version the library imports, as (x, y)."""
    versions = [
        tuple(int(v) for v in m.group(1).split("."))
        for _, version in symbols.undefined_symbols(library)
        if version
        for m in [re.fullmatch(r"GLIBC_([\d.]+)", version)]
        if m
    ]
    return max(v[:2] for v in versions)


@platforms
def test_platform_tag_is_the_one_its_glibc_symbols_allow(aarch64_wheel, tmp_path):
    py, abi, plats = wheels.wheel_tags(aarch64_wheel)
    assert (py, abi) == ("py3", "none")
    with zipfile.ZipFile(aarch64_wheel) as z:
        lib = z.extract("prerast/_C.abi3.so", tmp_path)
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        wheel_file = z.read(meta).decode()
    major, minor = glibc_floor(lib)
    assert (major, minor) >= (2, 17)  # manylinux's floor on aarch64
    assert plats == [f"manylinux_{major}_{minor}_aarch64"], (plats, (major, minor))
    assert re.findall(r"^Tag: (\S+)$", wheel_file, re.M) == [f"py3-none-{p}" for p in plats]
    assert "Root-Is-Purelib: false" in wheel_file


@platforms
def test_symbol_audit_passes_and_torch_2_10_defines_every_shim(aarch64_wheel):
    report = symbols.audit_wheel(aarch64_wheel)
    assert list(report) == ["_C.abi3.so"]
    kinds = report["_C.abi3.so"]
    assert not kinds.get("other"), kinds.get("other")
    shims = kinds["torch-shim"]
    assert len(shims) > 10
    lib = os.path.join(cross.paths()["torch_lib"], "libtorch_cpu.so")
    if not os.path.exists(lib):
        pytest.skip("torch 2.10.0's aarch64 libraries are not in the cache (python -m ci cross fetch)")
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    assert not set(shims) - defined, sorted(set(shims) - defined)


def qemu_python(wheel, args, timeout):
    cmd, env = cross.python_command(installed=cross.install(wheel))
    start = time.perf_counter()
    r = subprocess.run(cmd + args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    return r, time.perf_counter() - start


@platforms
def test_render_under_qemu_equals_the_x86_render_bit_for_bit(aarch64_wheel):
    script = os.path.join(ROOT, "tests", "support", "platform_render.py")
    native = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True, timeout=600)
    want = json.loads(native.stdout)
    r, seconds = qemu_python(aarch64_wheel, [script], timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout)
    print(f"\nrender under qemu: {seconds:.0f} s (torch {got['torch']}, {got['machine']})")
    assert got["machine"] == "aarch64" and got["torch"].startswith(cross.TORCH)
    assert want["machine"] == "x86_64"
    assert got["hashes"]["in.pos"] == want["hashes"]["in.pos"]  # the same scene on both
    assert got["hashes"] == want["hashes"], {
        k: (v, got["hashes"][k]) for k, v in want["hashes"].items() if got["hashes"][k] != v
    }
    assert got["nonzero"] == want["nonzero"] and all(n > 0 for n in got["nonzero"].values())


@platforms
def test_cpu_op_tests_pass_under_qemu(aarch64_wheel):
    r, seconds = qemu_python(
        aarch64_wheel, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=8", *QEMU_TESTS], timeout=2400
    )
    tail = r.stdout[-3000:] + r.stderr[-3000:]
    print(f"\nop tests under qemu: {seconds:.0f} s\n{r.stdout[-2500:]}")
    assert r.returncode == 0, tail
    passed = int(re.search(r"(\d+) passed", r.stdout).group(1))
    assert passed > 50 and "failed" not in r.stdout.splitlines()[-1], tail


@platforms
def test_cuda_library_cross_compile_probe(request):
    """nvcc -ccbin aarch64-linux-gnu-g++: how far the CUDA library's cross build gets on this machine. The CUDA
    sources compile to aarch64 objects with the x86-64 toolkit's headers; nvcc's own set-up for an aarch64 host
    looks for the toolkit's cross target folder, and the link needs aarch64 libcudart and libtorch_cuda."""
    if "platforms" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("runs nvcc twice (a minute): run with -m platforms")
    from prerast_meta import build_env

    home = build_env.find_cuda_home()
    if not home or not os.path.exists(os.path.join(home, "bin", "nvcc")):
        pytest.skip("needs a CUDA toolkit (CUDA_HOME)")
    try:
        cross.check_tools({"aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu"})
    except ToolsMissing as e:
        pytest.skip(str(e))
    result = cross.cuda_probe()
    steps = {s["step"]: s for s in result["steps"]}
    print("\n" + json.dumps(result, indent=2))
    target = steps["nvcc's target folder for this host compiler"]
    as_set_up = steps["compile as nvcc sets itself up"]
    # Without the cross target folder nvcc finds no cuda_runtime.h; with it, the compile goes through.
    assert as_set_up["ok"] == target["ok"] or as_set_up["ok"], as_set_up["output"]
    if not target["ok"]:
        assert "cuda_runtime.h" in as_set_up["output"]
    host_headers = steps["compile with the x86-64 toolkit's headers"]
    assert host_headers["ok"] and host_headers["output"].endswith("AArch64"), host_headers["output"]
    assert result["ok"] == all(s["ok"] for s in result["steps"][2:])


@platforms
def test_forced_install_on_x86_64_is_a_binary_mismatch(aarch64_wheel, tmp_path):
    """The aarch64 wheel's files on this x86-64 machine (pip install --no-deps of the wrong file): importing
    prerast raises BinaryMismatchError naming both machines, a Python exception and never a crash in dlopen."""
    env = dict(os.environ, PYTHONPATH=cross.install(aarch64_wheel))
    r = subprocess.run(
        [sys.executable, "-c", "import prerast"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert r.returncode == 1, (r.returncode, r.stderr)  # an uncaught exception, not a signal
    last = r.stderr.strip().splitlines()
    (error,) = [line for line in last if line.startswith("prerast.errors.BinaryMismatchError: ")]
    assert "_C.abi3.so" in error and "not a library for this machine" in error, error
    assert re.search(
        r"found:\s+a Linux AArch64 library \(ELF 64-bit little-endian\), but this Python runs on "
        r"Linux x86-64",
        r.stderr,
    ), r.stderr


# python -m ci build --cell <the aarch64 CPU cell>: the matrix's cell for this machine's cross build.
def cross_cell():
    from ci import matrix

    (cell,) = [c for c in matrix.load() if c.target.cross and not c.cuda]
    return cell


def test_matrix_lists_the_aarch64_cpu_cell_as_buildable_here():
    try:
        cross.check_tools()
    except ToolsMissing as e:
        pytest.skip(str(e))
    cell = cross_cell()
    out = subprocess.run(
        [sys.executable, "-m", "ci", "matrix", "--local"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=300,
    ).stdout
    (line,) = [line for line in out.splitlines() if line.startswith(cell.id + " ")]
    assert "aarch64" in line and line.endswith("-> buildable here"), line
    # Its CUDA cells and the other machines' are listed with the reason they are built in the workflow.
    for other in ("2.14.1+cu130-linux-aarch64", "2.14.1+cu130-windows-amd64", "2.14.1+cpu-macos-arm64"):
        (line,) = [line for line in out.splitlines() if line.startswith(other + " ")]
        assert "in the workflow" in line, line


def test_cross_cell_without_its_toolchain_names_the_packages(monkeypatch, capsys):
    from ci import __main__ as cli

    real = cross.shutil.which
    monkeypatch.setattr(cross.shutil, "which", lambda p: None if p.startswith(("aarch64", "qemu")) else real(p))
    ok, why = buildable.can_cross_build(cross_cell())
    assert not ok and "g++-aarch64-linux-gnu" in why and "qemu-user-static" in why
    assert cli.main(["build", "--cell", cross_cell().id]) == 2
    assert "g++-aarch64-linux-gnu" in capsys.readouterr().err


def test_build_cell_of_another_machine_goes_to_the_cross_build(monkeypatch, tmp_path):
    """`ci build --cell` takes the cross build for the aarch64 CPU cell, the native one for this machine's."""
    from ci import __main__ as cli
    from ci.builder import buildable, cells

    monkeypatch.setattr(buildable, "verdict", lambda cell, py=None: (True, ""))
    calls = []
    for name in ("build_cell", "build_cross_cell"):
        monkeypatch.setattr(
            cells,
            name,
            lambda cell, py, *a, _n=name, **k: (
                calls.append((_n, cell.id)) or {"cell": cell.id, "python": py, "status": "ok", "times": {}}
            ),
        )
    for cell_id in (cross_cell().id, "2.13.0+cpu"):
        cli.main(["build", "--cell", cell_id, "--out", str(tmp_path), "--work", str(tmp_path), "--no-cross-check"])
    assert calls == [("build_cross_cell", cross_cell().id), ("build_cell", "2.13.0+cpu")]


@platforms
def test_ci_build_cell_cross_builds_and_renders_the_x86_bits_under_qemu(tmp_path, request):
    """The README's command, end to end: the cell's wheel is aarch64 code, named as the matrix says (with the tag
    this toolchain's glibc allows), and its render under qemu has the x86-64 wheel's bits."""
    if "platforms" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a cross build and a qemu run (minutes): run with -m platforms")
    try:
        cross.check_tools()
    except ToolsMissing as e:
        pytest.skip(str(e))
    cell = cross_cell()
    started = time.perf_counter()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ci",
            "build",
            "--cell",
            cell.id,
            "--out",
            str(tmp_path / "out"),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3000,
    )
    print(f"\npython -m ci build --cell {cell.id}: {time.perf_counter() - started:.0f} s")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (result_file,) = (tmp_path / "out").glob("*/result.json")
    result = json.loads(result_file.read_text())
    assert result["status"] == "ok" and result["cell"] == cell.id
    name = os.path.basename(result["wheel"])
    assert name == cell.wheel_name(result["build_info"]["prerast_version"].split("+")[0], result["platform_tag"])
    assert result["platform_tag"].endswith("_aarch64")
    with zipfile.ZipFile(result["wheel"]) as z:
        machines = {n: elf_machine(z.read(n)[:20]) for n in z.namelist() if n.endswith(".so")}
    assert machines and set(machines.values()) == {EM_AARCH64}, machines
    native = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "support", "platform_render.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    assert result["smoke"]["hashes"] == json.loads(native.stdout)["hashes"]
    assert cell.id in r.stdout and "render under qemu" in r.stdout
