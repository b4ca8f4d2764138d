"""benchmarks/vs_llvmpipe.py's output on a tiny scene: one table row and one JSON row per scene, each renderer
timed in its own processes, bytes and floor ratios consistent with the times. No speed is asserted."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "vs_llvmpipe.py")


def run(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the prerast under test
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=600)


def test_tiny_scene_table_and_json(tmp_path):
    out = tmp_path / "rows.json"
    done = run("--tris", "2", "--res", "8", "--rounds", "1", "--reps", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("scene"))
    for column in ("prerast ms", "llvmpipe ms", "spread", "ratio", "floor ms", "GB/s", "x floor", "x warm", "+ db ms"):
        assert column in lines[header]
    table = lines[header + 1 :]
    assert [line.split()[:2] for line in table] == [["2", "8^2"]]
    report = json.loads(out.read_text())
    assert report["rounds"] == 1 and report["meta"]["threads"] >= 1
    assert len(report["rows"]) == 1
    for row, res in zip(report["rows"], [8]):
        # pos [1, 6, 4] float32 and tri [2, 3] int32 read; rast [1, res, res, 4] float32 written (and rast_db).
        assert row["bytes"] == {"read": 6 * 16 + 2 * 12, "write": res * res * 16, "write_db": 2 * res * res * 16}
        for m in ("prerast", "prerast_db", "floor", "floor_db", "floor_warm"):
            assert row[m + "_ms"] > 0 and row[m + "_cpu_ms"] >= 0
            assert row[m + "_spread"] == 1.0  # one round: its run is both the fastest and the slowest
        assert row["over_floor"] == pytest.approx(row["prerast_ms"] / row["floor_ms"])
        assert row["over_warm_floor"] == pytest.approx(row["prerast_ms"] / row["floor_warm_ms"])
        assert row["db_over_floor"] == pytest.approx(row["prerast_db_ms"] / row["floor_db_ms"])
        moved = row["bytes"]["read"] + row["bytes"]["write"]
        assert row["floor_gbps"] == pytest.approx(moved / row["floor_ms"] / 1e6)
        if row["llvmpipe_ms"] is None:  # no moderngl or no EGL here: the column is skipped, not faked
            assert row["vs_llvmpipe"] is None and table[0].split()[5] == "-"
        else:
            assert row["vs_llvmpipe"] == pytest.approx(row["prerast_ms"] / row["llvmpipe_ms"])


@pytest.mark.parametrize("bad", [["--tris", "0"], ["--tris", "lots"], ["--rounds", "0"]])
def test_bad_arguments_exit_2_with_a_message(bad):
    done = run(*bad)
    assert done.returncode == 2 and "error:" in done.stderr and "Traceback" not in done.stderr
