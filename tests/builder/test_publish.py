"""Publish what passed (ci/publish/plan.py): which targets of a tag run publish given the wheels present, what the
summary and the notes say, which wheels go to PyPI; and the workflow's publishing jobs: when they run, and that
their `python -m ci` commands are the ones `python -m ci rehearse` runs."""

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix
from ci.publish import plan as publish, rehearse  # noqa: E402
from test_workflow import jobs  # noqa: E402

CELLS = matrix.select(matrix.load(), published=True)
TARGETS = ["linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64"]


def wheels_without(*left_out):
    """The wheel file names of every published cell but those named (cell ids or target names)."""
    return [c.wheel_name("0.2.0") for c in CELLS if c.id not in left_out and c.target.name not in left_out]


# (cells or targets whose wheels are missing) -> targets that publish
TABLE = [
    ((), TARGETS),
    (("windows-amd64",), ["linux-x86_64", "linux-aarch64", "macos-arm64"]),
    (("2.14.1+cu126-windows-amd64",), ["linux-x86_64", "linux-aarch64", "macos-arm64"]),
    (("2.14.1+cpu-macos-arm64", "2.14.1+cu126-linux-aarch64"), ["linux-x86_64", "windows-amd64"]),
    (("2.4.0+cu121",), ["linux-aarch64", "windows-amd64", "macos-arm64"]),  # a classic cell: x86-64 waits
    (("2.14.1+cu130",), []),  # the Linux x86-64 stable wheels are required
    (("2.14.1+cu126", "macos-arm64"), []),
    (("linux-aarch64", "windows-amd64", "macos-arm64"), ["linux-x86_64"]),
]


def needs_every_job(names, cells, version, jobs=None):
    """The rule the workflow had: one missing wheel and nothing publishes."""
    p = publish.plan(names, cells, version, jobs)
    if p["missing"]:
        p["published"], p["wheels"] = [], []
    return p


@pytest.mark.parametrize("left_out,published", TABLE)
def test_a_target_publishes_when_all_its_cells_passed(left_out, published):
    p = publish.plan(wheels_without(*left_out), CELLS, "0.2.0")
    assert p["published"] == published
    assert [m["target"] for m in p["missing"]] == [t for t in TARGETS if t not in published]
    assert p["wheels"] == sorted(c.wheel_name("0.2.0") for c in CELLS if c.target.name in published)
    assert bool(p["required_missing"]) == (published == [])


def test_the_table_would_catch_the_needs_every_job_rule():
    wrong = [
        (left_out, published)
        for left_out, published in TABLE
        if needs_every_job(wheels_without(*left_out), CELLS, "0.2.0")["published"] != published
    ]
    assert len(wrong) == 5  # every row where something is missing but something still publishes


def test_wheels_match_their_cells_by_target_and_local_tag():
    x86 = matrix.find("2.14.1+cu130")
    # A wheel built here may carry a newer manylinux level than the CI's.
    assert publish.cell_of_wheel("prerast-0.2.0-cp310-abi3-manylinux_2_34_x86_64.whl", CELLS) == x86
    assert (
        publish.cell_of_wheel("prerast-0.2.0+cu12-cp310-abi3-win_amd64.whl", CELLS).id == "2.14.1+cu126-windows-amd64"
    )
    assert publish.cell_of_wheel("prerast-0.2.0+cu11-cp310-abi3-win_amd64.whl", CELLS) is None
    # A wheel of another version is no cell's wheel in this release: left out, and the required cell is missing.
    names = wheels_without("2.14.1+cu130") + [x86.wheel_name("0.1.9")]
    assert publish.plan(names, CELLS, "0.2.0")["required_missing"] == ["2.14.1+cu130"]


def test_summary_and_notes_name_each_failed_cell_with_its_jobs_link(tmp_path):
    jobs_file = tmp_path / "jobs.json"
    windows = [c for c in CELLS if c.target.name == "windows-amd64"]
    pages = [
        {
            "total_count": 2,
            "jobs": [
                {
                    "name": publish.job_name(c),
                    "conclusion": "failure",
                    "html_url": f"https://github.com/o/r/actions/runs/7/job/{i}",
                }
            ],
        }
        for i, c in enumerate(windows)
    ]
    jobs_file.write_text("".join(json.dumps(p) for p in pages))  # gh api --paginate: one answer per page
    (tmp_path / "wheels").mkdir()
    for name in wheels_without("windows-amd64"):
        (tmp_path / "wheels" / name).write_bytes(b"")
    args = [
        "--wheels",
        str(tmp_path / "wheels"),
        "--selection",
        "published",
        "--jobs",
        str(jobs_file),
        "--out",
        str(tmp_path / "plan.json"),
        "--summary",
        str(tmp_path / "summary.md"),
        "--notes",
        str(tmp_path / "n.md"),
        "--version",
        "0.2.0",
    ]
    assert publish.plan_main(args) == 0
    plan = json.load(open(tmp_path / "plan.json"))
    assert plan["missing"][0]["cells"][1]["job_url"] == "https://github.com/o/r/actions/runs/7/job/1"
    for text in ((tmp_path / "summary.md").read_text(), (tmp_path / "n.md").read_text()):
        assert "**windows-amd64**" in text and publish.RERUN in text
        for i, c in enumerate(windows):
            assert f"[{c.id}](https://github.com/o/r/actions/runs/7/job/{i})" in text
    os.remove(tmp_path / "wheels" / matrix.find("2.14.1+cu126").wheel_name("0.2.0"))
    assert publish.plan_main(args) == 1
    assert "Nothing publishes" in (tmp_path / "summary.md").read_text().split("## Publishing")[-1]
    assert json.load(open(tmp_path / "plan.json"))["published"] == []


def test_pypi_gets_the_untagged_wheels_of_the_publishing_targets(tmp_path):
    (tmp_path / "wheels").mkdir()
    for name in wheels_without():
        (tmp_path / "wheels" / name).write_bytes(b"")
    plan = publish.plan(wheels_without("macos-arm64"), CELLS, "0.2.0")
    names = publish.pypi_dir(plan, str(tmp_path / "wheels"), str(tmp_path / "pypi"))
    assert (
        sorted(os.listdir(tmp_path / "pypi"))
        == sorted(names)
        == sorted(c.wheel_name("0.2.0") for c in CELLS if not c.local_tag and c.target.name != "macos-arm64")
    )
    assert len(names) == 3  # Linux x86-64 and aarch64, Windows: CUDA 13, no local tag
    with pytest.raises(publish.PlanError, match="no wheel for PyPI"):
        publish.pypi_dir(
            publish.plan(wheels_without("2.14.1+cu130"), CELLS, "0.2.0"), str(tmp_path / "wheels"), str(tmp_path / "p2")
        )


PUBLISH_IF = "${{ !cancelled() && github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v') }}"


def job_condition(job):
    """The job's `if:` as written (yaml reads `${{ ... }}` as the string)."""
    return jobs()[job]["if"]


def test_publishing_jobs_run_on_a_pushed_tag_also_after_a_failed_wheel_job():
    """Not cancelled() (a failed wheel job does not skip them, as the implicit success() would), only on a pushed
    v* tag (never a manual run on a tag ref), and pypi and pages only after the release job succeeded (they publish
    what it published)."""
    assert job_condition("release") == PUBLISH_IF
    after_release = PUBLISH_IF[:-3] + " && needs.release.result == 'success' }}"
    assert job_condition("pypi") == job_condition("pages") == after_release
    for job in ("pypi", "pages"):
        assert "release" in jobs()[job]["needs"]
    (publish_step,) = [s for s in jobs()["pypi"]["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi")]
    assert publish_step["with"]["skip-existing"] is True


def ci_lines(job):
    # A fact a step reads into its shell ($(python -m ci fact NAME)) is no publishing command.
    return [
        line.strip()
        for s in jobs()[job]["steps"]
        for line in s.get("run", "").splitlines()
        if "python -m ci " in re.sub(r"\$\(python -m ci fact [\w-]+\)", "", line)
    ]


def test_the_rehearsal_runs_the_workflows_publishing_commands():
    """Every `python -m ci` line of the release, pypi and pages jobs is one the rehearsal runs (it runs the steps
    themselves), and the workflow's publishing path is made of these commands."""
    rehearsed = rehearse.commands()
    for job in rehearse.JOBS:
        assert rehearsed[job] == ci_lines(job), job
    every = " ".join(sum(rehearsed.values(), []))
    for command in ("publish-plan", "release-upload", "pypi-dir", "release-manifests", "index"):
        assert f"python -m ci {command} " in every
    # Can fail: a step the rehearsal would pass over (one with a GitHub expression in its script).
    steps = jobs()["release"]["steps"]
    broken = [
        dict(s, run=s["run"] + "\necho ${{ github.sha }}") if "release-upload" in s.get("run", "") else s for s in steps
    ]
    assert rehearse.commands(dict(jobs(), release=dict(jobs()["release"], steps=broken)))["release"] != ci_lines(
        "release"
    )
