"""The first-use build writes its cache entry atomically and checks it before it is kept: a build killed midway
leaves nothing a later import loads (which then refuses, or builds, cleanly), a build whose output fails its
checks keeps nothing, racing builders build once, and stale temporary folders are cleaned by the next build.
Also load_precompiled: a missing, empty, truncated, damaged or foreign artifact is an ArtifactError naming it.
setup.py is replaced by a stand-in that 'builds' by copying the installed plugin, so nothing is compiled."""

import glob
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest

from installs import IMPORT_REPORT, copy_package, env_for, run_python
from prerast import _cache, _loader

pytestmark = pytest.mark.slow  # builds at first use, raced and killed, in child processes

# Stands in for `setup.py build_ext -b OUT -t TMP`: copies the installed plugin and its _build_info.json into
# OUT/prerast (recording these sources' hash, as the real build does). FAKE_MODE: ok; slow (sleeps first);
# hang (writes half of the library, then sleeps until killed); bad (a truncated library under the full stamps).
FAKE_SETUP = r"""
import json, os, shutil, sys, time
mode, source = os.environ["FAKE_MODE"], os.environ["FAKE_FROM"]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(f"{os.getpid()}\n")
out = os.path.join(sys.argv[sys.argv.index("-b") + 1], "prerast")
os.makedirs(out)
sys.path.insert(0, os.getcwd())  # the tree's own prerast_meta, as the real setup.py imports it
from prerast_meta import sources
info = json.load(open(os.path.join(source, "_build_info.json")))
info["source_hash"] = sources.digest(".")
if mode == "slow":
    time.sleep(2)
for name in info["libraries"]:
    data = open(os.path.join(source, name), "rb").read()
    if mode in ("hang", "bad"):
        data = data[:len(data) // 2]
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    if mode == "hang":
        open(os.environ["FAKE_LOG"] + ".half", "w").close()
        time.sleep(600)
json.dump(info, open(os.path.join(out, "_build_info.json"), "w"))
"""


@pytest.fixture
def site(tmp_path):
    """A copy of the installed prerast whose own plugin does not fit, building with FAKE_SETUP; the cache folder;
    the environment of a child that opts in to building."""
    path = copy_package(tmp_path / "site", abi="classic", torch_version="2.4.1+cu124")
    with open(os.path.join(path, "prerast", "_src", "setup.py"), "w") as f:
        f.write(FAKE_SETUP)
    cache = str(tmp_path / "cache")
    env = dict(
        PRERAST_BUILD_ON_MISMATCH=1,
        PRERAST_CACHE_DIR=cache,
        FAKE_MODE="ok",
        FAKE_LOG=str(tmp_path / "log"),
        FAKE_FROM=os.path.dirname(_loader.require()["path"]),
    )
    return path, cache, env


def start(path, cache, **env):
    return subprocess.Popen(
        [sys.executable, "-c", IMPORT_REPORT, cache],
        env=env_for(path, **env),
        cwd=path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {err[-2000:]}"
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def entries(cache):
    """Finished entries: no lock, log of a failed build or temporary folder."""
    return sorted(n for n in os.listdir(cache) if not n.endswith((".lock", ".failed.log")) and n[0] != ".")


def test_build_killed_midway_is_never_loaded_and_the_next_build_cleans_up(site, tmp_path):
    path, cache, env = site
    builder = start(path, cache, **dict(env, FAKE_MODE="hang"))
    deadline = time.time() + 120
    while not os.path.exists(env["FAKE_LOG"] + ".half"):
        assert time.time() < deadline and builder.poll() is None, builder.communicate()[1][-2000:]
        time.sleep(0.05)
    setup_pid = int(open(env["FAKE_LOG"]).read().split()[0])
    builder.send_signal(signal.SIGKILL)
    builder.wait()
    os.kill(setup_pid, signal.SIGKILL)  # the stand-in compiler, which the killed import had started
    (partial,) = glob.glob(os.path.join(cache, ".partial-*"))
    assert glob.glob(os.path.join(partial, ".work-*", "lib", "prerast", "*.so"))  # half a library is there
    # Without the opt-in nothing is built and the half build is not loaded: a clean refusal.
    without = {k: v for k, v in env.items() if k != "PRERAST_BUILD_ON_MISMATCH"}
    result = finish(start(path, cache, **without))
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert "has no build for this environment" in result["message"]
    # A stale folder of another key, whose build nobody holds the lock of, is cleaned up too; one whose lock is
    # held (a build in progress) is kept.
    stale, live = os.path.join(cache, ".partial-other-key-1"), os.path.join(cache, ".partial-busy-key-2")
    os.makedirs(stale)
    os.makedirs(live)
    lock = _cache.BuildLock(os.path.join(cache, "busy-key.lock"))
    assert lock.acquire(timeout=0)
    try:
        result = finish(start(path, cache, **env))
    finally:
        lock.release()
    assert result["error"] is None and result["source"] == "built", result
    (entry,) = entries(cache)
    assert os.path.dirname(result["path"]) == os.path.join(cache, entry)
    assert sorted(glob.glob(os.path.join(cache, ".partial-*"))) == [live]


def test_build_that_fails_its_checks_keeps_nothing(site):
    path, cache, env = site
    result = finish(start(path, cache, **dict(env, FAKE_MODE="bad")))
    assert result["error"] == "BinaryMismatchError" and result["mapped"] == []
    assert "did not pass its checks" in result["message"], result["message"]
    assert entries(cache) == [] and not glob.glob(os.path.join(cache, ".partial-*"))


def test_racing_first_uses_build_once_and_load_the_same_entry(site):
    path, cache, env = site
    racers = [start(path, cache, **dict(env, FAKE_MODE="slow")) for _ in range(2)]
    results = [finish(p) for p in racers]
    assert all(r["error"] is None for r in results), results
    assert sorted(r["source"] for r in results) == ["built", "cache"]
    assert len(open(env["FAKE_LOG"]).read().split()) == 1
    assert len({r["path"] for r in results}) == 1 and len(entries(cache)) == 1


def test_entry_built_under_a_group_writable_umask_is_trusted(site):
    path, cache, env = site
    assert finish(start(path, cache, TEST_UMASK="002", **env))["source"] == "built"
    (entry,) = entries(cache)
    for folder, _, files in os.walk(os.path.join(cache, entry)):
        for name in [folder] + [os.path.join(folder, f) for f in files]:
            assert not os.stat(name).st_mode & 0o022, name
    assert finish(start(path, cache, **env))["source"] == "cache"


# load_precompiled on files that are not intact artifacts, all in one child process.
PRECOMPILED = textwrap.dedent("""
    import json, sys, prerast
    found = {}
    for name in sys.argv[1:]:
        try:
            prerast.load_precompiled(name, fn=lambda *a: None)
            found[name] = None
        except Exception as e:
            found[name] = [type(e).__name__, str(e)]
    print(json.dumps(found))
""")


def stored_zip(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_damaged_or_foreign_artifacts_are_refused(tmp_path):
    import torch

    cases = {}
    empty = tmp_path / "empty.pt2"
    empty.write_bytes(b"")
    cases[empty] = "is empty"
    cases[tmp_path / "missing.pt2"] = "cannot read"
    saved = tmp_path / "tensor.pt"
    torch.save(torch.zeros(1000), saved)
    cases[saved] = "no AOTInductor package"
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(saved.read_bytes()[: len(saved.read_bytes()) // 2])
    cases[cut] = "damaged or truncated zip archive"
    elf = open(_loader.require()["path"], "rb").read(4096)
    foreign = tmp_path / "foreign.pt2"
    stored_zip(
        foreign,
        {
            "m/archive_format": b"pt2",
            "m/data/aotinductor/model/m.wrapper.so": elf[:18] + struct.pack("<H", 183) + elf[20:],
        },
    )
    cases[foreign] = "AArch64"
    flipped = tmp_path / "flipped.pt2"
    stored_zip(flipped, {"m/archive_format": b"pt2", "m/data/weights": b"a" * 1000})
    data = bytearray(flipped.read_bytes())
    data[data.index(b"a" * 1000) + 500] ^= 1
    flipped.write_bytes(bytes(data))
    cases[flipped] = "m/data/weights does not match its checksum"
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(5000))
    cases[garbage] = "is not a training artifact"
    out = run_python(["-c", PRECOMPILED] + [str(c) for c in cases], str(tmp_path))
    assert out.returncode >= 0, f"killed by signal {-out.returncode}: {out.stderr[-2000:]}"
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    for case, words in cases.items():
        kind, message = found[str(case)]
        assert kind == "ArtifactError" and str(case) in message and words in message, (case, message)
