"""Releases (ci/publish/release.py and the workflow's tag steps): the tag must be v + the package version, checked before
anything builds; `python -m ci release-check` before tagging; and the Pages index built from every release's own
manifests, run here as the workflow's own step texts with the stand-in `gh` (ci/publish/gh_standin.py); release assets
never replaced."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix
from ci.publish import release, upload  # noqa: E402
from test_index import make_wheel  # noqa: E402
from test_workflow import jobs, needs  # noqa: E402

VERSION = release.package_version()


def file_sha256(path):
    """The file's sha256, computed here rather than by the code under test."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def step(job, name_start):
    (found,) = [s for s in jobs()[job]["steps"] if s.get("name", "").startswith(name_start)]
    return found


def run_step(script, cwd, bin_dir=None, **env):
    """A run: script as GitHub runs it (bash -eo pipefail), with this Python as `python` and ci/publish/gh_standin.py as
    `gh` first on PATH (in bin_dir, default cwd/bin)."""
    bin_dir = str(bin_dir or os.path.join(str(cwd), "bin"))
    os.makedirs(bin_dir, exist_ok=True)
    for name, target in (("python", sys.executable), ("gh", os.path.join(ROOT, "ci", "publish", "gh_standin.py"))):
        if not os.path.lexists(os.path.join(bin_dir, name)):
            with open(os.path.join(bin_dir, name), "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" {target if name == "gh" else ""} "$@"\n')
            os.chmod(os.path.join(bin_dir, name), 0o755)
    full = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], PYTHONPATH=ROOT, **env)
    return subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=cwd, env=full, capture_output=True, text=True)


def test_tag_must_be_v_and_the_package_version():
    assert release.tag_problem("v0.2.0", "0.2.0") is None
    assert release.tag_problem("refs/tags/v0.2.0", "0.2.0") is None
    for tag in ("v0.2.1", "0.2.0", "v0.2.0rc1", "v0.2"):
        problem = release.tag_problem(tag, "0.2.0")
        assert problem and tag in problem and "package version 0.2.0" in problem, tag


def test_version_is_read_like_setup_py(tmp_path):
    (tmp_path / release.VERSION_FILE).parent.mkdir(parents=True)
    (tmp_path / release.VERSION_FILE).write_text('__version__ = "3.1.4"\n')
    assert release.package_version(str(tmp_path)) == "3.1.4"
    from prerast_meta import version  # what setup.py and the package import

    assert release.package_version(ROOT) == version.__version__
    (tmp_path / release.VERSION_FILE).write_text("version = 3\n")
    with pytest.raises(release.ReleaseError, match="no __version__"):
        release.package_version(str(tmp_path))


def test_workflow_checks_the_tag_first_and_names_both(tmp_path):
    """The matrix job's first step after checkout, on tags only: every other job needs the matrix job, so a
    wrong tag stops the run before preflight or any build."""
    job = jobs()["matrix"]
    names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
    check = step("matrix", "The tag is v")
    assert check["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert names.index(check["name"]) < names.index("Lint this workflow")
    all_jobs = jobs()

    def after_matrix(name):
        return any(n == "matrix" or after_matrix(n) for n in needs(all_jobs[name]))

    assert all(after_matrix(name) for name in all_jobs if name != "matrix")
    out = run_step(check["run"], ROOT, tmp_path, GITHUB_REF_NAME=f"v{VERSION}")
    assert out.returncode == 0, out.stderr
    out = run_step(check["run"], ROOT, tmp_path, GITHUB_REF_NAME="v99.0.0", GITHUB_ACTIONS="true")
    assert out.returncode == 1
    assert out.stderr.startswith("::error::") and "v99.0.0" in out.stderr and f"version {VERSION}" in out.stderr


def test_build_lists_agree_and_disagreements_are_named():
    assert release.build_problems() == []
    releases = {
        "2.4": {"platforms": ["cpu", "cu124"]},
        "2.5": {"platforms": ["cpu", "cu999"]},
        "2.6": {"platforms": ["cpu"]},
    }
    published = {"2.4": {"cpu", "cu124"}, "2.5": {"cpu"}, "2.7": {"cpu"}}
    problems = release.build_problems(releases, published)
    assert len(problems) == 3
    assert problems[0].startswith("torch 2.5: ci/matrix.toml lists ['cu999'], which PyTorch does not publish")
    assert problems[1].startswith("torch 2.6 is in ci/matrix.toml but not in ci/published_builds.toml")
    assert problems[2].startswith("torch 2.7 is published (ci/published_builds.toml) but ci/matrix.toml has no")


def test_release_check_prints_the_checks_and_the_settings_to_tick(capsys):
    assert release.main([]) == 0
    out = capsys.readouterr().out
    assert f"[ok] tag v{VERSION} = v + the package version" in out
    assert f"{len(matrix.select(matrix.load(), published=True))} published cells" in out
    for setting in release.SETTINGS:
        assert f"[ ] {setting}" in out
    # A re-run adds a failed target's assets to the published release: immutability must stay off.
    assert "[ ] Settings > General > Releases: 'Enable release immutability' left OFF" in out
    assert release.main(["--tag", "v99.0.0"]) == 1
    captured = capsys.readouterr()
    assert "[FAIL] tag v99.0.0 does not match" in captured.out and "1 check(s) failed" in captured.err


def test_release_check_refuses_a_version_already_tagged_elsewhere(tmp_path, capsys):
    """A checkout whose version was not bumped since its last release: the tag exists and names another commit."""

    def git(*args):
        subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
        )

    (tmp_path / release.VERSION_FILE).parent.mkdir(parents=True)
    (tmp_path / release.VERSION_FILE).write_text('__version__ = "0.4.0"\n')
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "first")
    assert release.release_check(root=str(tmp_path)) == 0
    assert "[ok] v0.4.0 is not tagged yet" in capsys.readouterr().out
    git("tag", "v0.4.0")
    assert release.release_check(root=str(tmp_path)) == 0
    assert "[ok] v0.4.0 names this commit" in capsys.readouterr().out
    git("commit", "-q", "--allow-empty", "-m", "second")
    assert release.release_check(root=str(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "[FAIL] v0.4.0 already names commit" in out and "bump prerast_meta/version.py" in out


def test_release_guide_names_the_check_and_the_settings():
    section = open(os.path.join(ROOT, "docs", "releasing.md")).read()
    assert "`python -m ci release-check [--tag v0.2.0]`" in section
    for words in ("Source = **GitHub Actions**", "`github-pages`", "`pypi`"):
        assert words in section


def tag_run(fake_gh, work, tag, *wheels, deploy=True):
    """The release job's upload step, then (`deploy`) the Pages job's index step, of one tag run publishing the
    Linux x86-64 target's `wheels`; returns the last step's result."""
    wheelhouse = work / tag / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    names = [os.path.basename(make_wheel(str(wheelhouse), *w)) for w in wheels]
    plan = {"published": ["linux-x86_64"], "missing": [], "wheels": names, "version": tag[1:], "required_missing": []}
    (work / tag / "plan.json").write_text(json.dumps(plan))
    (work / tag / "notes.md").write_text("notes")
    env = {
        "GH_STANDIN_DIR": str(fake_gh),
        "GITHUB_REF_NAME": tag,
        "ASSETS_URL": f"https://example.invalid/download/{tag}",
    }
    upload = run_step(step("release", "Upload the wheels")["run"], work / tag, **env)
    assert upload.returncode == 0, upload.stderr
    if not deploy:
        return upload
    return run_step(step("pages", "Find-links pages")["run"], work / tag, **env)


def listed(work, tag, page):
    return open(work / tag / "site" / "whl" / page).read()


def test_every_release_stays_on_the_pages_whatever_the_live_site_shows(tmp_path):
    """Each release uploads its manifest; each deploy merges all of them. The second tag's deploy never ran (GitHub
    cancelled it while it waited) and the live site may still serve the first index from its cache: the third
    deploy lists the wheels of all three."""
    fake_gh, work = tmp_path / "gh", tmp_path / "runs"
    fake_gh.mkdir()
    first = tag_run(fake_gh, work, "v0.1.0", ("0.1.0", "2.14.1+cu130", "13.0"))
    assert first.returncode == 0, first.stderr  # the first release: no earlier manifest to merge
    assert "1 releases merged" in first.stdout
    assets = sorted(os.listdir(fake_gh / "v0.1.0"))
    assert assets == ["manifest-linux-x86_64.json", "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl"]
    tag_run(
        fake_gh, work, "v0.2.0", ("0.2.0", "2.14.1+cu130", "13.0"), ("0.2.0+cu12", "2.14.1+cu126", "12.6"), deploy=False
    )
    third = tag_run(fake_gh, work, "v0.3.0", ("0.3.0", "2.14.1+cu130", "13.0"))
    assert third.returncode == 0, third.stderr
    page = listed(work, "v0.3.0", "torch-2.12.0+cu130.html")
    for tag in ("v0.1.0", "v0.2.0", "v0.3.0"):
        version = tag[1:]
        assert f"https://example.invalid/download/{tag}/prerast-{version}-py3-none-" in page
    assert "v0.2.0/prerast-0.2.0+cu12-" in listed(work, "v0.3.0", "torch-2.12.0+cu126.html")
    manifest = json.load(open(work / "v0.3.0" / "site" / "whl" / "manifest.json"))
    assert len(manifest["wheels"]) == 4


def test_a_release_without_its_manifest_stops_the_deploy(tmp_path):
    fake_gh, work = tmp_path / "gh", tmp_path / "runs"
    fake_gh.mkdir()
    assert tag_run(fake_gh, work, "v0.1.0", ("0.1.0", "2.14.1+cu130", "13.0")).returncode == 0
    os.remove(fake_gh / "v0.1.0" / "manifest-linux-x86_64.json")  # a release made by hand, or its manifest deleted
    # A draft (its assets are not public) and a release without wheels are passed over.
    releases = json.load(open(fake_gh / "releases.json"))
    (fake_gh / "v0.1.1").mkdir()
    (fake_gh / "notes").mkdir()
    (fake_gh / "notes" / "changes.txt").write_text("")
    releases += [
        {"tagName": "v0.1.1", "isDraft": True, "createdAt": "2026-12-05"},
        {"tagName": "notes", "isDraft": False, "createdAt": "2026-12-06"},
    ]
    json.dump(releases, open(fake_gh / "releases.json", "w"))
    out = tag_run(fake_gh, work, "v0.2.0", ("0.2.0", "2.14.1+cu130", "13.0"))
    assert out.returncode == 1
    assert "releases v0.1.0 have wheels but no manifest (manifest*.json)" in out.stderr
    assert not (work / "v0.2.0" / "site").exists()  # nothing to deploy
    os.remove(fake_gh / "v0.1.0" / "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl")
    out = run_step(step("pages", "Find-links pages")["run"], work / "v0.2.0", GH_STANDIN_DIR=str(fake_gh))
    assert out.returncode == 0, out.stderr
    assert "1 releases merged into previous.json: v0.2.0" in out.stdout


def test_pages_job_reads_no_live_manifest_and_release_job_uploads_one():
    pages = "\n".join(s.get("run", "") for s in jobs()["pages"]["steps"])
    assert "curl" not in pages and "release-manifests" in pages
    assert "python -m ci release-upload" in step("release", "Upload the wheels")["run"]
    assert jobs()["pages"]["concurrency"]["cancel-in-progress"] is False


def gh_bin(tmp_path, monkeypatch, calls=None):
    """The stand-in as `gh` over tmp_path/gh; each call's arguments appended to `calls` (a file) when given."""
    state = tmp_path / "gh"
    state.mkdir(exist_ok=True)
    monkeypatch.setenv("GH_STANDIN_DIR", str(state))
    gh = tmp_path / "gh-cli"
    log = f'echo "$*" >> "{calls}"\n' if calls else ""
    gh.write_text(f'#!/bin/sh\n{log}exec "{sys.executable}" "{ROOT}/ci/publish/gh_standin.py" "$@"\n')
    gh.chmod(0o755)
    return str(gh), state


def x86_plan(*names):
    return {
        "published": ["linux-x86_64"],
        "missing": [],
        "wheels": list(names),
        "version": "0.2.0",
        "required_missing": [],
    }


@pytest.mark.parametrize("digest", [True, False], ids=["digest", "download"])
def test_release_upload_skips_same_bytes_and_stops_on_other_bytes(tmp_path, monkeypatch, digest):
    """A re-run uploads nothing it already uploaded; a wheel rebuilt with other bytes under the same name stops the
    upload, naming the file and both sha256, and nothing on the release changes. With or without GitHub's digest
    (then the asset is downloaded to compare)."""
    if not digest:
        monkeypatch.setenv("GH_STANDIN_NO_DIGEST", "1")
    calls = tmp_path / "calls"
    gh, state = gh_bin(tmp_path, monkeypatch, calls)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = os.path.basename(make_wheel(str(wheels), "0.2.0", "2.14.1+cu130", "13.0"))
    plan = x86_plan(name)
    first = upload.release_upload("v0.2.0", str(wheels), plan, gh, "https://example.invalid/v0.2.0", log=str)
    assert first == {"uploaded": [name, "manifest-linux-x86_64.json"], "skipped": []}
    before = {n: file_sha256(state / "v0.2.0" / n) for n in os.listdir(state / "v0.2.0")}
    again = upload.release_upload("v0.2.0", str(wheels), plan, gh, "https://example.invalid/v0.2.0", log=str)
    assert again == {"uploaded": [], "skipped": [name, "manifest-linux-x86_64.json"]}
    make_wheel(str(wheels), "0.2.0", "2.14.0+cu130", "13.0")  # rebuilt: the same name, other bytes
    rebuilt = file_sha256(wheels / name)
    assert rebuilt != before[name]
    with pytest.raises(release.ReleaseError) as e:
        upload.release_upload("v0.2.0", str(wheels), plan, gh, "https://example.invalid/v0.2.0", log=str)
    assert f"{name}: the release's asset has sha256 {before[name]}, this run's file {rebuilt}" in str(e.value)
    assert {n: file_sha256(state / "v0.2.0" / n) for n in os.listdir(state / "v0.2.0")} == before
    assert not any(c.startswith("release upload") and "--clobber" in c for c in calls.read_text().splitlines())


def test_manifests_are_the_same_bytes_anywhere():
    """No local path, keys sorted: a re-run on another runner finds the manifest it would write, and skips it."""
    import tempfile

    made = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as d:
            made.append(
                release.target_manifest(
                    "linux-x86_64", [make_wheel(d, "0.2.0", "2.14.1+cu130", "13.0")], "https://example.invalid/v0.2.0/"
                )
            )
    assert made[0] == made[1] and b'"path"' not in made[0] and b"/tmp" not in made[0]
    entry = json.loads(made[0])["wheels"][0]
    assert entry["url"] == "https://example.invalid/v0.2.0/prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl"


def test_the_standin_refuses_what_github_refuses(tmp_path, monkeypatch):
    """Why release-upload compares before it uploads: GitHub refuses an asset name twice (the stand-in too), and
    --clobber, which would accept it, replaces the bytes the manifests describe."""
    gh, state = gh_bin(tmp_path, monkeypatch)
    asset = tmp_path / "a.whl"
    asset.write_bytes(b"one")

    def run(*args):
        return subprocess.run([gh, *args], capture_output=True, text=True)

    assert run("release", "upload", "v1", str(asset)).stderr.strip() == "release not found"
    assert run("release", "create", "v1", "--title", "t", "--notes", "n").returncode == 0
    assert "already_exists" in run("release", "create", "v1", "--notes", "n").stderr
    assert run("release", "upload", "v1", str(asset)).returncode == 0
    asset.write_bytes(b"two")
    refused = run("release", "upload", "v1", str(asset))
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert (state / "v1" / "a.whl").read_bytes() == b"one"
    assert run("release", "upload", "v1", str(asset), "--clobber").returncode == 0  # what the workflow must not do
    assert (state / "v1" / "a.whl").read_bytes() == b"two"
    view = json.loads(run("release", "view", "v1", "--json", "assets").stdout)
    assert view["assets"] == [{"name": "a.whl", "size": 3, "digest": "sha256:" + file_sha256(asset)}]
    assert "--clobber" not in open(os.path.join(ROOT, ".github", "workflows", "wheels.yml")).read()


def test_release_manifests_merge_per_target_and_older_single_manifests(tmp_path, monkeypatch):
    gh, state = gh_bin(tmp_path, monkeypatch)
    subprocess.run([gh, "release", "create", "v0.1.0", "--notes", ""], check=True)
    old = {
        "wheels": [
            {
                "file": "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl",
                "url": "u1",
                "sha256": "a",
                "path": "/home/runner/w.whl",
                "pages": ["torch-2.14.1+cu130.html"],
            }
        ]
    }
    (state / "v0.1.0" / "manifest.json").write_text(json.dumps(old))
    (state / "v0.1.0" / "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl").write_bytes(b"")
    subprocess.run([gh, "release", "create", "v0.2.0", "--notes", ""], check=True)
    for target, plat in (("linux-x86_64", "manylinux_2_28_x86_64"), ("macos-arm64", "macosx_11_0_arm64")):
        entry = {
            "file": f"prerast-0.2.0-py3-none-{plat}.whl",
            "url": f"u-{target}",
            "sha256": "b",
            "pages": ["torch-2.14.1+cpu.html"],
        }
        (state / "v0.2.0" / f"manifest-{target}.json").write_text(json.dumps({"target": target, "wheels": [entry]}))
    out = tmp_path / "previous.json"
    assert release.release_manifests(str(out), gh, str(tmp_path)) == ["v0.1.0", "v0.2.0"]
    merged = json.load(open(out))["wheels"]
    assert [e["file"] for e in merged] == [
        "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl",
        "prerast-0.2.0-py3-none-macosx_11_0_arm64.whl",
        "prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl",
    ]
    assert all("path" not in e for e in merged)
