"""Publish what passed (ci/publish/plan.py): which targets of a tag run publish given the merged wheels present (a
target whose parts all built, merged and passed its smoke test), what the summary and the notes say, which wheels
go to PyPI; and the workflow's publishing jobs: when they run, and that
their `python -m ci` commands are the ones `python -m ci rehearse` runs."""

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.matrix import parts
from ci.publish import plan as publish, rehearse  # noqa: E402
from test_workflow import jobs  # noqa: E402

PARTS = parts.select(parts.load(), published=True)
TARGETS = ["linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64"]
WHEELS = parts.target_wheels(PARTS, "0.2.0")


def wheels_without(*left_out):
    """The wheel file names of every published target's merges but those named (targets, or local tags of the
    default target's wheels: 'pt24cpu', '' for its one wheel)."""
    names = []
    for target, wheels in WHEELS.items():
        for w in wheels:
            local = w.split("-")[1].partition("+")[2]
            if target not in left_out and not (target == "linux-x86_64" and local in left_out):
                names.append(w)
    return names


# (targets or default-target wheels whose files are missing) -> targets that publish
TABLE = [
    ((), TARGETS),
    (("windows-amd64",), ["linux-x86_64", "linux-aarch64", "macos-arm64"]),
    (("macos-arm64", "linux-aarch64"), ["linux-x86_64", "windows-amd64"]),
    (("pt24cpu",), []),  # one slim wheel of Linux x86-64: the required target is incomplete
    (("",), []),  # the one wheel of Linux x86-64 (PyPI's): nothing publishes
    (("linux-aarch64", "windows-amd64", "macos-arm64"), ["linux-x86_64"]),
]


def needs_every_job(names, selected, version, jobs=None):
    """The rule the workflow had: one missing wheel and nothing publishes."""
    p = publish.plan(names, selected, version, jobs)
    if p["missing"]:
        p["published"], p["wheels"] = [], []
    return p


@pytest.mark.parametrize("left_out,published", TABLE)
def test_a_target_publishes_when_all_its_parts_built_and_merged(left_out, published):
    p = publish.plan(wheels_without(*left_out), PARTS, "0.2.0")
    assert p["published"] == published
    assert [m["target"] for m in p["missing"]] == [t for t in TARGETS if t not in published]
    assert p["wheels"] == sorted(w for t in published for w in WHEELS[t])
    assert bool(p["required_missing"]) == (published == [])


def test_the_table_would_catch_the_needs_every_job_rule():
    wrong = [
        (left_out, published)
        for left_out, published in TABLE
        if needs_every_job(wheels_without(*left_out), PARTS, "0.2.0")["published"] != published
    ]
    assert len(wrong) == 3  # every row where something is missing but something still publishes


def test_a_target_with_a_missing_part_does_not_publish():
    """A failed part job leaves its target without merged wheels (the merge stops on the missing part, the smoke
    job never uploads): the target is named with that job's link, and the others publish."""
    jobs = {
        name: {"name": name, "conclusion": "success", "html_url": f"https://x/job/{i}"}
        for i, name in enumerate(n for ps in parts.by_target(PARTS).values() for n in publish.job_names(ps))
    }
    jobs["part binding-stable-linux-aarch64"]["conclusion"] = "failure"
    for name in ("merge linux-aarch64", "smoke linux-aarch64"):
        jobs[name]["conclusion"] = "skipped"
    p = publish.plan(wheels_without("linux-aarch64"), PARTS, "0.2.0", jobs)
    assert p["published"] == ["linux-x86_64", "windows-amd64", "macos-arm64"]
    (missing,) = p["missing"]
    assert missing["target"] == "linux-aarch64" and missing["wheels"] == WHEELS["linux-aarch64"]
    assert [j["job"] for j in missing["jobs"]] == [
        "part binding-stable-linux-aarch64",
        "merge linux-aarch64",
        "smoke linux-aarch64",
    ]
    line = publish.summary(p).split("Not published:")[1]
    assert "[part binding-stable-linux-aarch64](https://x/job/" in line and "part kernels-cpu" not in line
    # Its part wheels are no wheels of the plan: a part is never published, even when it is there.
    part = parts.find("binding-stable-linux-aarch64", PARTS).wheel_name("0.2.0")
    assert publish.plan(wheels_without("linux-aarch64") + [part], PARTS, "0.2.0")["published"] == p["published"]


def test_wheels_match_their_targets_by_platform_tag_and_local_version():
    # A wheel built here may carry a newer manylinux level than the CI's.
    local = [w.replace("manylinux_2_28_x86_64", "manylinux_2_34_x86_64") for w in WHEELS["linux-x86_64"]]
    names = local + [w for t in TARGETS[1:] for w in WHEELS[t]]
    assert publish.plan(names, PARTS, "0.2.0")["published"] == TARGETS
    assert publish.target_of_wheel("prerast-0.2.0+cu12-py3-none-win_amd64.whl").name == "windows-amd64"
    assert publish.target_of_wheel("prerast-0.2.0-py3-none-win32.whl") is None
    # A wheel of another version, or a slim one the run does not make, is no wheel of this release: left out.
    old = WHEELS["linux-x86_64"][0].replace("0.2.0", "0.1.9")
    assert publish.plan(wheels_without("") + [old], PARTS, "0.2.0")["required_missing"] == ["linux-x86_64"]
    cu11 = WHEELS["windows-amd64"][0].replace("0.2.0-", "0.2.0+cu11-")
    assert cu11 not in publish.plan(wheels_without() + [cu11], PARTS, "0.2.0")["wheels"]


def test_summary_and_notes_name_each_failed_job_with_its_link(tmp_path):
    jobs_file = tmp_path / "jobs.json"
    windows = publish.job_names(parts.by_target(PARTS)["windows-amd64"])
    pages = [
        {
            "total_count": len(windows),
            "jobs": [
                {
                    "name": name,
                    "conclusion": "failure" if i == 1 else "skipped" if not name.startswith("part ") else "success",
                    "html_url": f"https://github.com/o/r/actions/runs/7/job/{i}",
                }
            ],
        }
        for i, name in enumerate(windows)
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
    (missing,) = plan["missing"]
    assert [j["job"] for j in missing["jobs"]] == [windows[1], "merge windows-amd64", "smoke windows-amd64"]
    assert missing["jobs"][0]["job_url"] == "https://github.com/o/r/actions/runs/7/job/1"
    for text in ((tmp_path / "summary.md").read_text(), (tmp_path / "n.md").read_text()):
        assert "**windows-amd64**" in text and publish.RERUN in text
        for i, name in enumerate(windows):
            assert (f"[{name}](https://github.com/o/r/actions/runs/7/job/{i})" in text) == (i == 1 or i >= 4), name
    os.remove(tmp_path / "wheels" / WHEELS["linux-x86_64"][0])
    assert publish.plan_main(args) == 1
    assert "Nothing publishes" in (tmp_path / "summary.md").read_text().split("## Publishing")[-1]
    assert json.load(open(tmp_path / "plan.json"))["published"] == []


def test_pypi_gets_the_one_wheel_of_each_publishing_target(tmp_path):
    (tmp_path / "wheels").mkdir()
    for name in wheels_without():
        (tmp_path / "wheels" / name).write_bytes(b"")
    plan = publish.plan(wheels_without("macos-arm64"), PARTS, "0.2.0")
    names = publish.pypi_dir(plan, str(tmp_path / "wheels"), str(tmp_path / "pypi"))
    assert sorted(os.listdir(tmp_path / "pypi")) == sorted(names) == sorted(WHEELS[t][0] for t in TARGETS[:3])
    assert not [n for n in names if "+" in n]  # no slim wheel: PyPI refuses local versions
    with pytest.raises(publish.PlanError, match="no wheel for PyPI"):
        publish.pypi_dir(
            publish.plan(wheels_without(""), PARTS, "0.2.0"), str(tmp_path / "wheels"), str(tmp_path / "p2")
        )


PUBLISH_IF = "${{ !cancelled() && github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v') }}"


def job_condition(job):
    """The job's `if:` as written (yaml reads `${{ ... }}` as the string)."""
    return jobs()[job]["if"]


def test_publishing_jobs_run_on_a_pushed_tag_also_after_a_failed_wheel_job():
    """Not cancelled() (a failed wheel job does not skip them, as the implicit success() would), only on a pushed
    v* tag (never a manual run on a tag ref), and pypi and pages only after the release job succeeded (they publish
    what it published)."""
    # The release also needs the tag check and preflight to have passed (tests/builder/test_workflow.py runs every
    # job's needs and if through the outcomes of a tag run).
    checks = "needs.matrix.result == 'success' && needs.preflight.result == 'success' && "
    assert job_condition("release") == PUBLISH_IF.replace("!cancelled() && ", "!cancelled() && " + checks)
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
