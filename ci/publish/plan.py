"""Publish what passed: which targets of a tag run go out, from the wheels its jobs uploaded.

    python -m ci publish-plan --wheels wheelhouse --selection published [--jobs jobs.json] [--run-url URL]
                              --out plan.json [--summary FILE] [--notes FILE]
    python -m ci pypi-dir --plan plan.json --wheels wheelhouse --out pypi

A wheel job uploads its artifact only when it succeeded, so the wheels present are the cells that passed. A
target (ci/matrix.toml [target.*]) publishes when every one of its selected cells passed: its wheels go out
together and its manifest (ci/publish/release.py) is written once. The Linux x86-64 stable wheels are required: without
them nothing publishes (they are the PyPI wheel most users get, and the documentation is built with one). The
plan names each cell that did not publish with its job's link, for the run's summary and the release notes: a
re-run of the failed jobs then completes the release.
"""

import argparse
import json
import os
import re
import shutil
import sys

from ci import matrix
from ci.publish import release

SELECTIONS = {"published": {"published": True}, "pr": {"pr": True}, "all": {}}
WHEEL_NAME = re.compile(
    r"prerast-(?P<version>[^-+]+)(?:\+(?P<local>[^-]+))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
    r"(?P<plat>[^-]+)\.whl"
)
RERUN = "Re-run the failed jobs to complete the release."


class PlanError(Exception):
    """Nothing can be published; the message says why and what to do."""


def job_name(cell):
    """The wheel job's name in the run (wheels.yml: name: torch {torch} {platform} {target})."""
    return f"torch {cell.torch} {cell.platform} {cell.target.name}"


def cell_of_wheel(name, cells):
    """The cell among `cells` whose wheel the file `name` is (by target, from its platform tag, and local version
    tag), or None. The manylinux level is not compared: a wheel built here may carry a newer one."""
    m = WHEEL_NAME.fullmatch(os.path.basename(name))
    if not m:
        return None
    target = matrix.target_of_tag(m.group("plat"), among={c.target for c in cells})
    return next((c for c in cells if c.target == target and (c.local_tag or None) == m.group("local")), None)


def read_jobs(path):
    """{job name: job} from GitHub's jobs list: one answer, `gh api --paginate`'s answers one after another, or
    a JSON list of pages or of jobs."""
    text, found, at = open(path).read(), [], 0
    decoder = json.JSONDecoder()
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        found += value if isinstance(value, list) else [value]
    jobs = [j for v in found for j in (v.get("jobs", [v]) if isinstance(v, dict) else [])]
    return {j["name"]: j for j in jobs if "name" in j}


def plan(wheel_names, cells, version, jobs=None):
    """{published: [targets], missing: [{target, cells: [{cell, job_url, conclusion}]}], wheels: [files],
    required_missing: [cells]} for the wheel files present."""
    jobs = jobs or {}
    present = {}
    for name in sorted(wheel_names):
        cell = cell_of_wheel(name, cells)
        m = WHEEL_NAME.fullmatch(os.path.basename(name))
        if cell and m.group("version") == version:
            present.setdefault(cell.id, name)
        else:
            print(
                f"publish-plan: {name} is not the prerast {version} wheel of a selected cell: left out", file=sys.stderr
            )
    targets = list(dict.fromkeys(c.target.name for c in cells))
    failed = {t: [c for c in cells if c.target.name == t and c.id not in present] for t in targets}
    required = [c.id for c in cells if c.default_target and c.kind == "stable" and c.id not in present]
    published = [] if required else [t for t in targets if not failed[t]]
    missing = []
    for t in targets:
        if t in published:
            continue
        rows = []
        for c in cells:
            if c.target.name == t and c.id not in present:
                job = jobs.get(job_name(c), {})
                rows.append(
                    {
                        "cell": c.id,
                        "job": job_name(c),
                        "job_url": job.get("html_url"),
                        "conclusion": job.get("conclusion"),
                    }
                )
        missing.append({"target": t, "cells": rows})
    wheels = sorted(present[c.id] for c in cells if c.target.name in published)
    return {
        "version": version,
        "published": published,
        "missing": missing,
        "wheels": wheels,
        "required_missing": required,
    }


def _missing_lines(p, run_url=None):
    lines = []
    for m in p["missing"]:
        failed = m["cells"]
        if not failed:
            lines.append(f"- **{m['target']}**: its wheels passed, held back with the Linux x86-64 stable ones")
            continue
        cells = ", ".join(
            f"[{c['cell']}]({c['job_url']})"
            if c["job_url"]
            else f"{c['cell']} (job `{c['job']}`{': ' + c['conclusion'] if c['conclusion'] else ''})"
            for c in failed
        )
        lines.append(f"- **{m['target']}**: no wheel from {cells}")
    if run_url:
        lines.append(f"\nThe run: {run_url}")
    return lines


def summary(p, run_url=None):
    """Markdown for $GITHUB_STEP_SUMMARY."""
    head = [f"## Publishing prerast {p['version']}", ""]
    if p["required_missing"]:
        head += [
            f"**Nothing publishes**: the Linux x86-64 stable wheels are required and "
            f"{', '.join(p['required_missing'])} did not pass.",
            "",
        ]
    else:
        head += [f"Published: {', '.join(p['published']) or 'nothing'} ({len(p['wheels'])} wheels).", ""]
    if p["missing"]:
        head += ["Not published:"] + _missing_lines(p, run_url) + ["", RERUN]
    return "\n".join(head) + "\n"


def notes(p, run_url=None):
    """The release notes: where the wheels are, and which targets are still to come."""
    text = [f"prerast {p['version']}. Wheels: see the documentation, Installing.", ""]
    if p["missing"]:
        text += ["Not published yet:"] + _missing_lines(p, run_url) + ["", RERUN]
    else:
        text += [f"Every target is published: {', '.join(p['published'])}."]
    return "\n".join(text) + "\n"


def select_cells(selection):
    return matrix.select(matrix.load(), **SELECTIONS[selection])


def wheel_paths(folder):
    """{file name: path} of the prerast wheels under `folder` (ci/publish/index.py finds them; the first of a name
    wins)."""
    from ci.publish import index

    found = {}
    for path in index.find_wheels([folder]):
        found.setdefault(os.path.basename(path), path)
    return found


def wheel_files(folder):
    """The names of the prerast wheels under `folder`."""
    return list(wheel_paths(folder))


def wheel_path(paths, name, folder):
    """paths[name] (paths: wheel_paths(folder)), or PlanError for a wheel of the plan the folder lacks."""
    if name not in paths:
        raise PlanError(f"{name} is in the plan but not under {folder}: make the plan from the same wheels")
    return paths[name]


def plan_main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ci publish-plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--wheels", required=True, help="the folder of the wheels the run's jobs uploaded")
    ap.add_argument("--selection", choices=sorted(SELECTIONS), required=True, help="the cells the run built")
    ap.add_argument("--jobs", help="the run's jobs (gh api .../actions/runs/ID/jobs --paginate): links to failures")
    ap.add_argument("--run-url", help="the run's page, named in the summary")
    ap.add_argument("--version", help="the version published (default: the package version)")
    ap.add_argument("--out", required=True, help="the plan, JSON")
    ap.add_argument("--summary", help="Markdown summary to append to (e.g. $GITHUB_STEP_SUMMARY)")
    ap.add_argument("--notes", help="the release notes to write")
    a = ap.parse_args(argv)
    p = plan(
        wheel_files(a.wheels),
        select_cells(a.selection),
        a.version or release.package_version(),
        read_jobs(a.jobs) if a.jobs else None,
    )
    with open(a.out, "w") as f:
        json.dump(p, f, indent=2, sort_keys=True)
    if a.summary:
        with open(a.summary, "a") as f:
            f.write(summary(p, a.run_url))
    if a.notes:
        with open(a.notes, "w") as f:
            f.write(notes(p, a.run_url))
    print(summary(p, a.run_url))
    if p["required_missing"]:
        print(
            f"publish-plan: nothing publishes: the Linux x86-64 stable wheels are required and "
            f"{', '.join(p['required_missing'])} did not pass. {RERUN}",
            file=sys.stderr,
        )
        return 1
    return 0


def pypi_dir(p, wheels, out):
    """Copy the wheels PyPI takes (no local version: +cu12 and +pt24cu121 stay on the pages) of the publishing
    targets into `out`; returns their names."""
    names = [n for n in p["wheels"] if not WHEEL_NAME.fullmatch(n).group("local")]
    if not names:
        raise PlanError(f"no wheel for PyPI: the plan publishes {p['published'] or 'no target'}")
    os.makedirs(out, exist_ok=True)
    paths = wheel_paths(wheels)
    for n in names:
        shutil.copy(wheel_path(paths, n, wheels), os.path.join(out, n))
    return names


def pypi_main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ci pypi-dir", description=pypi_dir.__doc__)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--wheels", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        names = pypi_dir(json.load(open(a.plan)), a.wheels, a.out)
    except PlanError as e:
        print(f"pypi-dir: {e}", file=sys.stderr)
        return 1
    print(f"pypi-dir: {len(names)} wheels in {a.out}: " + ", ".join(names))
    return 0
