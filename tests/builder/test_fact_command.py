"""`python -m ci fact NAME` prints the fact the code owns, for the workflow's shell steps."""

import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.matrix import facts


def fact(name):
    out = subprocess.run([sys.executable, "-m", "ci", "fact", name], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_stable_floor_is_the_oldest_torch_a_stable_cell_serves():
    # The matrix's stable cells, not compat, say which torch releases the stable wheels serve.
    oldest = min(matrix._vkey(r)[:2] for c in matrix.load() if c.kind == "stable" for r, _ in c.serves)
    assert fact("stable-floor") == "%d.%d" % oldest


def test_plat_is_the_tag_of_this_machines_target():
    target = next(
        t
        for t in matrix.targets().values()
        if t.os == {"linux": "linux", "win32": "windows", "darwin": "macos"}[sys.platform]
        and t.machine.lower() == platform.machine().lower()
    )
    assert fact("plat") == target.plat
    if sys.platform.startswith("linux"):
        assert fact("plat") == f"manylinux_2_28_{platform.machine()}"


def test_plat_on_a_machine_no_target_builds_for_says_so(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(SystemExit, match="no \\[target.\\*\\] of ci/matrix.toml is this machine"):
        facts.plat()
