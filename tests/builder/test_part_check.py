"""python -m ci part-check, cibuildwheel's test of a part under each Python (ci/matrix/cibw.py): an installed part is
whole when its WHEEL tags are py3-none and every library its build stamped is there with that size and SHA-256.
Checked on installed layouts written here (a site-packages folder with prerast/ and its dist-info), read through
importlib.metadata as the command reads the real one, and once for real: the command run in a fresh virtualenv
that pip installed a part wheel into without dependencies."""

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from ci.builder import part_check  # noqa: E402

LIBRARY = b"\x7fELF a kernel library"


def files(tag="py3-none-manylinux_2_28_x86_64", library=LIBRARY):
    stamp = {"size": len(LIBRARY), "sha256": hashlib.sha256(LIBRARY).hexdigest()}
    out = {
        "prerast/_build_info.json": json.dumps({"libraries": {"_kernels_cpu.abi3.so": stamp}}).encode(),
        "prerast-0.1.0+kernels.cpu.dist-info/METADATA": b"Metadata-Version: 2.1\nName: prerast\nVersion: 0.1.0+kernels.cpu\n",
        "prerast-0.1.0+kernels.cpu.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    if library is not None:
        out["prerast/_kernels_cpu.abi3.so"] = library
    return out


def installed(site, **kwargs):
    for name, data in files(**kwargs).items():
        os.makedirs(os.path.join(site, os.path.dirname(name)), exist_ok=True)
        with open(os.path.join(site, name), "wb") as f:
            f.write(data)
    return metadata.PathDistribution(pathlib.Path(site, "prerast-0.1.0+kernels.cpu.dist-info"))


def test_a_whole_py3_none_part_passes_and_each_fault_is_named(tmp_path):
    assert part_check.check(installed(str(tmp_path / "whole"))) == []
    abi3 = part_check.check(installed(str(tmp_path / "abi3"), tag="cp310-abi3-manylinux_2_28_x86_64"))
    assert abi3 == ["tagged ['cp310-abi3-manylinux_2_28_x86_64'], not py3-none-<platform>"]
    assert part_check.check(installed(str(tmp_path / "gone"), library=None)) == ["_kernels_cpu.abi3.so is missing"]
    cut = part_check.check(installed(str(tmp_path / "cut"), library=LIBRARY[:-1]))
    assert cut == ["_kernels_cpu.abi3.so is not the file its build stamped"]


@pytest.mark.slow
def test_command_in_a_venv_that_pip_installed_a_part_into(tmp_path):
    """The command as cibuildwheel runs it: from another folder, by ci/cli.py's path, in a venv whose pip installed
    the part wheel with PIP_NO_DEPS=1 (its torch and numpy are not fetched)."""
    wheel = str(tmp_path / "prerast-0.1.0+kernels.cpu-py3-none-manylinux_2_28_x86_64.whl")
    members = files()
    record = "".join(f"{n},,\n" for n in members) + "prerast-0.1.0+kernels.cpu.dist-info/RECORD,,\n"
    members["prerast-0.1.0+kernels.cpu.dist-info/RECORD"] = record.encode()
    members["prerast-0.1.0+kernels.cpu.dist-info/METADATA"] += b"Requires-Dist: torch\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    venv = str(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    env = dict(os.environ, PIP_NO_DEPS="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)
    # This interpreter's pip installs into the venv (--python): the venv needs no pip of its own.
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    run = subprocess.run(
        [python, os.path.join(ROOT, "ci", "cli.py"), "part-check"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("part-check: prerast 0.1.0+kernels.cpu installed under Python 3.")
