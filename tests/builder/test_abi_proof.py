"""`python -m ci abi-proof` on the wheel under test, next to a torch it was not built with: the CPU-only build of
torch 2.13.0 (the wheel is built with the CUDA torch 2.14.1). A stable CUDA wheel must load there with its CPU
ops, pass the op tests, and say that its CUDA kernels were not loaded."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from wheel_under_test import ROOT, find_test_wheel

pytestmark = pytest.mark.wheel


def test_proof_of_one_torch(tmp_path):
    wheel = find_test_wheel()
    with open(os.devnull) as devnull:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "ci",
                "abi-proof",
                wheel,
                "--torch",
                "2.13.0+cpu",
                "--work",
                str(tmp_path / "work"),
                "--json",
                str(tmp_path / "proof.json"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            stdin=devnull,
        )
    if "No matching distribution found for torch==2.13.0+cpu" in out.stderr:
        pytest.skip("torch 2.13.0+cpu cannot be installed here")
    with open(tmp_path / "proof.json") as f:
        proof = json.load(f)
    (row,) = proof["rows"]
    assert row["ok"], out.stdout + out.stderr
    assert row["torch"] == "2.13.0+cpu" and " passed" in row["result"] and row["first_frame_s"] > 0
    with zipfile.ZipFile(wheel) as z:
        assert row["abi"] == json.loads(z.read("prerast/_build_info.json"))["abi"]
    assert "| 2.13.0+cpu | 2.13.0+cpu | ✅" in out.stdout
    assert proof["audit"]["python_api_ok"] and proof["audit"]["python_api"] == "ok"
    assert not os.path.exists(tmp_path / "work" / "2.13.0_cpu"), "the virtualenv is removed after its row"
    # Every file of tests/core/ops ran but the arithmetic-only ones, which exist and the main suite runs.
    from ci.repair import abi_proof

    for name in abi_proof.NUMERICS_ONLY:
        assert os.path.isfile(os.path.join(ROOT, "tests", "core", "ops", name)), name
    passed = int(row["result"].split(" passed")[0].split()[-1])
    assert passed > 400, row["result"]
