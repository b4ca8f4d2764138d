"""The rehearsal's re-runs, as GitHub re-runs a workflow run: a tag run whose part job failed, then "Re-run failed
jobs", then "Re-run all jobs" (ci/publish/rehearse.py runs them after its publishing scenarios).

What GitHub does, modelled here:
- Re-running jobs re-runs every job that depends on a re-run job, transitively (GitHub's "Re-running workflows
  and jobs"): the set comes from .github/workflows/wheels.yml's `needs`, read when the rehearsal runs.
- Artifacts belong to the run: upload-artifact with `overwrite: true` replaces the artifact of that name (the
  re-run job's), and download-artifact given the run's id lists the artifacts of every attempt, the newest of each
  name; without it, those of this attempt only.

The parts: the Linux x86-64 CPU kernels and stable binding are real (build/wheel-local/parts when there, else
built here by the one build route, prerast_meta/build_wheel.py); every other part of the published selection is a
stand-in made of them (ci/publish/standin.py). The merge jobs run the workflow's own `run:` step (python -m ci
merge-target) on what download-artifact gives them; the smoke jobs' downloads and uploads are played, their
render is not (it needs the target's runner: the installs after each scenario render the Linux x86-64 wheel).
"""

import fnmatch
import glob
import json
import os
import shutil
import subprocess
import zipfile

from ci.matrix import cibw, parts as _parts
from ci.publish import standin
from prerast_meta import build_wheel as route, sources
from prerast_meta.repair import INFO

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL = ("kernels-cpu", "binding-stable")  # the parts built here: the cheap ones of this machine's target
MATRIX_JOBS = ("wheel", "merge", "smoke")  # the jobs of one row per part or target


def needs_of(jobs):
    """{job: the jobs it needs} of the workflow's jobs."""
    out = {}
    for name, job in jobs.items():
        needs = job.get("needs", [])
        out[name] = {needs} if isinstance(needs, str) else set(needs)
    return out


def with_dependents(jobs, rerun):
    """The jobs `rerun` and every job that needs one of them, transitively, in the workflow's order."""
    needs, chosen = needs_of(jobs), set(rerun)
    grew = True
    while grew:
        more = {name for name, wants in needs.items() if wants & chosen} - chosen
        chosen |= more
        grew = bool(more)
    return [name for name in jobs if name in chosen]


class Artifacts:
    """A run's artifacts: {name: (attempt, folder)}; an upload of an existing name replaces it (overwrite: true)."""

    def __init__(self, folder):
        self.folder, self.items = folder, {}

    def upload(self, name, attempt, files):
        if not files:
            raise ValueError(f"upload-artifact {name}: no files found (if-no-files-found: error)")
        dest = os.path.join(self.folder, f"{name}@{attempt}")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        for f in files:
            shutil.copy(f, dest)
        self.items[name] = (attempt, dest)

    def download(self, pattern, attempt, by_run, dest):
        """Copy the artifacts matching `pattern` into dest (merged); returns their names."""
        names = sorted(
            n for n, (a, _) in self.items.items() if fnmatch.fnmatch(n, pattern) and (by_run or a == attempt)
        )
        os.makedirs(dest, exist_ok=True)
        for n in names:
            for f in os.listdir(self.items[n][1]):
                shutil.copy(os.path.join(self.items[n][1], f), dest)
        return names


def fill(text, values):
    """A workflow value with its ${{ matrix.X }} / ${{ needs.matrix.outputs.X }} / ${{ github.X }} filled in."""
    for key, value in values.items():
        for spelling in ("${{ %s }}" % key, "${{%s}}" % key):
            text = str(text).replace(spelling, value)
    return text


def play_row(job, values, attempt, artifacts, folder, env, rehearsed_run):
    """One row of a matrix job (merge or smoke of one target): its downloads, the `run:` steps `rehearsed_run`
    accepts and its uploads, as GitHub runs them; returns (ok, output)."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for step in job["steps"]:
        action, given = step.get("uses", "").split("@")[0], step.get("with", {})
        if action == "actions/download-artifact":
            pattern = fill(given.get("pattern") or given["name"], values)
            got = artifacts.download(pattern, attempt, bool(given.get("run-id")), os.path.join(folder, given["path"]))
            out.append(f"[download-artifact {pattern}: {', '.join(got) or 'none'}]")
            if "name" in given and not got:
                out.append(f"Unable to download artifact(s): Artifact not found for name: {pattern}")
                return False, "\n".join(out)
        elif action == "actions/upload-artifact":
            name = fill(given["name"], values)
            files = sorted(glob.glob(os.path.join(folder, given["path"])))
            if not files:
                out.append(f"upload-artifact {name}: no files found")
                return False, "\n".join(out)
            artifacts.upload(name, attempt, files)
        elif "run" in step and rehearsed_run(step):
            step_env = dict(env, **{k: fill(v, values) for k, v in step.get("env", {}).items()})
            r = subprocess.run(
                ["bash", "-eo", "pipefail", "-c", step["run"]], cwd=folder, env=step_env, capture_output=True, text=True
            )
            out.append(f"$ {step.get('name', '')}\n{r.stdout}{r.stderr}")
            if r.returncode:
                return False, "\n".join(out)
        elif "run" in step:
            out.append(f"[not rehearsed: {step.get('name', 'a run step')}: the target's runner]")
    return True, "\n".join(out)


def merges_here(step):
    """The merge job's `run:` step runs here; the smoke job's render does not (the target's runner)."""
    return "python -m ci merge-target" in step["run"]


def build_real(work, name, log):
    """The real part `name` (REAL) built from a copy of the checkout, as python -m ci wheel-local builds it, dated
    by the commit (SOURCE_DATE_EPOCH); returns the wheel."""
    folder = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    sources.materialize(os.path.join(folder, "src"), ROOT)
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or sources.commit_epoch(ROOT)
    spec = route.BuildSpec(
        source=os.path.join(folder, "src"),
        out_dir=os.path.join(folder, "out"),
        build_temp=os.path.join(folder, "temp"),
        parts="kernels" if name == "kernels-cpu" else "binding",
        abi="" if name == "kernels-cpu" else "stable",
        commit=sources.git_commit(ROOT),
        env=(("SOURCE_DATE_EPOCH", epoch),) if epoch else (),
    )
    log(f"  building the real part {name} (log: {route.log_path(spec)})")
    return route.build(spec, log=lambda text: None)


def of_this_checkout(wheel):
    """Why the part wheel was not built from this checkout's commit and sources, or None where it was."""
    with zipfile.ZipFile(wheel) as z:
        info = json.loads(z.read(INFO))
    here = (sources.git_commit(ROOT), sources.digest(ROOT))
    there = (info.get("git_commit"), info.get("source_hash"))
    return None if here == there else f"built from commit {there[0]}, sources {there[1]}; this checkout: {here}"


def real_parts(given, work, log, rebuild=False):
    """{name: wheel} of the REAL parts: those of `given` (build/wheel-local/parts: <name>/prerast-*.whl, or
    {name: wheel}) where they were built from this checkout, unless rebuild; else built here."""
    found = {}
    for name in REAL:
        if isinstance(given, dict):  # {name: wheel} already found
            there = [given[name]] if name in given else []
        else:
            there = sorted(glob.glob(os.path.join(given or "", name, "prerast-*.whl")))
        stale = of_this_checkout(there[0]) if there else "none given"
        if there and not rebuild and not stale:
            found[name] = there[0]
        else:
            if there and stale and not rebuild:
                log(f"  {there[0]}: {stale}: built again")
            found[name] = build_real(work, name, log)
    return found


def build_parts(selected, real, version, out, only=None):
    """Each selected part's wheel (only: those part ids) in out/<artifact>/: the real ones, else stand-ins."""
    made = {}
    for part in selected:
        if only is not None and part.id not in only:
            continue
        folder = os.path.join(out, cibw.artifact_name(part))
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        made[part.id] = standin.part_wheel(part, real, version, folder)
    return made


def attempt(jobs, selected, artifacts, number, ran, built, work, env, log):
    """Play the rows `ran` of the wheel, merge and smoke jobs of one attempt: the wheel rows' parts `built` {part
    id: wheel} uploaded (a wheel row without one failed), then the merge and smoke rows as the workflow runs them.
    Returns {row: ok}."""
    results = {}
    for part in selected:
        row = f"part {part.id}"
        if row in ran:
            results[row] = part.id in built
            if part.id in built:
                artifacts.upload(cibw.artifact_name(part), number, [built[part.id]])
    for target in _parts.by_target(selected):
        values = {"matrix.target": target, "needs.matrix.outputs.selection": "--published"}
        for job in ("merge", "smoke"):
            if f"{job} {target}" not in ran:
                continue
            folder = os.path.join(work, f"{job}-{target}")
            shutil.rmtree(folder, ignore_errors=True)
            ok, out = play_row(jobs[job], values, number, artifacts, folder, env, merges_here)
            results[f"{job} {target}"] = ok
            if not ok:
                log(f"  job {job} {target}: FAILED\n" + "\n".join("    " + line for line in out.splitlines()[-6:]))
    return results
