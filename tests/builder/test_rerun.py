"""The rehearsal's model of GitHub's re-runs (ci/publish/rerun.py): which jobs a re-run runs again (every job that
needs a re-run job, transitively, read from the workflow's `needs`), and the run's artifacts across attempts
(`overwrite: true` replaces; a download by run id sees every attempt, the default one only this attempt's)."""

import os
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.matrix import parts  # noqa: E402
from ci.publish import rehearse, rerun  # noqa: E402

WORKFLOW = yaml.safe_load(open(os.path.join(ROOT, ".github", "workflows", "wheels.yml")))["jobs"]


def test_a_rerun_job_brings_every_job_that_needs_it_transitively():
    jobs = {"a": {}, "b": {"needs": "a"}, "c": {"needs": ["b", "d"]}, "d": {}, "e": {"needs": ["d"]}}
    assert rerun.with_dependents(jobs, ["a"]) == ["a", "b", "c"]
    assert rerun.with_dependents(jobs, ["d"]) == ["c", "d", "e"]
    assert rerun.with_dependents(jobs, []) == []


def test_the_workflows_rerun_set_is_its_needs_closure():
    """Checked against a walk of the workflow written here: a job runs again when any job it needs does."""
    closure, changed = {"wheel"}, True
    while changed:
        more = {n for n, j in WORKFLOW.items() if set(j.get("needs", [])) & closure} - closure
        closure |= more
        changed = bool(more)
    assert set(rerun.with_dependents(WORKFLOW, ["wheel"])) == closure
    assert {"release", "pypi", "pages"} <= closure  # the publishing jobs re-run after any part


def test_rerun_rows_are_the_failed_part_and_every_row_of_the_dependent_jobs():
    selected = parts.select(parts.load(), published=True)
    failed = ["part binding-stable-windows-amd64", "merge windows-amd64", "smoke windows-amd64"]
    rows = rehearse.rerun_rows(WORKFLOW, selected, failed)
    assert [r for r in rows if r.startswith("part ")] == ["part binding-stable-windows-amd64"]
    targets = parts.by_target(selected)
    assert {r for r in rows if r.startswith(("merge ", "smoke "))} == {
        f"{j} {t}" for t in targets for j in ("merge", "smoke")
    }
    assert {r for r in rows if " " not in r} == set(rerun.with_dependents(WORKFLOW, ["wheel"])) - set(rerun.MATRIX_JOBS)


def test_artifacts_of_a_run_across_attempts(tmp_path):
    store = rerun.Artifacts(str(tmp_path / "store"))
    for name, attempt, text in (("part-a", 1, "a1"), ("part-b", 1, "b1"), ("part-a", 2, "a2")):
        f = tmp_path / f"{name}-{attempt}.whl"
        f.write_text(text)
        store.upload(name, attempt, [str(f)])
    assert store.download("part-*", 2, False, str(tmp_path / "this")) == ["part-a"]  # this attempt's only
    assert store.download("part-*", 2, True, str(tmp_path / "run")) == ["part-a", "part-b"]  # by run id: all
    assert (tmp_path / "run" / "part-a-2.whl").exists() and not (tmp_path / "run" / "part-a-1.whl").exists()
    with pytest.raises(ValueError, match="no files found"):
        store.upload("empty", 3, [])


def test_workflow_values_are_filled_in():
    assert rerun.fill("part-${{ matrix.target }}-*", {"matrix.target": "macos-arm64"}) == "part-macos-arm64-*"
