"""The repair step's real command (`python -m ci repair WHEEL OUT`, cibuildwheel's repair-wheel-command) with the
real delocate and delvewheel, on wheels shaped like the plugin's, built here with LLVM and mingw:

- macOS: prerast/_C.abi3.so, an arm64 MH_BUNDLE linking @rpath/libc10.dylib, @rpath/libtorch.dylib and
  @rpath/libtorch_cpu.dylib with no LC_RPATH (as the real plugin does); the cell's torch is a package `torch`
  with those libraries in torch/lib, first on PYTHONPATH. Apple's tools are shims over LLVM's (macos_tool_shims).
- Windows: prerast/_C.pyd importing torch_cpu.dll, c10.dll and cudart64_12.dll (none of them anywhere the tool
  looks: torch and CUDA put them on the DLL path at run time).

Each must come out tagged exactly as it went in, with nothing of torch or CUDA grafted and the plugin still
naming torch's libraries; a library that is not torch's is grafted when the tool finds it, and stops the repair
when it does not."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import macos_tool_shims

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from prerast_meta import repair as policy  # noqa: E402

TORCH_DYLIBS = ["c10", "torch", "torch_cpu"]
TORCH_DLLS = ["torch_cpu", "c10", "cudart64_12"]
# What must never be grafted (an independent list: not the repair policy's).
TORCH_OR_CUDA = re.compile(r"(libtorch|libc10|torch_cpu|c10|cudart)", re.IGNORECASE)


def need(tools, apt, module):
    lacking = [t for t in tools if shutil.which(t) is None]
    if lacking:
        pytest.skip(f"{', '.join(lacking)} not installed: apt-get install -y {apt}")
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"{module} is not installed: python -m pip install -r ci/requirements-ci.txt")


def run(cmd, **kw):
    subprocess.run(cmd, check=True, capture_output=True, **kw)


def make_wheel(folder, plat, library, data):
    """A wheel as the build writes it: the package (delocate grafts into a package's folder: prerast/.dylibs), the
    plugin and a _build_info.json stamping it (prerast_meta/build_info.py)."""
    path = os.path.join(folder, f"prerast-0.1.0-py3-none-{plat}.whl")
    info = {
        "abi": "stable",
        "prerast_version": "0.1.0",
        "torch_version": "2.14.1",
        "cuda_version": None,
        "python_tag": "py3-none",
        "library": library,
        "libraries": {library: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}},
    }
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/__init__.py", "")
        z.writestr(f"prerast/{library}", data)
        z.writestr("prerast/_build_info.json", json.dumps(info, indent=2, sort_keys=True))
        z.writestr("prerast-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: prerast\nVersion: 0.1.0\n")
        z.writestr(
            "prerast-0.1.0.dist-info/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-{plat}\n",
        )
        z.writestr("prerast-0.1.0.dist-info/RECORD", "")
    return path


def repair(wheel, out, env):
    """`python -m ci repair WHEEL OUT` as cibuildwheel runs it; (exit status, output, the wheels in OUT)."""
    done = subprocess.run(
        [sys.executable, "-m", "ci", "repair", wheel, out],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    wheels = sorted(n for n in os.listdir(out) if n.endswith(".whl")) if os.path.isdir(out) else []
    return done.returncode, done.stdout + done.stderr, wheels


def unpacked(wheel, member, folder):
    """`member` extracted into folder, the wheel's files (no folders) and its _build_info.json."""
    with zipfile.ZipFile(wheel) as z:
        files = [n for n in z.namelist() if not n.endswith("/")]
        return z.extract(member, folder), files, json.loads(z.read("prerast/_build_info.json"))


def assert_stamped(path, info, name):
    data = open(path, "rb").read()
    assert info["libraries"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# --- macOS: delocate-wheel ------------------------------------------------------------------------------------


def dylib(folder, name, install_name):
    src = os.path.join(folder, name + ".c")
    with open(src, "w") as f:
        f.write(f"int {name}_f(void) {{ return 1; }}\n")
    out = os.path.join(folder, f"lib{name}.dylib")
    # -nostdlib: no macOS SDK here, and the stubs need no libSystem.
    run(
        [
            "clang-14",
            "-target",
            "arm64-apple-macos11",
            "-dynamiclib",
            "-fuse-ld=lld",
            "-nostdlib",
            "-install_name",
            install_name,
            src,
            "-o",
            out,
        ]
    )
    return out


def macos_wheel(folder, torch_lib, extra=()):
    """The plugin linking torch's stub libraries by @rpath (no LC_RPATH), and each (folder, name) of `extra`."""
    os.makedirs(folder, exist_ok=True)
    names = TORCH_DYLIBS + [name for _, name in extra]
    src = os.path.join(folder, "plugin.c")
    with open(src, "w") as f:
        f.write("".join(f"int {n}_f(void);\n" for n in names))
        f.write("int plugin(void) { return " + " + ".join(f"{n}_f()" for n in names) + "; }\n")
    plugin = os.path.join(folder, "_C.abi3.so")
    libs = ["-L", torch_lib] + [a for lib_dir, name in extra for a in ("-L", lib_dir)] + [f"-l{n}" for n in names]
    run(
        [
            "clang-14",
            "-target",
            "arm64-apple-macos11",
            "-bundle",
            "-undefined",
            "dynamic_lookup",
            "-fuse-ld=lld",
            "-nostdlib",
            src,
            *libs,
            "-o",
            plugin,
        ]
    )
    return make_wheel(folder, "macosx_11_0_arm64", "_C.abi3.so", open(plugin, "rb").read())


def load_commands(path):
    """The install names the Mach-O file at path links (llvm-otool -L)."""
    out = subprocess.run(["llvm-otool-14", "-L", path], check=True, capture_output=True, text=True).stdout
    return [line.split(" (compatibility")[0].strip() for line in out.splitlines()[1:]]


@pytest.fixture(scope="module")
def macos(tmp_path_factory):
    """The cell's stub torch (a package on PYTHONPATH) and the environment `python -m ci repair` runs in."""
    need(
        ["clang-14", "ld64.lld-14", "llvm-otool-14", "llvm-install-name-tool-14", "llvm-lipo-14"],
        "clang-14 lld-14 llvm-14",
        "delocate",
    )
    base = tmp_path_factory.mktemp("macos")
    torch_lib = base / "site" / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    (torch_lib.parent / "__init__.py").write_text("")
    for name in TORCH_DYLIBS:
        dylib(str(torch_lib), name, f"@rpath/lib{name}.dylib")
    shims = macos_tool_shims.write(str(base / "shims"))
    env = dict(os.environ, PATH=shims + os.pathsep + os.environ["PATH"], PYTHONPATH=str(base / "site"))
    for name in ("DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH"):  # the repair's own setting only
        env.pop(name, None)
    return {"base": base, "torch_lib": str(torch_lib), "env": env}


def test_delocate_leaves_torch_to_the_cells_torch(macos):
    wheel = macos_wheel(str(macos["base"] / "plain"), macos["torch_lib"])
    out = str(macos["base"] / "plain-out")
    rc, log, wheels = repair(wheel, out, macos["env"])
    assert rc == 0, log
    assert wheels == ["prerast-0.1.0-py3-none-macosx_11_0_arm64.whl"], log
    plugin, names, _ = unpacked(os.path.join(out, wheels[0]), "prerast/_C.abi3.so", str(macos["base"] / "plain-x"))
    assert not [n for n in names if ".dylibs/" in n], names  # nothing grafted: the plugin needs only torch
    assert load_commands(plugin) == [f"@rpath/lib{n}.dylib" for n in TORCH_DYLIBS]


def test_delocate_grafts_a_library_that_is_not_torchs(macos):
    vendor = str(macos["base"] / "vendor")  # as Homebrew's /opt/homebrew/lib: an absolute install name
    os.makedirs(vendor)
    dylib(vendor, "foo", os.path.join(vendor, "libfoo.dylib"))
    wheel = macos_wheel(str(macos["base"] / "graft"), macos["torch_lib"], [(vendor, "foo")])
    out = str(macos["base"] / "graft-out")
    rc, log, wheels = repair(wheel, out, macos["env"])
    assert rc == 0 and wheels == ["prerast-0.1.0-py3-none-macosx_11_0_arm64.whl"], log
    plugin, names, info = unpacked(os.path.join(out, wheels[0]), "prerast/_C.abi3.so", str(macos["base"] / "gx"))
    assert [n for n in names if "/.dylibs/" in n] == ["prerast/.dylibs/libfoo.dylib"]
    assert load_commands(plugin) == [f"@rpath/lib{n}.dylib" for n in TORCH_DYLIBS] + [
        "@loader_path/.dylibs/libfoo.dylib"
    ]
    assert_stamped(plugin, info, "_C.abi3.so")  # the rewritten plugin's stamp follows it


def test_delocate_stops_on_a_missing_library_that_is_not_torchs(macos):
    elsewhere = str(macos["base"] / "elsewhere")  # linked at build time, on no path at repair time
    os.makedirs(elsewhere)
    dylib(elsewhere, "bar", "@rpath/libbar.dylib")
    wheel = macos_wheel(str(macos["base"] / "missing"), macos["torch_lib"], [(elsewhere, "bar")])
    rc, log, wheels = repair(wheel, str(macos["base"] / "missing-out"), macos["env"])
    assert rc != 0 and wheels == [], log
    assert "@rpath/libbar.dylib not found" in log and "Could not find all dependencies" in log, log
    assert not re.search(r"lib(c10|torch|torch_cpu)\.dylib not found", log), log


def test_delocate_looks_for_torch_where_the_repairing_python_does(macos, tmp_path, monkeypatch):
    no_torch = str(tmp_path / "venv")
    run([sys.executable, "-m", "venv", "--without-pip", no_torch])
    python = os.path.join(no_torch, "bin", "python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    assert policy.torch_library_path(python) is None
    with pytest.raises(RuntimeError, match="has no torch with a lib folder: install the cell's torch"):
        policy.tool_env("delocate", python)
    monkeypatch.setenv("PYTHONPATH", str(macos["base"] / "site"))
    assert policy.torch_library_path(python) == macos["torch_lib"]
    # A fallback path already set is kept, after torch's.
    env = policy.tool_env("delocate", python, {"PATH": "/bin", "DYLD_FALLBACK_LIBRARY_PATH": "/opt/lib"})
    assert env["DYLD_FALLBACK_LIBRARY_PATH"] == macos["torch_lib"] + os.pathsep + "/opt/lib"
    assert "DYLD_FALLBACK_LIBRARY_PATH" not in policy.tool_env("delvewheel", python, {"PATH": "/bin"})


# --- Windows: delvewheel --------------------------------------------------------------------------------------


def dll(folder, name):
    src = os.path.join(folder, name + ".c")
    with open(src, "w") as f:
        f.write(f"__declspec(dllexport) int {name}_f(void) {{ return 1; }}\n")
    run(
        [
            "x86_64-w64-mingw32-gcc",
            "-shared",
            src,
            "-o",
            os.path.join(folder, name + ".dll"),
            f"-Wl,--out-implib,{os.path.join(folder, 'lib' + name + '.dll.a')}",
        ]
    )


def windows_wheel(folder, torch_lib, extra=()):
    os.makedirs(folder, exist_ok=True)
    names = TORCH_DLLS + [name for _, name in extra]
    src = os.path.join(folder, "plugin.c")
    with open(src, "w") as f:
        f.write("".join(f"int {n}_f(void);\n" for n in names))
        f.write("__declspec(dllexport) int PyInit__C(void) { return " + " + ".join(f"{n}_f()" for n in names) + "; }\n")
    plugin = os.path.join(folder, "_C.pyd")
    libs = ["-L", torch_lib] + [a for lib_dir, name in extra for a in ("-L", lib_dir)] + [f"-l{n}" for n in names]
    run(["x86_64-w64-mingw32-gcc", "-shared", src, *libs, "-o", plugin])
    return make_wheel(folder, "win_amd64", "_C.pyd", open(plugin, "rb").read())


def dll_imports(path):
    out = subprocess.run(["llvm-objdump-14", "-p", path], check=True, capture_output=True, text=True).stdout
    return re.findall(r"DLL Name: (\S+)", out)


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    need(["x86_64-w64-mingw32-gcc", "llvm-objdump-14"], "g++-mingw-w64-x86-64-posix llvm-14", "delvewheel")
    base = tmp_path_factory.mktemp("windows")
    torch_lib = base / "torch_lib"  # on no search path, as on the build machine: torch adds it at run time
    torch_lib.mkdir()
    for name in TORCH_DLLS:
        dll(str(torch_lib), name)
    return {"base": base, "torch_lib": str(torch_lib), "env": dict(os.environ)}


def test_delvewheel_excludes_torch_and_cuda(windows):
    wheel = windows_wheel(str(windows["base"] / "plain"), windows["torch_lib"])
    out = str(windows["base"] / "plain-out")
    rc, log, wheels = repair(wheel, out, windows["env"])
    assert rc == 0, log
    assert wheels == ["prerast-0.1.0-py3-none-win_amd64.whl"], log
    plugin, names, _ = unpacked(os.path.join(out, wheels[0]), "prerast/_C.pyd", str(windows["base"] / "plain-x"))
    assert not [n for n in names if n.startswith("prerast.libs/") and TORCH_OR_CUDA.search(n)], names
    assert not [n for n in names if n.endswith(".dll")], names  # nor anything else: mingw's runtime is Windows'
    assert {f"{n}.dll" for n in TORCH_DLLS} <= set(dll_imports(plugin))


def test_delvewheel_grafts_a_dll_that_is_not_torchs(windows):
    vendor = str(windows["base"] / "vendor")
    os.makedirs(vendor)
    dll(vendor, "foo")
    wheel = windows_wheel(str(windows["base"] / "graft"), windows["torch_lib"], [(vendor, "foo")])
    out = str(windows["base"] / "graft-out")
    env = dict(windows["env"], PATH=vendor + os.pathsep + os.environ["PATH"])  # delvewheel searches PATH
    rc, log, wheels = repair(wheel, out, env)
    assert rc == 0 and wheels == ["prerast-0.1.0-py3-none-win_amd64.whl"], log
    plugin, names, info = unpacked(os.path.join(out, wheels[0]), "prerast/_C.pyd", str(windows["base"] / "gx"))
    grafted = [n for n in names if n.startswith("prerast.libs/") and n.endswith(".dll")]
    assert [re.sub(r"-[0-9a-f]{32}\.dll$", ".dll", n) for n in grafted] == ["prerast.libs/foo.dll"], grafted
    imports = dll_imports(plugin)
    assert {f"{n}.dll" for n in TORCH_DLLS} <= set(imports)
    assert [i for i in imports if i.startswith("foo")] == [os.path.basename(grafted[0])]  # name-mangled
    assert_stamped(plugin, info, "_C.pyd")


def test_delvewheel_stops_on_a_missing_dll_that_is_not_torchs(windows):
    elsewhere = str(windows["base"] / "elsewhere")
    os.makedirs(elsewhere)
    dll(elsewhere, "bar")
    wheel = windows_wheel(str(windows["base"] / "missing"), windows["torch_lib"], [(elsewhere, "bar")])
    rc, log, wheels = repair(wheel, str(windows["base"] / "missing-out"), windows["env"])
    assert rc != 0 and wheels == [], log
    assert "Unable to find library: bar.dll" in log, log
    assert not re.search(r"Unable to find library: (torch_cpu|c10|cudart64_12)\.dll", log), log
