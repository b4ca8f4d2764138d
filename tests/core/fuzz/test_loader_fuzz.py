"""The loader's checks against random damage: truncations at any length, single bit flips anywhere, and any
e_machine, applied to a copy of the installed plugin. Every damaged copy is found before it could be loaded; a
sample of them is also imported in a child process, which must exit with BinaryMismatchError, never a signal."""

import os
import random
import shutil
import struct

import pytest

from installs import copy_package, run_python
from prerast import _loader
from prerast_meta import build_info, integrity as _integrity

pytestmark = pytest.mark.slow  # 150 damaged copies, a few imported in child processes

CASES = 150
IN_A_CHILD = 3


def damaged(data, rng):
    kind = rng.choice(["truncate", "flip", "machine"])
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))]
    if kind == "flip":
        i = rng.randrange(len(data))
        return kind, data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    machine = rng.choice([m for m in range(1, 300) if m != struct.unpack_from("<H", data, 18)[0]])
    return kind, data[:18] + struct.pack("<H", machine) + data[20:]


def test_random_damage_is_always_found(tmp_path):
    info = _loader.require()
    lib, stamp = info["path"], build_info.stamp_of(info, info["path"])
    data = open(lib, "rb").read()
    rng = random.Random(25)
    copy = tmp_path / os.path.basename(lib)
    for i in range(CASES):
        kind, bad = damaged(data, rng)
        copy.write_bytes(bad)
        assert _integrity.problem(str(copy), stamp) is not None, (i, kind)
    for i in range(IN_A_CHILD):
        path = copy_package(tmp_path / f"site{i}")
        target = os.path.join(path, "prerast", os.path.basename(lib))
        kind, bad = damaged(data, rng)
        with open(target, "wb") as f:
            f.write(bad)
        out = run_python(["-c", "import prerast"], path)
        assert out.returncode == 1, (kind, out.returncode, out.stderr[-2000:])
        assert "prerast.errors.BinaryMismatchError" in out.stderr and target in out.stderr, kind
        shutil.rmtree(path)
