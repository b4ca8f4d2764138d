"""`bash ci/test.sh --quick`: the same build virtualenv as the whole suite, then the CPU library built in place and
the tests that pyproject.toml's markers leave unmarked, against that in-place package; no wheel is built. The script
runs here with stand-ins for its Pythons that record what they were asked to do."""

import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Prints its arguments, one per line, after a line naming the program, into $CALLS.
RECORDER = """#!/usr/bin/env bash
{ echo "== $0"; printf '%s\\n' "$@"; } >> "$CALLS"
echo dist/prerast-0.0.0-py3-none-linux_x86_64.whl
"""


def calls_of(script_args, tmp_path):
    """[(program, [arguments])] of a run of ci/test.sh in a copy whose Pythons only record."""
    tree = tmp_path / "tree"
    (tree / "ci").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "ci", "test.sh"), tree / "ci" / "test.sh")
    recorder = tmp_path / "python3.11"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    (tree / ".venv" / "build" / "bin").mkdir(parents=True)
    shutil.copy(recorder, tree / ".venv" / "build" / "bin" / "python")
    calls = tmp_path / "calls"
    env = dict(os.environ, PYTHON=str(recorder), CALLS=str(calls))
    out = subprocess.run(["bash", "ci/test.sh", *script_args], cwd=tree, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = []
    for block in calls.read_text().split("== ")[1:]:
        program, *args = block.rstrip("\n").split("\n")
        found.append(("$PYTHON" if program == str(recorder) else os.path.relpath(program, tree), args))
    return found


def quick_markers():
    text = open(os.path.join(ROOT, "ci", "test.sh")).read()
    (markers,) = re.findall(r'^QUICK_MARKERS="([^"]+)"$', text, re.M)
    return markers


def test_quick_runs_the_unmarked_tests_in_place(tmp_path):
    full = calls_of([], tmp_path / "full")
    quick = calls_of(["--quick", "tests/ops", "-x"], tmp_path / "quick")
    # The same virtualenv step first.
    assert quick[0] == full[0] and quick[0][0] == "$PYTHON" and quick[0][1][:4] == ["-m", "ci", "wheel", "venv"]
    # Then one in-place CPU build that runs pytest with the markers and the extra arguments, and nothing else:
    # no wheel built or installed (the whole run builds one).
    assert any(args[:3] == ["-m", "ci", "wheel-local"] for _, args in full)
    assert len(quick) == 2, quick
    program, args = quick[1]
    assert program == ".venv/build/bin/python"
    assert args[:5] == ["-m", "ci", "dev", "--cpu", "--"]
    assert args[args.index("-m", 5) + 1] == quick_markers() and args[-2:] == ["tests/ops", "-x"]


def collected(*pytest_args):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *pytest_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {line.split("::")[0] for line in out.stdout.splitlines() if "::" in line}


def test_quick_markers_keep_the_unit_tests_and_leave_the_builds_out():
    files = collected("-m", quick_markers(), "tests")
    every = collected("tests")
    assert (
        "tests/core/ops/test_rasterize.py" in files
        and "tests/builder/test_lint.py" in files
        and "tests/builder/test_matrix.py" in files
    )
    left_out = every - files
    # Builds of wheels, of the whole docs site, of the core with cross toolchains; the example programs.
    for slow in (
        "tests/builder/test_two_images.py",
        "tests/builder/test_cell_end_to_end.py",
        "tests/builder/test_abi_kinds.py",
        "tests/docs/test_docs_site.py",
        "tests/builder/test_dev_loop.py",
        "tests/runtime/examples/test_examples.py",
    ):
        assert slow in left_out, slow
    assert len(files) > 2 * len(left_out)
