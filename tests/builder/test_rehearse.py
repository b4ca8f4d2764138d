"""`python -m ci rehearse`: the tag run's publishing jobs run here against the gh stand-in, a local pypiserver and
the pages over HTTP, then prerast installed from both; run once with the wheel under test (ci/test.sh's: the one
wheel of Linux x86-64, merged of its parts) and synthetic wheels of every other merge of the published parts."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wheel_under_test import ROOT, find_test_wheel  # noqa: E402

sys.path.insert(0, ROOT)
from ci.matrix import parts
from ci.publish import plan as publish, release  # noqa: E402

pytestmark = pytest.mark.slow  # a whole release rehearsal with the built wheel

pytest.importorskip("pypiserver")
pytest.importorskip("twine")
WHEELS = parts.target_wheels(parts.select(parts.load(), published=True), release.package_version())
TARGETS = list(WHEELS)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    wheel = find_test_wheel()
    if not os.path.basename(wheel).startswith(f"prerast-{release.package_version()}-"):
        pytest.skip(f"{wheel} is not the untagged prerast {release.package_version()} wheel the rehearsal installs")
    tmp = tmp_path_factory.mktemp("rehearse")
    (tmp / "wheels").mkdir()
    shutil.copy(wheel, tmp / "wheels")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ci",
            "rehearse",
            "--wheels",
            str(tmp / "wheels"),
            "--report",
            str(tmp / "r.json"),
            "--work",
            str(tmp / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    print(out.stdout[-5000:], out.stderr[-5000:])
    assert os.path.exists(tmp / "r.json"), out.stderr
    return out.returncode, {s["name"]: s for s in json.load(open(tmp / "r.json"))["scenarios"]}


def test_every_scenario_is_ok_and_the_command_says_so(report):
    code, scenarios = report
    assert list(scenarios) == [
        "clean",
        "same run again",
        "one target missing",
        "re-run with it present",
        "tampered",
        "part job failed",
        "re-run failed jobs",
        "re-run all jobs",
    ]
    assert all(s["ok"] for s in scenarios.values()) and code == 0
    for s in scenarios.values():
        assert set(s) == {"name", "ok", "published", "missing", "pypi_files", "release_assets", "installs", "jobs_ran"}


def test_a_clean_run_publishes_every_target_and_installs_from_both(report):
    clean = report[1]["clean"]
    assert clean["published"] == TARGETS and clean["missing"] == []
    # PyPI: each target's one wheel (Linux x86-64's the wheel under test, at whatever manylinux level it has).
    assert sorted(clean["pypi_files"]) == sorted(
        os.path.basename(find_test_wheel()) if t == "linux-x86_64" else names[0] for t, names in WHEELS.items()
    )
    assert {f"manifest-{t}.json" for t in TARGETS} <= set(clean["release_assets"])
    assert len(clean["release_assets"]) == sum(map(len, WHEELS.values())) + len(TARGETS)
    assert clean["installs"] == [{"from": "pypi", "ok": True}, {"from": "pages", "ok": True}]


def test_the_same_run_again_changes_nothing(report):
    clean, again = report[1]["clean"], report[1]["same run again"]
    assert (again["release_assets"], again["pypi_files"]) == (clean["release_assets"], clean["pypi_files"])
    assert again["ok"]  # the rehearsal compared every asset's, PyPI file's and page's bytes


def test_a_missing_target_is_named_and_the_rerun_completes_the_release(report):
    missing, rerun = report[1]["one target missing"], report[1]["re-run with it present"]
    assert missing["missing"] == ["windows-amd64"] and "windows-amd64" not in missing["published"]
    assert not any(
        publish.target_of_wheel(n).name == "windows-amd64" for n in missing["release_assets"] if n.endswith(".whl")
    )
    assert "manifest-windows-amd64.json" not in missing["release_assets"]
    assert all(s["ok"] for s in (missing, rerun)) and all(i["ok"] for i in missing["installs"] + rerun["installs"])
    assert rerun["published"] == TARGETS
    assert set(missing["release_assets"]) < set(rerun["release_assets"]) == set(report[1]["clean"]["release_assets"])


def test_a_rebuilt_wheel_with_other_bytes_stops_the_release(report):
    tampered = report[1]["tampered"]
    assert tampered["ok"] and tampered["installs"] == []  # ok: the release job stopped, naming both sha256
    assert tampered["published"] == []  # nothing went out in that attempt
    # The release as it was: the same assets and PyPI files as after the re-run that completed it.
    done = report[1]["re-run with it present"]
    assert tampered["release_assets"] == done["release_assets"] and tampered["pypi_files"] == done["pypi_files"]


def job_of(row):
    """The workflow job of a report row: 'part X' -> wheel, 'merge T' -> merge, 'release' -> release."""
    return "wheel" if row.startswith("part ") else row.split(" ")[0]


def needs_closure(start):
    """Every job of the workflow that needs one of `start`, transitively, with them (GitHub's re-run rule)."""
    jobs = yaml.safe_load(open(os.path.join(ROOT, ".github", "workflows", "wheels.yml")))["jobs"]
    found = set(start)
    while True:
        more = {
            n
            for n, j in jobs.items()
            if set([j["needs"]] if isinstance(j.get("needs"), str) else j.get("needs", [])) & found
        }
        if more <= found:
            return found
        found |= more


def test_a_failed_part_then_rerun_failed_jobs_completes_the_release_unchanged(report):
    failed, rerun = report[1]["part job failed"], report[1]["re-run failed jobs"]
    assert failed["missing"] == ["windows-amd64"] and failed["published"] == [
        t for t in TARGETS if t != "windows-amd64"
    ]
    assert rerun["published"] == TARGETS and rerun["missing"] == []
    # The failed part's row, and every row of the jobs that need a re-run job (derived from the workflow).
    parts_rerun = [r for r in rerun["jobs_ran"] if r.startswith("part ")]
    assert len(parts_rerun) == 1 and "windows-amd64" in parts_rerun[0]
    assert {job_of(r) for r in rerun["jobs_ran"]} == needs_closure({"wheel", "merge", "smoke"})
    assert {f"merge {t}" for t in TARGETS} <= set(rerun["jobs_ran"])
    # Every asset of the first attempt is still there (the rehearsal compared their bytes: ok), and the rest added.
    assert set(failed["release_assets"]) < set(rerun["release_assets"])
    assert set(failed["pypi_files"]) < set(rerun["pypi_files"])
    assert all(s["ok"] and all(i["ok"] for i in s["installs"]) for s in (failed, rerun))


def test_rerun_all_jobs_rebuilds_every_part_and_changes_nothing(report):
    again, rerun = report[1]["re-run all jobs"], report[1]["re-run failed jobs"]
    assert again["ok"] and again["published"] == TARGETS
    assert len([r for r in again["jobs_ran"] if r.startswith("part ")]) == len(
        parts.select(parts.load(), published=True)
    )
    assert (again["release_assets"], again["pypi_files"]) == (rerun["release_assets"], rerun["pypi_files"])


def test_rehearse_names_what_it_lacks_and_the_command_that_installs_it():
    """Before any work: with no site-packages (python -S), pypiserver, twine and pyyaml are missing."""
    out = subprocess.run([sys.executable, "-S", "-m", "ci", "rehearse"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pypiserver, twine, pyyaml" in out.stderr and "pip install -r ci/requirements-ci.txt" in out.stderr
    assert "-m ci wheel venv .venv/build -r ci/requirements-build.txt ci/requirements-ci.txt" in out.stderr
