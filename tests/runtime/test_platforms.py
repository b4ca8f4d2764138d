"""The runtime's per-OS facts (prerast_meta.platforms): library file names, default cache folders, fix commands,
and binaries of another OS or architecture refused with both platforms named. The OS is faked (sys.platform, the
running key) where it must be; the foreign binaries are small headers crafted from the formats' specifications,
and the installed-package cases are real copies imported in a child process."""

import importlib.machinery
import json
import os
import struct
import sys
import sysconfig

import pytest

from installs import IMPORT_REPORT, copy_package, libraries, mismatched_copy_with_cache, restamp, run_python
from prerast import _cache, _loader
from prerast_meta import build_info, integrity, platforms

LINUX_X64 = ("ELF", (2, 1, 62))
LINUX_ARM = ("ELF", (2, 1, 183))
MAC_ARM = ("Mach-O", "arm64")
MAC_X64 = ("Mach-O", "x86-64")
WIN_X64 = ("PE", "x86-64")
WIN_ARM = ("PE", "arm64")


def elf(machine, cls=2, data=1):
    """The first 64 bytes of an ELF shared object (e_ident, e_type ET_DYN, e_machine)."""
    order = "<" if data == 1 else ">"
    return b"\x7fELF" + bytes([cls, data, 1]) + bytes(9) + struct.pack(order + "HH", 3, machine) + bytes(44)


def macho(cputype, magic=b"\xcf\xfa\xed\xfe"):
    """A 64-bit little-endian mach_header_64: magic, cputype, cpusubtype, filetype MH_DYLIB (6)."""
    return magic + struct.pack("<iiI", cputype, 0, 6) + bytes(16)


def fat(*cputypes):
    """A universal binary's fat_header and fat_arch entries (big-endian)."""
    return (
        b"\xca\xfe\xba\xbe"
        + struct.pack(">I", len(cputypes))
        + b"".join(struct.pack(">iiIII", c, 0, 4096 * (i + 1), 4096, 12) for i, c in enumerate(cputypes))
    )


def pe(machine, dll=True, at=0x80):
    """A DOS stub whose e_lfanew points at a PE signature and IMAGE_FILE_HEADER (Machine, Characteristics)."""
    stub = bytearray(b"MZ" + bytes(at - 2))
    struct.pack_into("<I", stub, 0x3C, at)
    header = b"PE\0\0" + struct.pack("<HHIIIHH", machine, 6, 0, 0, 0, 0xF0, 0x2022 if dll else 0x0022)
    return bytes(stub) + header + bytes(64)


# Library file names and cache folders per OS.


@pytest.mark.parametrize(
    "system,cpu,cuda",
    [
        ("linux", "_C.abi3.so", "_C_cuda.abi3.so"),
        ("darwin", "_C.abi3.so", "_C_cuda.abi3.so"),
        ("win32", "_C.pyd", "_C_cuda.pyd"),
    ],
)
def test_library_names_per_os(system, cpu, cuda):
    assert platforms.library_names(system) == [cpu, cuda]
    assert platforms.library_glob(system) == "_C*" + os.path.splitext(cpu)[1]


@pytest.mark.parametrize(
    "system,ext_suffix,suffixes",
    [
        ("linux", ".cpython-311-x86_64-linux-gnu.so", [".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ".so"]),
        ("darwin", ".cpython-311-darwin.so", [".cpython-311-darwin.so", ".abi3.so", ".so"]),
        ("win32", ".cp311-win_amd64.pyd", [".cp311-win_amd64.pyd", ".pyd"]),
    ],
)
def test_library_names_are_what_setuptools_builds_and_python_imports(monkeypatch, system, ext_suffix, suffixes):
    """setuptools' own abi3 suffix for each OS's EXT_SUFFIX (a 3.11 interpreter: no SOABI_PLATFORM), and the
    interpreter of that OS takes the file name (its EXTENSION_SUFFIXES)."""
    from setuptools.command import build_ext

    values = {
        "EXT_SUFFIX": ext_suffix,
        "HAVE_DYNAMIC_LOADING": 1,
        "SOABI_PLATFORM": None,
        "Py_GIL_DISABLED": 0,
        "DYNLOADFILE": "dynload_win.o" if system == "win32" else "dynload_shlib.o",
    }
    monkeypatch.setattr(build_ext, "get_config_var", values.get)
    assert "_C" + build_ext.get_abi3_suffix() == platforms.library_name("_C", system)
    assert any(platforms.library_name("_C", system).endswith(s) for s in suffixes)


def test_this_interpreter_imports_its_library_name():
    assert platforms.current().library_suffix in importlib.machinery.EXTENSION_SUFFIXES
    assert sysconfig.get_config_var("EXT_SUFFIX").endswith(platforms.current().library_ext)


def test_cache_folders_per_os(tmp_path):
    home = str(tmp_path / "home")
    assert platforms.default_cache_dir("linux", {}, home) == os.path.join(home, ".cache", "prerast")
    assert platforms.default_cache_dir("linux", {"XDG_CACHE_HOME": "/x"}, home) == os.path.join("/x", "prerast")
    assert platforms.default_cache_dir("darwin", {"XDG_CACHE_HOME": "/x"}, home) == os.path.join(
        home, "Library", "Caches", "prerast"
    )
    assert platforms.default_cache_dir("win32", {"LOCALAPPDATA": "C:/Users/u/AppData/Local"}, home) == os.path.join(
        "C:/Users/u/AppData/Local", "prerast", "Cache"
    )
    assert platforms.default_cache_dir("win32", {}, home) == os.path.join(home, "AppData", "Local", "prerast", "Cache")


@pytest.mark.parametrize(
    "system,under",
    [("linux", "XDG/prerast"), ("darwin", "home/Library/Caches/prerast"), ("win32", "LOCALAPPDATA/prerast/Cache")],
)
def test_cache_dir_follows_the_os(monkeypatch, tmp_path, system, under):
    monkeypatch.delenv(_cache.ENV_DIR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "XDG"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "LOCALAPPDATA"))
    monkeypatch.setattr(sys, "platform", system)
    assert _cache.cache_dir() == os.path.join(str(tmp_path), *under.split("/"))
    monkeypatch.setenv(_cache.ENV_DIR, str(tmp_path / "mine"))
    assert _cache.cache_dir() == str(tmp_path / "mine")


def test_trust_check_is_posix_only(monkeypatch, tmp_path):
    """Windows' st_mode reports no group or others bits: its folders are not refused on them, and no pwd lookup
    (Unix only) happens."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    assert "writable by group and others" in _cache.untrusted(str(folder))[0]
    monkeypatch.setattr(sys, "platform", "win32")
    assert _cache.untrusted(str(folder)) is None
    monkeypatch.setitem(sys.modules, "pwd", None)  # import pwd raises ImportError, as on Windows
    assert _cache._user(12345) == "12345"


# Fix commands per OS.


def test_fix_commands_per_os(monkeypatch):
    assert platforms.set_env("PRERAST_BUILD_ON_MISMATCH", system="linux") == "export PRERAST_BUILD_ON_MISMATCH=1"
    assert platforms.set_env("PRERAST_BUILD_ON_MISMATCH", system="darwin") == "export PRERAST_BUILD_ON_MISMATCH=1"
    assert platforms.set_env("V", system="win32") == "set V=1"
    assert platforms.set_env("V", system="win32", shell="powershell") == '$env:V = "1"'
    assert platforms.remove_folder("C:\\c\\e", "win32") == 'rmdir /s /q "C:\\c\\e"'
    assert platforms.remove_folder("/c/e", "linux") == "rm -rf '/c/e'"
    monkeypatch.delenv("PRERAST_BUILD_ON_MISMATCH", raising=False)
    monkeypatch.setattr(sys, "platform", "win32")
    text = _loader._ways_out("no build")
    assert "set PRERAST_BUILD_ON_MISMATCH=1" in text and '$env:PRERAST_BUILD_ON_MISMATCH = "1"' in text
    assert "export" not in text
    monkeypatch.setattr(sys, "platform", "linux")
    text = _loader._ways_out("no build")
    assert "export PRERAST_BUILD_ON_MISMATCH=1" in text and "$env:" not in text


@pytest.mark.parametrize(
    "system,set_line,remove_line",
    [
        ("win32", "set PRERAST_BUILD_ON_MISMATCH=1", 'rmdir /s /q "C:\\cache\\entry"'),
        ("linux", "export PRERAST_BUILD_ON_MISMATCH=1", "rm -rf 'C:\\cache\\entry'"),
    ],
)
def test_doctor_fixes_per_os(monkeypatch, system, set_line, remove_line):
    from prerast import _doctor

    monkeypatch.setattr(sys, "platform", system)
    report = {
        "running": _loader.running(),
        "load_probe": {},
        "plugin": {"loaded": False},
        "gpus": [],
        "libraries": [{"role": "cache", "ok": False, "entry": "C:\\cache\\entry"}],
        "source_build": {"cache_dir": "C:\\cache"},
    }
    found = _doctor.fixes(report)
    assert any(line.startswith(set_line + " ") for line in found), found
    assert any(line.startswith(remove_line + " ") for line in found), found


# Binaries of each OS and architecture, judged against each running platform.

CASES = [  # (header, what the message names it, the running platforms it loads into)
    (elf(62), "a Linux x86-64 library", [LINUX_X64]),
    (elf(183), "a Linux AArch64 library", [LINUX_ARM]),
    (elf(62, cls=1), "32-bit", []),
    (macho(0x0100000C), "a macOS arm64 library", [MAC_ARM]),
    (macho(0x01000007), "a macOS x86-64 library", [MAC_X64]),
    (fat(0x01000007, 0x0100000C), "a universal macOS library (Mach-O: x86-64, arm64)", [MAC_ARM, MAC_X64]),
    (pe(0x8664), "a Windows x86-64 DLL", [WIN_X64]),
    (pe(0xAA64), "a Windows arm64 DLL", [WIN_ARM]),
    (pe(0x8664, dll=False, at=0x100), "a Windows x86-64 executable", [WIN_X64]),
]
RUNNING = {
    LINUX_X64: "Linux x86-64",
    LINUX_ARM: "Linux AArch64",
    MAC_ARM: "macOS arm64",
    MAC_X64: "macOS x86-64",
    WIN_X64: "Windows x86-64",
    WIN_ARM: "Windows arm64",
}


@pytest.mark.parametrize("head,named,loads_into", CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("running", list(RUNNING), ids=list(RUNNING.values()))
def test_foreign_binaries_name_both_platforms(head, named, loads_into, running):
    why = integrity.foreign(head, running=running)
    if running in loads_into:
        assert why is None
    else:
        assert named in why and f"this Python runs on {RUNNING[running]}" in why, why


def test_unknown_or_cut_short_headers_are_named():
    assert "not an ELF library (first bytes 23 21" in integrity.foreign(b"#!/bin/sh\n", running=LINUX_X64)
    assert "not a PE library" in integrity.foreign(b"#!/bin/sh\n", running=WIN_X64)
    assert "empty" in integrity.foreign(b"", running=WIN_X64)
    assert "PE" in integrity.foreign(pe(0x8664)[:0x50], running=WIN_X64)  # its header is past what was read
    assert "Mach-O" in integrity.foreign(b"\xcf\xfa\xed\xfe", running=MAC_ARM)
    java = b"\xca\xfe\xba\xbe" + struct.pack(">I", 0x34) + bytes(56)  # a class file shares the fat magic
    assert "not a Mach-O library" in integrity.foreign(java, running=MAC_ARM)


def test_running_platform_follows_the_os(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(platforms._platform, "machine", lambda: "AMD64")
    assert integrity.running_binary() == WIN_X64
    assert integrity.foreign(pe(0x8664)) is None and "Windows arm64 DLL" in integrity.foreign(pe(0xAA64))
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platforms._platform, "machine", lambda: "arm64")
    assert integrity.running_binary() == MAC_ARM and platforms.describe_running() == "macOS arm64"
    assert "a Linux x86-64 library" in integrity.foreign(elf(62)) and integrity.foreign(macho(0x0100000C)) is None


def test_build_info_naming_another_os_is_refused(tmp_path, monkeypatch):
    stamp = {"size": 1, "sha256": "0" * 64}

    def metadata(ext):
        names = {"library": f"_C{ext}", "kernel": f"_kernels_cpu{ext}"}
        for name in names.values():
            (tmp_path / name).write_bytes(b"x")
        return {
            "library": names["library"],
            "cuda_library": None,
            "kernels": {"cpu": {"library": names["kernel"]}},
            "libraries": {name: stamp for name in names.values()},
        }

    (tmp_path / build_info.INFO_FILE).write_text(json.dumps(metadata(".pyd")))
    found, why = build_info.read(str(tmp_path))
    assert found is None and "_C.pyd is the file name of a Windows library" in why and "Linux" in why
    monkeypatch.setattr(sys, "platform", "win32")
    assert build_info.read(str(tmp_path))[0] is not None  # the same metadata is right on Windows
    (tmp_path / build_info.INFO_FILE).write_text(json.dumps(metadata(".abi3.so")))
    found, why = build_info.read(str(tmp_path))
    assert found is None and "Linux or macOS library" in why and "runs on Windows" in why


# A package of another platform installed by force, imported for real.


def import_copy(path):
    out = run_python(["-c", IMPORT_REPORT, str(path)], path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    platforms.current().key != "linux" or platforms.machine() != "x86-64",
    reason="the foreign headers below are foreign to Linux x86-64",
)
@pytest.mark.parametrize(
    "head,named",
    [
        (elf(183), "a Linux AArch64 library"),
        (macho(0x0100000C), "a macOS arm64 library"),
        (pe(0x8664), "a Windows x86-64 DLL"),
    ],
    ids=["linux-aarch64", "macos-arm64", "windows-x86-64"],
)
def test_forced_install_of_another_platform_is_a_mismatch_error(tmp_path, head, named):
    """The library has the size and hash its metadata stamps (a whole wheel of that platform), yet is refused
    before the dynamic loader sees it, naming what it is and what runs here."""
    path = copy_package(tmp_path)
    pkg = os.path.join(path, "prerast")
    lib = libraries(pkg)[0]
    with open(lib, "wb") as f:
        f.write(head + bytes(8192))
    restamp(pkg)
    result = import_copy(path)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert lib in result["message"] and named in result["message"], result["message"]
    assert "this Python runs on Linux x86-64" in result["message"]


def test_forced_install_of_a_windows_wheel_is_a_mismatch_error(tmp_path):
    """A Windows wheel's files (_C.pyd and metadata naming it), over the package: refused with both named."""
    path = copy_package(tmp_path)
    pkg = os.path.join(path, "prerast")
    for lib in libraries(pkg):
        os.remove(lib)
    for name in ("_C.pyd", "_kernels_cpu.pyd"):
        with open(os.path.join(pkg, name), "wb") as f:
            f.write(pe(0x8664))
    info_path = os.path.join(pkg, build_info.INFO_FILE)
    with open(info_path) as f:
        info = json.load(f)
    info.update(
        library="_C.pyd",
        cuda_library=None,
        kernels={"cpu": {"library": "_kernels_cpu.pyd"}},
        bindings=[],
        libraries={"_C.pyd": None, "_kernels_cpu.pyd": None},
    )
    with open(info_path, "w") as f:
        json.dump(info, f)
    restamp(pkg)
    result = import_copy(path)
    assert result["error"] == "BinaryMismatchError", result
    assert "_C.pyd is the file name of a Windows library" in result["message"]
    assert f"runs on {platforms.describe_running()}" in result["message"]
    os.remove(info_path)  # the metadata lost too: the library itself is named by its header
    result = import_copy(path)
    assert result["error"] == "BinaryMismatchError" and "a Windows x86-64 DLL" in result["message"], result


@pytest.mark.skipif(
    platforms.current().key != "linux" or platforms.machine() != "x86-64",
    reason="the header below is foreign to Linux x86-64",
)
def test_cache_copied_from_another_machine_is_a_mismatch_error(tmp_path):
    """A build cache copied from an aarch64 machine (same torch, so the same key): its entry is refused with both
    platforms and the entry to delete named, and nothing of it is mapped."""
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    lib = libraries(entry)[0]
    with open(lib, "wb") as f:
        f.write(elf(183) + bytes(8192))
    restamp(entry)
    out = run_python(["-c", IMPORT_REPORT, cache], path, PRERAST_CACHE_DIR=cache)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == [], result
    assert (
        "a Linux AArch64 library (ELF 64-bit little-endian), but this Python runs on Linux x86-64" in result["message"]
        and entry in result["message"]
    ), result["message"]
