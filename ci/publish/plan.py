"""Publish what passed: which targets of a tag run go out, from the wheels its smoke jobs uploaded.

    python -m ci publish-plan --wheels wheelhouse --selection published [--jobs jobs.json] [--run-url URL]
                              --out plan.json [--summary FILE] [--notes FILE]
    python -m ci pypi-dir --plan plan.json --wheels wheelhouse --out pypi

A target's wheels (ci/matrix/parts.py merges: the one wheel of all its parts and the slim ones) exist only when
every part job of the target succeeded, its merge job merged them (it stops on a missing part) and its smoke job
rendered with the one wheel: only then does the smoke job upload them. A target (ci/matrix.toml [target.*])
publishes when every wheel the run's selection gives it is present: its wheels go out together and its manifest
(ci/publish/release.py) is written once. The default target's wheels (Linux x86-64) are required: without them
nothing publishes (the PyPI wheel most users get, and the documentation is built with it). The plan names each
target that did not publish with its failed jobs and their links, for the run's summary and the release notes: a
re-run of the failed jobs then completes the release.
"""

import argparse
import json
import os
import re
import shutil
import sys

from ci import matrix
from ci.matrix import parts as _parts
from ci.publish import release

SELECTIONS = {"published": {"published": True}, "pr": {"pr": True}, "all": {}}
WHEEL_NAME = re.compile(
    r"prerast-(?P<version>[^-+]+)(?:\+(?P<local>[^-]+))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
    r"(?P<plat>[^-]+)\.whl"
)
RERUN = "Re-run the failed jobs to complete the release."


class PlanError(Exception):
    """Nothing can be published; the message says why and what to do."""


def job_names(target_parts):
    """The run's jobs that make one target's wheels, as wheels.yml names them: a wheel job per part, the target's
    merge and smoke jobs."""
    target = target_parts[0].target.name
    return [f"part {p.id}" for p in target_parts] + [f"merge {target}", f"smoke {target}"]


def target_of_wheel(name, targets=None):
    """The target whose wheel the file `name` is (by its platform tag), among `targets` (default: the matrix's);
    None for a file that is no prerast wheel or of no target. The manylinux level is not compared: a wheel built
    here may carry a newer one."""
    m = WHEEL_NAME.fullmatch(os.path.basename(name))
    return matrix.target_of_tag(m.group("plat"), among=targets) if m else None


def _full_version(name):
    m = WHEEL_NAME.fullmatch(os.path.basename(name))
    return m.group("version") + (f"+{m.group('local')}" if m.group("local") else "")


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


def plan(wheel_names, selected, version, jobs=None):
    """{published: [targets], missing: [{target, wheels: [missing files], jobs: [{job, job_url, conclusion}]}],
    wheels: [files], required_missing: [targets]} for the wheel files present, of a run that built the parts
    `selected`. A missing target's jobs are those of its jobs the run's job list (`jobs`) shows not succeeded."""
    jobs = jobs or {}
    groups = _parts.by_target(selected)
    targets = {ps[0].target for ps in groups.values()}
    wanted = {
        (name, _full_version(w)): w for name, ps in groups.items() for w in _parts.target_wheels(ps, version)[name]
    }
    present = {}
    for name in sorted(wheel_names):
        target = target_of_wheel(name, targets)
        key = (target.name if target else None, _full_version(name) if target else None)
        if key in wanted:
            present.setdefault(key, name)
        else:
            print(
                f"publish-plan: {name} is not a prerast {version} wheel of this run's targets: left out",
                file=sys.stderr,
            )
    complete = [t for t in groups if all(key in present for key in wanted if key[0] == t)]
    default = [t for t, ps in groups.items() if ps[0].default_target]
    required = [t for t in default if t not in complete]
    published = [] if required else complete
    missing = []
    for t, ps in groups.items():
        if t in published:
            continue
        rows = []
        for job in job_names(ps) if jobs else []:
            found = jobs.get(job, {})
            if found.get("conclusion") != "success":
                rows.append({"job": job, "job_url": found.get("html_url"), "conclusion": found.get("conclusion")})
        absent = [wanted[key] for key in wanted if key[0] == t and key not in present]
        missing.append({"target": t, "wheels": absent, "jobs": rows})
    wheels = sorted(present[key] for key in present if key[0] in published)
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
        if not m["wheels"]:
            lines.append(f"- **{m['target']}**: its wheels passed, held back with the Linux x86-64 ones")
            continue
        failed = ", ".join(
            f"[{j['job']}]({j['job_url']})"
            if j["job_url"]
            else f"`{j['job']}`{' (' + j['conclusion'] + ')' if j['conclusion'] else ' (did not run)'}"
            for j in m["jobs"]
        )
        why = f"from {failed}" if failed else "its parts, merge or smoke test did not pass"
        lines.append(f"- **{m['target']}**: no wheels ({len(m['wheels'])} missing): {why}")
    if run_url:
        lines.append(f"\nThe run: {run_url}")
    return lines


def summary(p, run_url=None):
    """Markdown for $GITHUB_STEP_SUMMARY."""
    head = [f"## Publishing prerast {p['version']}", ""]
    if p["required_missing"]:
        head += [
            f"**Nothing publishes**: the Linux x86-64 wheels are required and "
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


def select_parts(selection):
    return _parts.select(_parts.load(), **SELECTIONS[selection])


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
    ap.add_argument(
        "--selection", choices=sorted(SELECTIONS), required=True, help="the cells the run built the parts of"
    )
    ap.add_argument("--jobs", help="the run's jobs (gh api .../actions/runs/ID/jobs --paginate): links to failures")
    ap.add_argument("--run-url", help="the run's page, named in the summary")
    ap.add_argument("--version", help="the version published (default: the package version)")
    ap.add_argument("--out", required=True, help="the plan, JSON")
    ap.add_argument("--summary", help="Markdown summary to append to (e.g. $GITHUB_STEP_SUMMARY)")
    ap.add_argument("--notes", help="the release notes to write")
    a = ap.parse_args(argv)
    p = plan(
        wheel_files(a.wheels),
        select_parts(a.selection),
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
            f"publish-plan: nothing publishes: the Linux x86-64 wheels are required and "
            f"{', '.join(p['required_missing'])} did not pass. {RERUN}",
            file=sys.stderr,
        )
        return 1
    return 0


def pypi_dir(p, wheels, out):
    """Copy the wheels PyPI takes (no local version: each target's one wheel; the slim ones, +cu12, +pt24cu121,
    stay on the pages) of the publishing targets into `out`; returns their names."""
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
