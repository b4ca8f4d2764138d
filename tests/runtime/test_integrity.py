"""A damaged or untrusted plugin is refused with a message, never loaded: every case is made for real in a copy of
the installed package (or of a build cache) and imported in a child process, which must exit with an exception
that names the file (never die of a signal) and must not have mapped the damaged library."""

import json
import os
import shutil
import struct
import subprocess

import pytest

from installs import IMPORT_REPORT, copy_package, doctor, libraries, mismatched_copy_with_cache, restamp, run_python
from prerast import _loader
from prerast_meta import integrity as _integrity

pytestmark = pytest.mark.slow  # each case imports a damaged copy in a child process

NOBODY = 65534


def import_copy(path, under=None, **env):
    out = run_python(["-c", IMPORT_REPORT, str(under or path)], path, **env)
    assert out.returncode >= 0, f"killed by signal {-out.returncode}: {out.stderr[-2000:]}"
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def damage(lib, how):
    data = open(lib, "rb").read()
    if how == "truncated":
        data = data[:100_000]
    elif how == "empty":
        data = b""
    elif how == "bit-flipped":
        i = len(data) // 2
        data = data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :]
    elif how == "aarch64":  # e_machine of a little-endian ELF: what a library built for aarch64 carries
        data = data[:18] + struct.pack("<H", 183) + data[20:]
    elif how == "mach-o":
        data = b"\xcf\xfa\xed\xfe" + data[4:]
    elif how == "missing":
        os.remove(lib)
        return
    with open(lib, "wb") as f:
        f.write(data)


EXPECTED = {
    "truncated": "the file is truncated",
    "empty": "the file is truncated",
    "bit-flipped": "the file's content differs",
    "aarch64": "AArch64",
    "mach-o": "Mach-O",
    "missing": "the file is missing",
}


def loaded_libraries():
    info = _loader.require()
    return [info["path"]] + ([info["cuda_path"]] if _loader.status()["cuda"] is None else [])


def test_installed_plugin_carries_its_stamps():
    # setup.py stamped the size and SHA-256 of each library that the installed package holds.
    info = _loader.require()
    for lib in (info["path"], info.get("cuda_path")):
        if lib:
            size, sha = _integrity.digest(lib)
            assert info["libraries"][os.path.basename(lib)] == {"size": size, "sha256": sha}


@pytest.mark.parametrize("how", list(EXPECTED))
@pytest.mark.parametrize("which", range(2), ids=["cpu-library", "cuda-library"])
def test_damaged_bundled_library_is_refused(tmp_path, how, which):
    if which >= len(loaded_libraries()):
        pytest.skip("this torch does not load the CUDA library")
    path = copy_package(tmp_path)
    lib = os.path.join(path, "prerast", os.path.basename(loaded_libraries()[which]))
    damage(lib, how)
    result = import_copy(path)
    assert result["error"] == "BinaryMismatchError"
    message = result["message"]
    assert f"prerast will not load {lib}: " in message and EXPECTED[how] in message
    assert "expected: " in message and "found:    " in message
    assert _loader.fix_command() in message
    assert result["mapped"] == []  # nothing of the copy was handed to the dynamic loader
    if which == 1 and how != "truncated":  # the doctor's check is one for both libraries: each kind once is enough
        return
    # The doctor says the same, exits 1 and does not crash.
    out, report = doctor(path, "--json")
    assert out.returncode == 1, out.stderr
    (bad,) = [r for r in report["libraries"] if not r["ok"]]
    assert bad["path"] == lib and bad["role"] == "bundled" and EXPECTED[how] in bad["problem"]
    assert report["load_probe"]["signal"] is None
    assert _loader.fix_command() in report["fixes"]
    if how == "truncated":  # the text report of the same (each doctor run imports torch twice: one is enough)
        text, _ = doctor(path)
        assert text.returncode == 1 and f"library:  {lib} (bundled): DAMAGED" in text.stdout, text.stdout
        assert "Traceback" not in text.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "is missing"),
        (b'{"abi": "stable", ', "JSONDecodeError"),
        (b"\xff\xfe garbage", "UnicodeDecodeError"),
        (b"[1, 2]", "a JSON list"),
        (b'{"library": "_C.abi3.so"}', "is malformed"),
    ],
)
def test_missing_or_garbled_build_info_is_refused(tmp_path, content, words):
    path = copy_package(tmp_path)
    info_path = os.path.join(path, "prerast", "_build_info.json")
    if content is None:
        os.remove(info_path)
    else:
        with open(info_path, "wb") as f:
            f.write(content)
    result = import_copy(path)
    assert result["error"] == "BinaryMismatchError", result
    assert info_path in result["message"] and words in result["message"], result["message"]
    assert _loader.fix_command() in result["message"]
    assert result["mapped"] == []
    out, report = doctor(path, "--json")
    assert out.returncode == 1 and report["bundled"]["path"] is None, out.stderr
    assert info_path in report["bundled"]["problems"][0]


def test_library_that_crashes_on_load_is_reported_by_the_doctor(tmp_path):
    # A library that passes the checks (a bad build, a broken driver) and kills the process that loads it: the
    # doctor's child dies of SIGSEGV, the doctor says so, names the library and the commands to run next.
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler to make the crashing library")
    path = copy_package(tmp_path)
    pkg = os.path.join(path, "prerast")
    src = tmp_path / "crash.c"
    src.write_text(
        "#include <signal.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void crash(void) { kill(getpid(), SIGSEGV); }\n"
    )
    lib = os.path.join(pkg, os.path.basename(_loader.require()["path"]))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, str(src)], check=True)
    restamp(pkg)
    out, report = doctor(path, "--json")
    assert out.returncode == 1, out.stderr
    probe = report["load_probe"]
    assert probe["signal"] == "SIGSEGV" and probe["library"] == lib
    assert not report["plugin"]["loaded"] and "SIGSEGV" in report["plugin"]["error"]
    assert lib in report["plugin"]["error"]
    assert report["fixes"][0].startswith("python -X faulthandler -c") and _loader.fix_command() in report["fixes"]
    text, _ = doctor(path)
    assert text.returncode == 1 and f"loading {lib} killed a child process with SIGSEGV" in text.stdout


def test_library_that_fails_to_load_keeps_the_os_error(tmp_path):
    # An intact ELF file of this machine that the dynamic loader refuses (an executable): OSError as the cause.
    path = copy_package(tmp_path)
    pkg = os.path.join(path, "prerast")
    shutil.copy("/bin/true", os.path.join(pkg, os.path.basename(_loader.require()["path"])))
    restamp(pkg)
    out = run_python(
        ["-c", "try:\n import prerast\nexcept ImportError as e:\n print(type(e.__cause__).__name__)"], path
    )
    assert out.returncode == 0 and out.stdout.strip() == "OSError", out.stderr


def test_foreign_headers_are_named():
    here = _integrity.running_elf()
    assert here is not None and _integrity.ELF_MACHINE.get(here[2])
    elf = open(_loader.require()["path"], "rb").read(64)
    assert _integrity.foreign(elf) is None
    assert "AArch64" in _integrity.foreign(elf[:18] + struct.pack("<H", 183) + elf[20:], running=(2, 1, 62))
    assert "32-bit" in _integrity.foreign(elf[:4] + b"\x01" + elf[5:], running=(2, 1, 62))
    assert "big-endian" in _integrity.foreign(
        b"\x7fELF\x02\x02" + elf[6:18] + b"\x00\x3e" + elf[20:], running=(2, 1, 62)
    )
    assert "Windows" in _integrity.foreign(b"MZ\x90\x00" + bytes(60))
    assert "empty" in _integrity.foreign(b"")


# The build cache: each entry and the folder it is in must be the user's (or root's) and writable only by them.


@pytest.mark.parametrize("target", ["entry", "library"])
def test_cache_entry_writable_by_others_is_refused(tmp_path, target):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    name, mode, fix = (
        (entry, 0o777, f"chmod -R go-w '{entry}'")
        if target == "entry"
        else (libraries(entry)[0], 0o666, f"chmod go-w '{libraries(entry)[0]}'")
    )
    before = os.stat(name).st_mode
    os.chmod(name, mode)
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"{name} is writable by group and others (mode {mode:04o})" in result["message"] and fix in result["message"]
    os.chmod(name, before)
    assert import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)["source"] == "cache"


def test_cache_folder_writable_by_others_is_refused_unless_sticky(tmp_path):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    os.chmod(cache, 0o777)
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"{cache} is writable by group and others" in result["message"]
    assert f"chmod go-w '{cache}'" in result["message"] and "chmod +t" in result["message"]
    # Nothing is built into an untrusted folder either.
    out = run_python(["-c", "import prerast"], path, PRERAST_CACHE_DIR=cache, PRERAST_BUILD_ON_MISMATCH=1)
    assert out.returncode == 1 and f"{cache} is writable by group and others" in out.stderr
    assert sorted(os.listdir(cache)) == [os.path.basename(entry)]
    os.chmod(cache, 0o1777)  # sticky, like /tmp: others cannot replace the user's entries
    assert import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)["source"] == "cache"


@pytest.mark.skipif(os.getuid() != 0, reason="making a file another user's needs root")
def test_cache_entry_of_another_user_is_refused(tmp_path):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    for name in [entry] + [os.path.join(entry, n) for n in os.listdir(entry)]:
        os.chown(name, NOBODY, NOBODY)
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"{entry} is owned by nobody (uid {NOBODY}), not by you (root, uid 0) or root" in result["message"]
    assert f"chown -R root '{entry}'" in result["message"] and f"rm -rf '{entry}'" in result["message"]
    out, report = doctor(path, "--json", PRERAST_CACHE_DIR=cache)
    assert out.returncode == 1 and any(entry in r for r in report["source_build"]["refused_cache_entries"])


@pytest.mark.parametrize("how", ["truncated", "bit-flipped", "aarch64"])
def test_damaged_cache_library_is_refused(tmp_path, how):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    lib = libraries(entry)[0]
    damage(lib, how)
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"prerast will not load {lib}: " in result["message"] and EXPECTED[how] in result["message"]
    assert f"rm -rf '{entry}'" in result["message"]
    out, report = doctor(path, "--json", PRERAST_CACHE_DIR=cache)
    assert out.returncode == 1, out.stderr
    assert [r["path"] for r in report["libraries"] if not r["ok"]] == [lib]
    assert f"rm -rf '{entry}'   # a damaged build-cache entry" in report["fixes"]


def test_cache_entry_of_other_sources_is_refused(tmp_path):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    info_path = os.path.join(entry, "_build_info.json")
    info = json.load(open(info_path))
    info["source_hash"] = "0123456789abcdef"
    json.dump(info, open(info_path, "w"))
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"the build cache entry {entry}: it was built from other sources" in result["message"]
    assert "found:    sources 0123456789abcdef" in result["message"]


def test_garbled_cache_build_info_is_refused(tmp_path):
    path, cache, entry = mismatched_copy_with_cache(tmp_path)
    info_path = os.path.join(entry, "_build_info.json")
    with open(info_path, "w") as f:
        f.write('{"abi": ')
    result = import_copy(path, under=cache, PRERAST_CACHE_DIR=cache)
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert f"{info_path} cannot be read" in result["message"] and f"rm -rf '{entry}'" in result["message"]


def test_repair_restamps_a_library_it_rewrote(tmp_path):
    # auditwheel rewrites a library it grafts a dependency into: the wheel's stamp and RECORD follow the new file.
    import base64
    import hashlib
    import zipfile

    from prerast_meta import repair as _repair

    wheel = str(tmp_path / "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl")
    stamp = {"_C.abi3.so": {"size": 3, "sha256": hashlib.sha256(b"old").hexdigest()}}
    info = json.dumps({"library": "_C.abi3.so", "libraries": stamp}).encode()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("prerast/_C.abi3.so", b"rewritten")
        z.writestr("prerast/_build_info.json", info)
        z.writestr("prerast-0.1.0.dist-info/RECORD", "prerast/_build_info.json,sha256=x,1\nprerast/_C.abi3.so,,\n")
    assert _repair.restamp(wheel) == ["_C.abi3.so"]
    with zipfile.ZipFile(wheel) as z:
        new = z.read("prerast/_build_info.json")
        record = z.read("prerast-0.1.0.dist-info/RECORD").decode().splitlines()
        assert z.read("prerast/_C.abi3.so") == b"rewritten"
    assert json.loads(new)["libraries"]["_C.abi3.so"] == {"size": 9, "sha256": hashlib.sha256(b"rewritten").hexdigest()}
    digest = base64.urlsafe_b64encode(hashlib.sha256(new).digest()).rstrip(b"=").decode()
    assert record[0] == f"prerast/_build_info.json,sha256={digest},{len(new)}"
    assert _repair.restamp(wheel) == []  # stamps that fit are left as they are


def test_built_wheel_stamps_its_libraries():
    # The wheel under test (repaired by auditwheel) records the libraries it holds.
    import hashlib
    import zipfile

    wheel = os.environ.get("PRERAST_TEST_WHEEL")
    if not wheel:
        pytest.skip("PRERAST_TEST_WHEEL names no built wheel")
    with zipfile.ZipFile(wheel) as z:
        info = json.loads(z.read("prerast/_build_info.json"))
        assert info["library"] in info["libraries"]
        for name, stamp in info["libraries"].items():
            data = z.read("prerast/" + name)
            assert stamp == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
