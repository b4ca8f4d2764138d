"""`bash ci/gpu_check.sh --dry-run` on this machine (no GPU needed): it finds the wheel, the interpreter with torch and
what the tests need, says which of its tools are absent, and prints each step it would run, installing and running
nothing; something it needs that is missing stops it with exit status 2 and what to do, before any work."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the GPU machines are Linux")
STEPS = ["doctor", "op tests on CUDA, opcheck, CUDA graph capture and replay", "fuzz cases on CUDA", "CUDA vs CPU"]
STEPS += [
    f"{tool} {op}" for tool in ("memcheck", "racecheck") for op in ("rasterize", "interpolate", "texture", "antialias")
]
STEPS += ["timing"]


def fake_wheel(folder):
    """A wheel pip can read, with the build metadata of a one-arch wheel (no libraries: nothing is installed)."""
    path = os.path.join(folder, "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl")
    info = {
        "kernels": {"cpu": {"library": "_kernels_cpu.abi3.so"}, "cu13": {"cuda_version": "13.0", "cuda_archs": ["9.0"]}}
    }
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/_build_info.json", json.dumps(info))
        z.writestr("prerast-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: prerast\nVersion: 0.1.0\n")
        z.writestr("prerast-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                   "Tag: py3-none-manylinux_2_28_x86_64\n")  # fmt: skip
        z.writestr("prerast-0.1.0.dist-info/RECORD", "")
    return path


def dry_run(tmp_path, **env):
    env = {**os.environ, "GPU_CHECK_OUT": str(tmp_path / "out"), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", "ci/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True)


def test_dry_run_finds_everything_and_says_what_it_would_run(tmp_path):
    wheel = fake_wheel(str(tmp_path))
    out = dry_run(tmp_path, PRERAST_WHEEL=wheel)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert f"wheel:  {wheel}" in text and "kernels cu13: CUDA 13.0, archs 9.0" in text
    assert "torch " in text and "pytest: importable" in text
    assert "pip install -q --no-deps --no-index" in text and "--system-site-packages" in text
    for step in STEPS:
        assert f"  {step} (at most " in text, step
    assert "compute-sanitizer: " in text
    assert not os.path.exists(tmp_path / "out")  # nothing made, nothing installed


def test_a_missing_wheel_stops_it_before_any_work(tmp_path):
    out = dry_run(tmp_path, PRERAST_WHEEL=str(tmp_path / "nothing.whl"))
    assert out.returncode == 2 and "PRERAST_WHEEL" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_an_interpreter_without_torch_is_named(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    out = dry_run(tmp_path, PRERAST_WHEEL=fake_wheel(str(tmp_path)), PYTHON=str(tmp_path / "bare" / "bin" / "python"))
    assert out.returncode == 2 and "torch in " in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_carried_wheels_are_what_the_check_installs(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    from shared_torch import make_venv, shared_torch

    # An interpreter with torch and numpy but no pytest, as a GPU machine may be.
    python = os.path.join(make_venv(str(tmp_path / "v"), shared_torch("torch==2.4.1"), with_pip=False), "bin", "python")
    wheel = fake_wheel(str(tmp_path))
    out = dry_run(tmp_path, PRERAST_WHEEL=wheel, PYTHON=python, GPU_CHECK_WHEELS=str(tmp_path / "none"))
    assert out.returncode == 2, out.stdout + out.stderr
    with open(os.path.join(ROOT, "ci", "builder", "gpu_check.py")) as f:
        carry = next(line for line in f if line.startswith("CARRY = ")).split('"')[1]
    assert carry in out.stderr  # what to carry, as docs/benchmarks.md shows it
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        assert carry in f.read()
    carried = tmp_path / "wheels"
    carried.mkdir()
    (carried / "pytest-8.3.0-py3-none-any.whl").write_bytes(b"")
    out = dry_run(tmp_path, PRERAST_WHEEL=wheel, PYTHON=python, GPU_CHECK_WHEELS=str(carried))
    assert f"pip install -q --no-index --find-links {carried} pytest" in out.stdout, out.stdout + out.stderr


def test_the_report_says_each_steps_outcome(tmp_path, monkeypatch):
    """run() with stand-in steps: a pass, a failure, a sanitizer that cannot attach (refused, not failed), a step
    stopped at its limit, one left no time; report.json and the summary line say so, exit status 1."""
    # From its folder, as bash ci/gpu_check.sh runs it; the folder leaves sys.path after the test, so that its
    # wheel.py, smoke.py and tools.py shadow no later import.
    monkeypatch.syspath_prepend(os.path.join(ROOT, "ci", "builder"))
    import gpu_check

    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text(
        "#!/bin/sh\necho '========= Error: Target application terminated before first instrumented API call'\nexit 9\n"
    )
    sanitizer.chmod(0o755)
    plan = [
        ("passes", ["true"], 30, True),
        ("fails", ["false"], 30, True),
        ("memcheck x", [str(sanitizer), "--tool", "memcheck"], 30, True),
        ("slow", ["sleep", "30"], 12, True),
        ("late", ["true"], 30, True),
    ]
    out = str(tmp_path / "out")
    code = gpu_check.run(out, 16, [("venv", ["true"])], plan, str(sanitizer), {"gpu": "H100", "modules": {}}, "w.whl")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    got = {s["name"]: s["status"] for s in report["steps"]}
    assert got == {"passes": "passed", "fails": "failed", "memcheck x": "refused", "slow": "failed", "late": "skipped"}
    assert code == 1 and report["steps"][3]["exit"] == "timeout"
