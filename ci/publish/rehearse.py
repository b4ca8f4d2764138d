"""A release rehearsal: the publishing jobs of a tag run (release, pypi, pages of .github/workflows/wheels.yml), run
here with stand-ins for GitHub only, then `pip install prerast` from what they published.

    python -m ci rehearse [--wheels DIR] [--parts DIR] [--no-reruns] [--report FILE] [--work DIR] [--keep]

The jobs' own `run:` steps that call `python -m ci` run as GitHub runs them (bash -eo pipefail, the step's env),
with `gh` the stand-in ci/publish/gh_standin.py over a folder. Their `uses:` steps are played here: download-artifact
copies the run's wheels, gh-action-pypi-publish is `twine check` and `twine upload --skip-existing` to a real
pypiserver on 127.0.0.1, upload-pages-artifact/deploy-pages serve the site folder over HTTP on 127.0.0.1 (next to
the release assets, at the URLs the manifests give). Not rehearsed: the documentation build (torch from
download.pytorch.org and sphinx: `bash ci/test.sh` builds the docs). configure-pages gives the
base_url GitHub gives this repository, so the Pages URL check runs too.

Wheels: those of DIR (the one wheel of this machine's target, Linux x86-64, untagged, is needed: the installs use
it; `python -m ci wheel-local` makes it), else one merged here of the real parts (below); every other wheel that
the published parts' merges make (ci/matrix/parts.py: each target's one wheel and slim wheels) is made from it, with
the file name, tags, version and the bindings and kernel libraries in its build metadata of that wheel: listed,
uploaded and indexed, and installed here only where its libraries are the given wheel's (this target's +cpu).

Then the re-runs (ci/publish/rerun.py): a run whose part job failed, "Re-run failed jobs", "Re-run all jobs", from
real parts (the Linux x86-64 CPU kernels and stable binding: --parts, else build/wheel-local/parts when built from
this checkout, else built here) and stand-ins made of them, merged by the workflow's own merge step.

Scenarios, each checked: clean (every target publishes); the same run again (nothing changes); one target's
wheels missing (the others publish, it is named in the plan, the summary and the notes); the re-run with it
present (the release completes, nothing replaced); a rebuilt wheel with other bytes (the upload stops and names
both sha256). After each publishing scenario: pip install from the local index and from the pages into fresh
virtualenvs (torch shared from ci/builder/shared_torch.py), each rendering a small scene on the CPU.
"""

import argparse
import contextlib
import functools
import http.server
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile

from ci.builder import merge, shared_torch
from ci.matrix import parts as _parts
from ci.publish import plan as publish, release, rerun
from prerast_meta import compat, integrity, repair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "wheels.yml")
JOBS = ("release", "pypi", "pages")
DEFAULT_PARTS = os.path.join(ROOT, "build", "wheel-local", "parts")
REPO = "prerast/prerast"
MISSING_TARGET = "windows-amd64"
SMOKE = """
import os, sys, prerast
from prerast import _demo
assert os.path.realpath(prerast.__file__).startswith(os.path.realpath(sys.prefix)), prerast.__file__
img, _ = _demo.render("cpu", 32)
assert img.any(), "the demo scene rendered nothing"
print("prerast", prerast.__version__, "rendered", img.shape)
"""


def log(msg):
    print(f"rehearse: {msg}", flush=True)


def workflow_jobs():
    import yaml

    with open(WORKFLOW) as f:
        return yaml.safe_load(f)["jobs"]


def rehearsed(step):
    """None when the rehearsal runs this `run:` step, else why not."""
    # A step that only reads a fact ($(python -m ci fact NAME)) runs no publishing command.
    if not any(line.strip().startswith("python -m ci ") for line in step["run"].splitlines()):
        return "it calls no `python -m ci` command (the documentation build: bash ci/test.sh builds the docs)"
    if "${{" in step["run"]:
        return "its script has a GitHub expression"
    return None


def commands(jobs=None):
    """{job: [the `python -m ci ...` lines of the steps the rehearsal runs]} (a test compares them with the
    workflow's)."""
    jobs = jobs or workflow_jobs()
    return {
        name: [
            line.strip()
            for s in jobs[name]["steps"]
            if "run" in s and not rehearsed(s)
            for line in s["run"].splitlines()
            if line.strip().startswith("python -m ci ")
        ]
        for name in JOBS
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256(path):
    return integrity.digest(path)[1]


def tree_digest(folder):
    """{relative path: sha256} of every file under `folder`."""
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            out[os.path.relpath(os.path.join(d, f), folder)] = sha256(os.path.join(d, f))
    return out


# Synthetic wheels: the base wheel's files as another merge's wheel.


def _binding_entry(part):
    """A binding's fields in _build_info.json, as ci/builder/merge.py writes them for the part."""
    cell = part.cell
    return {
        "abi": part.abi,
        "torch_floor": compat.floor_text() if part.abi == "stable" else None,
        "torch_version": cell.torch_build,
        "cuda_version": cell.cuda,
        "cxx11_abi": True,
    }


def synthetic_info(info, merge, full):
    """The base wheel's build metadata as `merge`'s wheel of version `full`: its bindings (the first at the top
    level, as merge puts it) and kernel libraries (the base's entry of that compute, else a copy of its CPU one:
    the index reads the keys; the libraries stay the base's)."""
    bindings = [p for p in merge.parts if p.kind == "binding"]
    base_kernels = info.get("kernels") or {}
    cpu = base_kernels.get("cpu", {"library": info.get("library"), "cuda_version": None, "cuda_archs": []})
    kernels = {
        p.compute: base_kernels.get(p.compute, dict(cpu, cuda_version=p.toolkit or None, cuda_archs=list(p.archs)))
        for p in merge.parts
        if p.kind == "kernels"
    }
    info = dict(info, **_binding_entry(bindings[0]), prerast_version=full, kernels=kernels)
    info["bindings"] = [dict(_binding_entry(b), library=info.get("library"), cuda_library=None) for b in bindings[1:]]
    return info


def synthetic_wheel(base, merge, version, out, extra=b""):
    """A copy of wheel `base` made into `merge`'s wheel of `version`: file name, dist-info, tags and build metadata
    of that wheel; `extra` bytes added make the same name with other bytes."""
    full = version + (f"+{merge.local_tag}" if merge.local_tag else "")
    name = merge.wheel_name(version)
    plat = merge.target.plat
    files = {}
    with zipfile.ZipFile(base) as z:
        old_info = next(n.split("/")[0] for n in z.namelist() if n.split("/")[0].endswith(".dist-info"))
        new_info = f"prerast-{full}.dist-info"
        for n in z.namelist():
            if n.endswith("/"):
                continue
            data = z.read(n)
            new = n.replace(old_info + "/", new_info + "/", 1)
            if n == "prerast/_build_info.json":
                data = json.dumps(synthetic_info(json.loads(data), merge, full), indent=2, sort_keys=True).encode()
            elif n == f"{old_info}/WHEEL":
                data = re.sub(rb"(?m)^Tag: .*$", f"Tag: {compat.tags_for(plat)}".encode(), data)
            elif n == f"{old_info}/METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {full}".encode(), data)
            files[new] = data
    if extra:
        files["prerast/_rebuilt.txt"] = extra
    record = f"{new_info}/RECORD"
    files[record] = "".join(f"{n},{repair.record_hash(d)},{len(d)}\n" for n, d in files.items() if n != record).encode()
    path = os.path.join(out, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for n, d in files.items():
            z.writestr(zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0)), d)
    return path


def all_merges(selected):
    """Every wheel the merges of `selected` (the run's parts) make, target by target."""
    return [m for ps in _parts.by_target(selected).values() for m in _parts.merges(ps)]


def wheel_set(given, selected, version, out):
    """Every wheel the merges of the `selected` parts make, in `out`: those in `given`, the others synthetic;
    returns the base wheel (this machine's target's one wheel, which the installs use)."""
    os.makedirs(out, exist_ok=True)
    merges = all_merges(selected)
    targets = {m.target for m in merges}
    by_name = {}
    for name, path in publish.wheel_paths(given).items():
        target = publish.target_of_wheel(name, targets)
        if target:
            by_name.setdefault((target.name, name.rsplit("-", 1)[0]), path)
    # The installs run here: the base wheel is this machine's target's one wheel, untagged.
    base = next((m for m in merges if m.target.runs_here() and not m.slim), None)
    if base is None:
        raise SystemExit(
            f"rehearse: no target of ci/matrix.toml's published parts builds for this machine "
            f"({sys.platform}, {platform.machine()}): rehearse on a machine the matrix builds for"
        )

    def given_of(m):
        return by_name.get((m.target.name, m.wheel_name(version).rsplit("-", 1)[0]))

    if given_of(base) is None:
        raise SystemExit(
            f"rehearse: no prerast {version} one wheel of {base.target.name} in {given} "
            f"({base.wheel_name(version)} or another manylinux level): make one with "
            "`python -m ci wheel-local`, or leave out --wheels"
        )
    made = []
    for m in merges:
        if given_of(m):
            shutil.copy(given_of(m), out)
        else:
            synthetic_wheel(given_of(base), m, version, out)
            made.append(m.wheel_name(version))
    log(f"{len(merges) - len(made)} wheels given, {len(made)} synthetic (other targets and slim wheels)")
    return os.path.join(out, os.path.basename(given_of(base)))


class World:
    """What GitHub and PyPI keep between runs: the releases (gh stand-in), the PyPI files, the deployed pages; with
    the pages and the release assets served over HTTP and a pypiserver, on 127.0.0.1."""

    def __init__(self, folder):
        self.folder = folder
        self.artifacts = {}  # {(run id, artifact name): the attempts that uploaded it}: GitHub keeps them per run
        self.gh, self.pypi, self.www = (os.path.join(folder, n) for n in ("gh", "pypi", "www"))
        for d in (self.gh, self.pypi, self.www):
            os.makedirs(d, exist_ok=True)
        downloads = os.path.join(self.www, REPO, "releases")
        os.makedirs(downloads)
        os.symlink(self.gh, os.path.join(downloads, "download"))
        handler = functools.partial(Quiet, directory=self.www)
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.server_url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.pypi_port = free_port()
        self.pypiserver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pypiserver",
                "run",
                "-i",
                "127.0.0.1",
                "-p",
                str(self.pypi_port),
                "-a",
                ".",
                "-P",
                ".",
                self.pypi,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(folder, "pypiserver.log"), "w"),
        )
        self.pypi_url = f"http://127.0.0.1:{self.pypi_port}"
        for _ in range(100):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.pypi_url + "/simple/", timeout=1).close()
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"rehearse: pypiserver did not start (see {folder}/pypiserver.log)")

    def close(self):
        self.http.shutdown()
        self.http.server_close()
        self.pypiserver.terminate()
        self.pypiserver.wait(10)

    def state(self, tag):
        """What a scenario may change: the release's assets and notes, the PyPI files, the deployed pages."""
        rels = (
            {r["tagName"]: r for r in json.load(open(os.path.join(self.gh, "releases.json")))}
            if os.path.exists(os.path.join(self.gh, "releases.json"))
            else {}
        )
        assets = tree_digest(os.path.join(self.gh, tag)) if tag in rels else {}
        site = os.path.join(self.www, "site")
        return {
            "assets": assets,
            "notes": rels.get(tag, {}).get("body"),
            "pypi": tree_digest(self.pypi),
            "pages": tree_digest(site) if os.path.isdir(site) else {},
        }


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def expand(value, context):
    """A step's env value with its ${{ github.X }} and ${{ steps.ID.outputs.X }} filled in from `context`."""

    def one(m):
        if m.group(1) not in context:
            raise SystemExit(
                f"rehearse: the workflow uses ${{{{ {m.group(1)} }}}}, which the rehearsal does "
                "not provide: add it to the context in ci/publish/rehearse.py"
            )
        return context[m.group(1)]

    return re.sub(r"\$\{\{\s*((?:github\.|steps\.[\w-]+\.outputs\.)\w+)\s*\}\}", one, str(value))


def github_pages_url(repository):
    """What actions/configure-pages reports as base_url for a project repository's site without a custom domain:
    https://<owner>.github.io/<name> (GitHub's rule, written here independently of prerast_meta.compat)."""
    owner, name = repository.split("/")
    return f"https://{owner.lower()}.github.io/{name}"


def run_jobs(world, wheels, tag, run_id, attempt, work, jobs_api, rebuilt=None):
    """The publishing jobs of one run attempt; returns {job: {'ok', 'output', 'dir'}} (a job after a failed
    release is skipped, as its `needs.release.result == 'success'` says)."""
    bin_dir = os.path.join(work, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for name, target in (("python", ""), ("gh", os.path.join(ROOT, "ci", "publish", "gh_standin.py"))):
        with open(os.path.join(bin_dir, name), "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" {target} "$@"\n')
        os.chmod(os.path.join(bin_dir, name), 0o755)
    api = os.path.join(world.gh, "api", "repos", REPO, "actions", "runs", str(run_id))
    os.makedirs(api, exist_ok=True)
    with open(os.path.join(api, "jobs.json"), "w") as f:
        json.dump(jobs_api, f)
    github = {
        "token": "rehearsal",
        "repository": REPO,
        "server_url": world.server_url,
        "ref_name": tag,
        "run_id": str(run_id),
        "run_attempt": str(attempt),
        "event_name": "push",
        "ref": f"refs/tags/{tag}",
    }
    context = {f"github.{k}": v for k, v in github.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_", "PIP_"))}
    env.update(
        PATH=bin_dir + os.pathsep + os.environ["PATH"],
        PYTHONPATH=ROOT,
        GH_STANDIN_DIR=world.gh,
        GITHUB_REF_NAME=tag,
        GITHUB_REF=f"refs/tags/{tag}",
        GITHUB_REPOSITORY=REPO,
        GITHUB_EVENT_NAME="push",
        GITHUB_RUN_ID=str(run_id),
        GITHUB_RUN_ATTEMPT=str(attempt),
        GITHUB_SERVER_URL=world.server_url,
    )
    results = {}
    for job_name in JOBS:
        folder = os.path.join(work, job_name)
        os.makedirs(folder)
        if job_name != "release" and not results["release"]["ok"]:
            results[job_name] = {"ok": None, "output": "skipped: the release job failed", "dir": folder}
            continue
        out, ok = [], True
        job_env = dict(
            env, GITHUB_STEP_SUMMARY=os.path.join(folder, "summary.md"), GITHUB_OUTPUT=os.path.join(folder, "output")
        )
        for step in workflow_jobs()[job_name]["steps"]:
            ok = play(step, folder, job_env, context, world, wheels, out, rebuilt)
            if not ok:
                break
        results[job_name] = {"ok": ok, "output": "\n".join(out), "dir": folder}
        log(f"  job {job_name}: {'ok' if ok else 'FAILED'}")
    return results


def play(step, folder, env, context, world, wheels, out, rebuilt=None):
    """One step of a job, as GitHub would run it or as its action would act here; False when it failed.
    `rebuilt`: the wheels whose jobs ran in this attempt (None: all). As on GitHub, download-artifact lists only
    this attempt's artifacts unless it is given the run's id and a token; the wheels of jobs that passed in an
    earlier attempt are artifacts of that attempt."""
    action = step.get("uses", "").split("@")[0]
    given = step.get("with", {})
    if "run" in step:
        why_not = rehearsed(step)
        if why_not:
            out.append(f"[not rehearsed: {step.get('name', step['run'][:40])}: {why_not}]")
            return True
        step_env = dict(env, **{k: expand(v, context) for k, v in step.get("env", {}).items()})
        r = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", step["run"]], cwd=folder, env=step_env, capture_output=True, text=True
        )
        out.append(f"$ {step.get('name', '')}\n{r.stdout}{r.stderr}")
        return r.returncode == 0
    if action == "actions/download-artifact" and given.get("pattern") == "wheels-*":
        by_run = given.get("run-id") and given.get("github-token")
        earlier = [] if by_run or rebuilt is None else [n for n in os.listdir(wheels) if n not in rebuilt]
        if earlier:
            out.append(f"[download-artifact: this attempt's artifacts only; not {len(earlier)} of earlier attempts]")
        shutil.copytree(wheels, os.path.join(folder, given["path"]), ignore=lambda d, names: earlier)
    elif action == "pypa/gh-action-pypi-publish":
        files = sorted(
            os.path.join(folder, given["packages-dir"], f)
            for f in os.listdir(os.path.join(folder, given["packages-dir"]))
        )
        skip = ["--skip-existing"] if str(given.get("skip-existing", "")).lower() == "true" else []
        for cmd in (
            ["check", *files],
            [
                "upload",
                "--non-interactive",
                "-u",
                "rehearsal",
                "-p",
                "rehearsal",
                "--repository-url",
                world.pypi_url + "/",
                *skip,
                *files,
            ],
        ):
            r = subprocess.run(
                [sys.executable, "-m", "twine", *cmd], capture_output=True, text=True, cwd=folder, env=env
            )
            out.append(f"$ twine {cmd[0]}\n{r.stdout}{r.stderr}")
            if r.returncode:
                return False
    elif action == "actions/configure-pages":
        if "id" in step:  # its output, as GitHub gives it for the repository (pages-url-check compares)
            context[f"steps.{step['id']}.outputs.base_url"] = github_pages_url(REPO)
    elif action == "actions/upload-pages-artifact":
        name = expand(given.get("name", "github-pages"), context)
        world.artifacts.setdefault((context["github.run_id"], name), []).append(os.path.join(folder, given["path"]))
    elif action == "actions/deploy-pages":
        name = expand(given.get("artifact_name", "github-pages"), context)
        found = world.artifacts.get((context["github.run_id"], name), [])
        if len(found) != 1:  # deploy-pages' own check: the name must pick one artifact of the run
            out.append(f"deploy-pages: {len(found)} artifacts named {name!r} were found for this workflow run")
            return False
        site = os.path.join(world.www, "site")
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(found[0], site)  # the deploy: what the server now serves
    else:
        out.append(f"[not rehearsed: {action or step}]")
    return True


def install_both(world, version, folder, torch_site, problems):
    """`pip install prerast` from the PyPI stand-in and from the pages, each into a fresh venv that renders; the
    failures appended to problems. Returns [{"from": kind, "ok": ok}]."""
    installs = []
    for kind, url in (
        ("pypi", world.pypi_url + "/simple/"),
        ("pages", f"{world.server_url}/site/whl/{torch_page()}"),
    ):
        ok, output = install(kind, url, version, folder, torch_site)
        installs.append({"from": kind, "ok": ok})
        if not ok:
            problems.append(f"pip install from {kind} ({url}) failed:\n{output[-3000:]}")
    return installs


def scenario_row(name, problems, results, plan, after, installs, ran):
    """A scenario's line of the report, its problems logged."""
    for p in problems:
        log(f"  PROBLEM: {p}")
    return {
        "name": name,
        "ok": not problems,
        # What this attempt published: nothing when the release job stopped.
        "published": plan.get("published", []) if results["release"]["ok"] else [],
        "missing": [m["target"] for m in plan.get("missing", [])],
        "pypi_files": sorted(after["pypi"]),
        "release_assets": sorted(after["assets"]),
        "installs": installs,
        "jobs_ran": ran,
    }


def install(kind, url, version, folder, torch_site):
    """pip install prerast==version into a fresh venv from the local index ('pypi') or the pages' find-links page
    ('pages'), then the smoke render; returns (ok, output)."""
    venv = os.path.join(folder, f"venv-{kind}")
    shared_torch.make_venv(venv, torch_site, with_pip=False)
    source = ["--index-url", url] if kind == "pypi" else ["--no-index", "--find-links", url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    # --no-deps: torch and numpy come from the shared folder; nothing else may be fetched.
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            os.path.join(venv, "bin", "python"),
            "install",
            "-q",
            "--no-deps",
            *source,
            f"prerast=={version}",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode:
        return False, r.stdout + r.stderr
    s = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", SMOKE], capture_output=True, text=True, cwd=folder, env=env
    )
    shutil.rmtree(venv, ignore_errors=True)
    return s.returncode == 0, s.stdout + s.stderr


def torch_page():
    """The find-links page of the shared torch build (torch==2.13.0+cpu -> torch-2.13.0+cpu.html)."""
    release_, _, platform = shared_torch.TORCH_SPEC.split("==")[1].partition("+")
    return compat.find_links_page(release_, platform or "cpu")


def jobs_api(selected, server_url, run_id, failed=()):
    """GitHub's answer to the run's jobs list: the jobs that make each target's wheels; for a `failed` target its
    stable binding's wheel job failed, and its merge and smoke jobs were skipped."""
    jobs = []
    for name, ps in _parts.by_target(selected).items():
        broken = "part " + next(p.id for p in ps if p.abi == "stable")
        for job in publish.job_names(ps):
            conclusion = "success"
            if name in failed and job == broken:
                conclusion = "failure"
            elif name in failed and not job.startswith("part "):
                conclusion = "skipped"
            url = f"{server_url}/{REPO}/actions/runs/{run_id}/job/{9000 + len(jobs)}"
            jobs.append({"name": job, "conclusion": conclusion, "html_url": url})
    return {"total_count": len(jobs), "jobs": jobs}


def check(name, results, plan, before, after, selected, wheels, jobs):
    """What is wrong with scenario `name`'s outcome (empty: it is as it should be)."""
    targets = list(_parts.by_target(selected))
    names = sorted(publish.wheel_files(wheels))
    manifests = {f"manifest-{t}.json" for t in plan.get("published", [])}
    expected_assets = {n for n in names if publish.target_of_wheel(n).name in plan.get("published", [])}
    problems = []

    def want(ok, text):
        if not ok:
            problems.append(text)

    out = "\n".join(r["output"] for r in results.values())
    if name == "tampered":
        want(results["release"]["ok"] is False, "the release job did not stop on an asset with other bytes")
        rebuilt = [
            n for n in names if before["assets"].get(n) and before["assets"][n] != sha256(os.path.join(wheels, n))
        ]
        want(len(rebuilt) == 1, f"one rebuilt wheel expected, found {rebuilt}")
        for n in rebuilt:
            want(
                n in out and before["assets"][n] in out and sha256(os.path.join(wheels, n)) in out,
                f"the failure does not name {n} with both sha256",
            )
        want(after == before, "the stopped run changed the release, PyPI or the pages")
        return problems
    failed = [(j, r["output"][-3000:]) for j, r in results.items() if not r["ok"]]
    want(not failed, f"jobs failed: {failed}")
    summary = open(os.path.join(results["release"]["dir"], "summary.md")).read()
    notes = after["notes"] or ""
    should_miss = [MISSING_TARGET] if name == "one target missing" else []
    want(
        plan.get("published") == [t for t in targets if t not in should_miss],
        f"published {plan.get('published')}, expected every target but {should_miss}",
    )
    want([m["target"] for m in plan.get("missing", [])] == should_miss, f"missing {plan.get('missing')}")
    want(
        set(after["assets"]) == expected_assets | manifests,
        f"release assets {sorted(after['assets'])}, expected {sorted(expected_assets | manifests)}",
    )
    want(all(after["assets"][n] == d for n, d in before["assets"].items()), "an asset was replaced")
    pypi_expected = {n for n in expected_assets if not publish.WHEEL_NAME.fullmatch(n).group("local")}
    want(set(after["pypi"]) == pypi_expected, f"PyPI has {sorted(after['pypi'])}, expected {sorted(pypi_expected)}")
    want(bool(after["pages"]) and "whl/simple/prerast/index.html" in after["pages"], "no pages deployed")
    want(
        f"is {compat.REPOSITORY}'s Pages site" in results["pages"]["output"],
        "the pages job did not check that its Pages site is the one the loader names",
    )
    if name == "same run again":
        want(after == before, "the same run again changed the release, PyPI or the pages")
    for job in jobs["jobs"]:
        if job["conclusion"] != "success":
            link = f"[{job['name']}]({job['html_url']})"
            want(all(link in text for text in (summary, notes)), f"the summary or the notes do not link {job['name']}")
    want(("Re-run the failed jobs" in notes) == bool(should_miss), "the notes' re-run line")
    return problems


def rehearse(given, work, version=None, parts=None):
    """Run the scenarios; returns the report. parts: the folder of the real parts for the re-run scenarios
    (ci/publish/rerun.py: <name>/prerast-*.whl, as python -m ci wheel-local leaves them), None to build them,
    False to leave the re-run scenarios out."""
    version = version or release.package_version()
    tag = f"v{version}"
    selected = _parts.select(_parts.load(), published=True)
    full, partial, rebuilt = (os.path.join(work, n) for n in ("wheels-all", "wheels-partial", "wheels-rebuilt"))
    base = wheel_set(given, selected, version, full)
    shutil.copytree(
        full,
        partial,
        ignore=lambda d, names: [
            n for n in names if n.endswith(".whl") and publish.target_of_wheel(n).name == MISSING_TARGET
        ],
    )
    shutil.copytree(full, rebuilt)
    mac = next(m for m in all_merges(selected) if m.target.name == "macos-arm64")
    synthetic_wheel(base, mac, version, rebuilt, extra=b"built again, not byte for byte")
    torch_site = shared_torch.shared_torch()

    def of_target(target):
        return {n for n in publish.wheel_files(full) if publish.target_of_wheel(n).name == target}

    # Each run attempt with the wheels its wheel jobs built (None: the first attempt, all of them). The same run
    # again re-runs only the publishing jobs; the re-run rebuilds the failed target; the tampered attempt one wheel.
    runs = [
        ("clean", "a", full, 1001, 1, (), None),
        ("same run again", "a", full, 1001, 2, (), set()),
        ("one target missing", "c", partial, 2001, 1, (MISSING_TARGET,), None),
        ("re-run with it present", "c", full, 2001, 2, (), of_target(MISSING_TARGET)),
        ("tampered", "c", rebuilt, 2001, 3, (), of_target(mac.target.name)),
    ]
    worlds, report = {}, []
    try:
        for i, (name, world_name, wheels, run_id, attempt, failed, fresh) in enumerate(runs):
            start = time.monotonic()
            if world_name not in worlds:
                worlds[world_name] = World(os.path.join(work, f"world-{world_name}"))
            world = worlds[world_name]
            log(f"scenario {name!r}: run {run_id} attempt {attempt}, {len(publish.wheel_files(wheels))} wheels")
            before = world.state(tag)
            jobs = jobs_api(selected, world.server_url, run_id, failed)
            results = run_jobs(world, wheels, tag, run_id, attempt, os.path.join(work, f"run-{i}"), jobs, fresh)
            after = world.state(tag)
            plan_path = os.path.join(results["release"]["dir"], "plan.json")
            plan = json.load(open(plan_path)) if os.path.exists(plan_path) else {}
            problems = check(name, results, plan, before, after, selected, wheels, jobs)
            installs = (
                []
                if name == "tampered"
                else install_both(world, version, os.path.join(work, f"run-{i}"), torch_site, problems)
            )
            ran = [j for j, r in results.items() if r["ok"] is not None]
            report.append(scenario_row(name, problems, results, plan, after, installs, ran))
            log(f"scenario {name!r}: {'ok' if not problems else 'FAILED'} ({time.monotonic() - start:.1f} s)")
    finally:
        for w in worlds.values():
            w.close()
    if parts is not False:
        report += rerun_scenarios(parts, work, selected, version, tag, torch_site)
    return {"scenarios": report}


def tools_env(work):
    """The environment of a played `run:` step outside the publishing jobs: `python` this interpreter, the
    checkout importable."""
    bin_dir = os.path.join(work, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    with open(os.path.join(bin_dir, "python"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    os.chmod(os.path.join(bin_dir, "python"), 0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_", "PIP_"))}
    return dict(env, PATH=bin_dir + os.pathsep + os.environ["PATH"], PYTHONPATH=ROOT)


def job_rows(jobs, selected, names, failed_rows=None):
    """The rows of the jobs `names`: one per part of the wheel job (only the failed rows, where given), one per
    target of the merge and smoke jobs, the job itself for every other."""
    rows = []
    for job in names:
        if job == "wheel":
            rows += [f"part {p.id}" for p in selected if failed_rows is None or f"part {p.id}" in failed_rows]
        elif job in rerun.MATRIX_JOBS:
            rows += [f"{job} {t}" for t in _parts.by_target(selected)]
        else:
            rows.append(job)
    return rows


def rerun_rows(jobs, selected, failed_rows):
    """The rows GitHub runs again on "Re-run failed jobs": the failed rows, and every row of each job that depends
    (transitively, by the workflow's `needs`) on a job with a failed row."""
    failed_jobs = {"wheel" if row.startswith("part ") else row.split(" ")[0] for row in failed_rows}
    return job_rows(jobs, selected, rerun.with_dependents(jobs, failed_jobs), failed_rows)


def rerun_problems(number, rows, results, plan, before, after, first, targets, failed, broken=()):
    """What is wrong with attempt `number` of the re-run scenarios (empty: it is as it should be)."""
    problems = []
    bad = [j for j, r in results.items() if not r["ok"]]
    if bad:
        problems.append("jobs failed: " + "; ".join(f"{j}: {results[j]['output'][-1500:]}" for j in bad))
    want = [t for t in targets if t not in failed]
    if plan.get("published") != want:
        problems.append(f"published {plan.get('published')}, expected {want}")
    failed_rows = sorted(r for r, ok in rows.items() if not ok)
    expected = sorted([f"{job} {t}" for t in failed for job in ("merge", "smoke")] + [f"part {p}" for p in broken])
    if failed_rows != expected:
        problems.append(f"rows that failed: {failed_rows}, expected {expected}")
    changed = [n for n, d in (first or {}).items() if after["assets"].get(n) != d]
    if changed:
        problems.append(f"published assets changed: {changed}")
    if number == 3 and after != before:
        problems.append("re-running all jobs changed the release, PyPI or the pages")
    return problems


def rerun_scenarios(parts_dir, work, selected, version, tag, torch_site):
    """A tag run whose part job failed; "Re-run failed jobs"; "Re-run all jobs" (ci/publish/rerun.py): the
    report's entries, each with the jobs (rows) that ran."""
    jobs = workflow_jobs()
    world = World(os.path.join(work, "world-rerun"))
    artifacts = rerun.Artifacts(os.path.join(work, "artifacts"))
    env = tools_env(work)
    broken = next(p for p in selected if p.target.name == MISSING_TARGET and p.abi == "stable")
    targets = list(_parts.by_target(selected))
    report, first, failed_rows = [], None, []
    try:
        real = rerun.real_parts(parts_dir, os.path.join(work, "real-1"), log)
        for name, number in (("part job failed", 1), ("re-run failed jobs", 2), ("re-run all jobs", 3)):
            start = time.monotonic()
            log(f"scenario {name!r}: run 3001 attempt {number}")
            failed = (MISSING_TARGET,) if number == 1 else ()
            if number == 2:
                ran = rerun_rows(jobs, selected, failed_rows)
            else:
                ran = job_rows(jobs, selected, list(jobs))
            if number == 3:  # every part built again, the real ones from scratch
                real = rerun.real_parts(None, os.path.join(work, "real-3"), log, rebuild=True)
            # The wheel rows that ran, less the one that fails in the first attempt: their parts, built again.
            skip = f"part {broken.id}" if number == 1 else None
            wheel_rows = [r[len("part ") :] for r in ran if r.startswith("part ") and r != skip]
            built = rerun.build_parts(selected, real, version, os.path.join(work, f"parts-{number}"), only=wheel_rows)
            rows = rerun.attempt(
                jobs, selected, artifacts, number, ran, built, os.path.join(work, f"rows-{number}"), env, log
            )
            failed_rows = [r for r, ok in rows.items() if not ok]
            wheels = os.path.join(work, f"wheelhouse-{number}")
            artifacts.download("wheels-*", number, True, wheels)
            before = world.state(tag)
            api = jobs_api(selected, world.server_url, 3001, failed)
            results = run_jobs(world, wheels, tag, 3001, number, os.path.join(work, f"rerun-{number}"), api)
            after = world.state(tag)
            plan_path = os.path.join(results["release"]["dir"], "plan.json")
            plan = json.load(open(plan_path)) if os.path.exists(plan_path) else {}
            problems = rerun_problems(
                number, rows, results, plan, before, after, first, targets, failed, [broken.id] * (number == 1)
            )
            first = first or dict(after["assets"])
            installs = install_both(world, version, os.path.join(work, f"rerun-{number}"), torch_site, problems)
            report.append(scenario_row(name, problems, results, plan, after, installs, ran))
            log(f"scenario {name!r}: {'ok' if not problems else 'FAILED'} ({time.monotonic() - start:.1f} s)")
            log(f"  jobs that ran: {', '.join(ran)}")
    finally:
        world.close()
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ci rehearse", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--wheels", help="a folder with the Linux x86-64 one wheel (default: merged here of the real parts)"
    )
    ap.add_argument(
        "--parts",
        default=DEFAULT_PARTS if os.path.isdir(DEFAULT_PARTS) else None,
        help="the real parts of the re-run scenarios (default: build/wheel-local/parts when there, else built)",
    )
    ap.add_argument("--no-reruns", action="store_true", help="leave out the re-run scenarios (no part is built)")
    ap.add_argument("--report", help="write the scenarios' outcome here, JSON")
    ap.add_argument("--work", help="the working folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the working folder")
    a = ap.parse_args(argv)
    # What it needs installed is checked before it starts: python -m ci's REQUIRES (ci/__main__.py).
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="prerast-rehearse-")
    os.makedirs(work, exist_ok=True)
    start = time.monotonic()
    try:
        given = a.wheels
        parts = False if a.no_reruns else (os.path.abspath(a.parts) if a.parts else None)
        if not given:
            # The Linux x86-64 one wheel the installs use, merged of the real parts (python -m ci merge).
            given = os.path.join(work, "built")
            parts = rerun.real_parts(parts or None, os.path.join(work, "real-0"), log)
            log(f"merged {merge.merge(list(parts.values()), given)}")
        report = rehearse(os.path.abspath(given), work, parts=parts)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f, indent=2)
    bad = [s["name"] for s in report["scenarios"] if not s["ok"]]
    log(
        f"{len(report['scenarios']) - len(bad)}/{len(report['scenarios'])} scenarios ok in "
        f"{time.monotonic() - start:.0f} s" + (f"; failed: {', '.join(bad)}" if bad else "")
    )
    return 1 if bad else 0
