"""Releases: the checks before a tag, and the manifests the published index is built from.

    python -m ci release-check [--tag v0.2.0]   what can be checked here before tagging, and a list to tick
    python -m ci tag-check v0.2.0               the tag is v + the package version (the workflow's first step)
    python -m ci release-manifests --out previous.json   every release's manifests merged (the Pages job)

A release's version is the one in prerast_meta/version.py (setup.py reads it); the tag that publishes it must
be exactly v<version>, or the wheels of the old version would go out under the new tag and PyPI would refuse them.
Each release carries, next to its wheels, one manifest per target, manifest-<target>.json, describing its wheels
as they were uploaded (ci/publish/index.py's entries: name, URL, sha256, pages). A target's wheels and manifest are uploaded
once: a re-run skips an asset whose bytes are the same and stops on one whose bytes differ, so an asset is never
replaced and the manifests (and the index's sha256) stay true. The Pages job builds the index from the manifests of
every release (older releases: one manifest.json), not from what the live site last served, so that no deploy
depends on the one before it having happened or being visible yet.
"""

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

from ci import matrix
from prerast_meta import integrity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERSION_FILE = os.path.join("prerast_meta", "version.py")
MANIFEST = "manifest.json"  # one per release, before manifests were per target
MANIFESTS = "manifest*.json"

# What the jobs need and only the repository's settings can say (docs/releasing.md).
SETTINGS = [
    "Settings > Pages: Source = GitHub Actions",
    "Settings > Environments > github-pages > Deployment branches and tags: a tag rule v*",
    "Settings > Environments: an environment named pypi",
    # A re-run of the failed jobs adds the assets of the targets that failed to the release already published;
    # an immutable release refuses them ("Cannot upload assets to an immutable release").
    "Settings > General > Releases: 'Enable release immutability' left OFF (a re-run adds a failed target's "
    "assets to the published release)",
    # The project exists on PyPI only after its first upload: until then a trusted publisher can only be pending.
    "pypi.org > Your account > Publishing (first release: a pending publisher; later: the prerast project's "
    "Publishing): project prerast, this repository, workflow wheels.yml, environment pypi",
]


class ReleaseError(Exception):
    """A release step cannot go on; the message says what to change."""


def package_version(root=ROOT):
    """The package version, read the way setup.py reads it: '0.2.0'."""
    text = open(os.path.join(root, VERSION_FILE)).read()
    m = re.search(r'__version__ = "([^"]+)"', text)
    if not m:
        raise ReleaseError(f'{VERSION_FILE}: no __version__ = "X.Y.Z" line')
    return m.group(1)


def tag_problem(tag, version):
    """None when `tag` (v0.2.0 or refs/tags/v0.2.0) publishes `version`, else what is wrong and what to do."""
    name = tag.removeprefix("refs/tags/")
    if name == f"v{version}":
        return None
    return (
        f"tag {name} does not match the package version {version} ({VERSION_FILE}): the wheels would be "
        f'prerast {version}. Tag v{version}, or set __version__ = "{name.removeprefix("v")}" in {VERSION_FILE}, '
        f"commit, and tag that commit."
    )


def tagged_commit(tag, root=ROOT):
    """The commit `tag` names in the git checkout at `root`, or None when there is no such tag (or no git)."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def head_commit(root=ROOT):
    out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def build_problems(releases=None, published=None):
    """What ci/matrix.toml and ci/published_builds.toml disagree on: a matrix platform PyTorch does not publish,
    or a published torch minor the matrix does not serve."""
    releases = matrix.releases() if releases is None else releases
    published = matrix.published_builds() if published is None else published
    problems = []
    for minor, rel in sorted(releases.items(), key=lambda kv: matrix._vkey(kv[0])):
        known = published.get(minor)
        if known is None:
            problems.append(
                f"torch {minor} is in ci/matrix.toml but not in ci/published_builds.toml: add its builds "
                "from its release notes"
            )
            continue
        extra = sorted(set(rel["platforms"]) - known)
        if extra:
            problems.append(
                f"torch {minor}: ci/matrix.toml lists {extra}, which PyTorch does not publish "
                "(ci/published_builds.toml)"
            )
    for minor in sorted(set(published) - set(releases), key=matrix._vkey):
        problems.append(
            f"torch {minor} is published (ci/published_builds.toml) but ci/matrix.toml has no [[torch]] "
            "entry for it: its users get no find-links page"
        )
    return problems


def release_check(tag=None, root=ROOT, out=None):
    """Print the checklist; returns the number of failed checks."""
    out = out or sys.stdout
    version = package_version(root)
    tag = tag or f"v{version}"
    failed = 0

    def line(ok, text):
        nonlocal failed
        failed += not ok
        print(f"  [{'ok' if ok else 'FAIL'}] {text}", file=out)

    print(f"release-check: prerast {version}, tag {tag}", file=out)
    problem = tag_problem(tag, version)
    line(problem is None, problem or f"tag {tag} = v + the package version ({VERSION_FILE})")
    # The mistake the tag check cannot see: the version was not bumped since the last release.
    tagged = tagged_commit(tag, root)
    if tagged and tagged != head_commit(root):
        line(False, f"{tag} already names commit {tagged[:12]}, not this one: bump {VERSION_FILE} for a new release")
    else:
        line(True, f"{tag} is not tagged yet" if not tagged else f"{tag} names this commit (a re-run of its release)")
    problems = build_problems()
    cells = matrix.select(matrix.load(), published=True)
    line(
        not problems,
        "; ".join(problems)
        or f"ci/matrix.toml serves every torch minor of ci/published_builds.toml "
        f"({len(matrix.published_builds())}), with {len(cells)} published cells",
    )
    print("Repository settings the jobs need (check them by hand; they cannot be read from here):", file=out)
    for setting in SETTINGS:
        print(f"  [ ] {setting}", file=out)
    print(
        f"Then: python -m ci preflight --published (asks the indexes), python -m ci rehearse, bash ci/test.sh, "
        f"merge, and git tag {tag} && git push origin {tag}",
        file=out,
    )
    return failed


def _gh(gh, *args):
    out = subprocess.run([gh, *args], capture_output=True, text=True)
    if out.returncode:
        raise ReleaseError(f"{gh} {' '.join(args)} failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def release_manifests(out, gh="gh", work=None):
    """Merge the manifests (manifest-<target>.json, or an older release's manifest.json) of every published
    (non-draft) release into one manifest at `out`, the releases
    taken oldest first (a newer release's entry for the same file wins); returns the tags merged. A release with
    prerast wheels but no manifest is an error: an index built without it would drop its wheels."""
    import tempfile

    releases = json.loads(_gh(gh, "release", "list", "--limit", "1000", "--json", "tagName,isDraft,createdAt"))
    entries, merged, missing = {}, [], []
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for rel in sorted(releases, key=lambda r: r["createdAt"]):
            if rel["isDraft"]:
                continue  # its asset URLs are not public yet
            tag = rel["tagName"]
            names = {a["name"] for a in json.loads(_gh(gh, "release", "view", tag, "--json", "assets"))["assets"]}
            manifests = sorted(n for n in names if fnmatch.fnmatch(n, MANIFESTS))
            if not manifests:
                if any(n.startswith("prerast-") and n.endswith(".whl") for n in names):
                    missing.append(tag)
                continue
            folder = os.path.join(tmp, str(len(merged)))
            os.makedirs(folder)
            _gh(gh, "release", "download", tag, "--pattern", MANIFESTS, "--dir", folder)
            for name in manifests:
                with open(os.path.join(folder, name)) as f:
                    for e in json.load(f)["wheels"]:
                        if not e.get("url"):
                            raise ReleaseError(
                                f"release {tag}: {name} lists {e['file']} without a URL: it was made without --base-url"
                            )
                        e.pop("path", None)  # a local path of the machine that made an older manifest
                        entries[e["file"]] = e
            merged.append(tag)
    if missing:
        raise ReleaseError(
            f"releases {', '.join(missing)} have wheels but no manifest ({MANIFESTS}): make one with "
            f"`python -m ci index <its wheels> --out idx --base-url <its download URL>` and "
            f"`gh release upload <tag> idx/{MANIFEST}`, or delete the release"
        )
    with open(out, "w") as f:
        json.dump({"wheels": sorted(entries.values(), key=lambda e: e["file"])}, f, indent=2, sort_keys=True)
    return merged


def target_manifest(target, paths, base_url):
    """manifest-<target>.json's bytes: ci/publish/index.py's entry of each wheel as uploaded (its URL under `base_url`),
    without the local path, keys sorted: the same wheels give the same bytes on any machine and any re-run."""
    from ci.publish import index

    entries = index.collect(paths, base_url)
    for e in entries:
        e.pop("path")
    return (json.dumps({"target": target, "wheels": entries}, indent=2, sort_keys=True) + "\n").encode()


def _asset_digests(gh, tag, names, work):
    """{asset name: sha256} of the release's assets among `names`: from the digest GitHub gives, else downloaded."""
    assets = json.loads(_gh(gh, "release", "view", tag, "--json", "assets"))["assets"]
    found = {}
    for a in assets:
        if a["name"] not in names:
            continue
        digest = a.get("digest") or ""
        if digest.startswith("sha256:"):
            found[a["name"]] = digest[len("sha256:") :]
            continue
        folder = os.path.join(work, "existing")
        os.makedirs(folder, exist_ok=True)
        _gh(gh, "release", "download", tag, "--pattern", a["name"], "--dir", folder, "--clobber")
        found[a["name"]] = integrity.digest(os.path.join(folder, a["name"]))[1]
    return found


def tag_main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci tag-check", description=f"Fails unless TAG is v + the version in {VERSION_FILE}."
    )
    p.add_argument("tag", help="the tag, e.g. v0.2.0 or refs/tags/v0.2.0")
    a = p.parse_args(argv)
    problem = tag_problem(a.tag, package_version())
    if problem:
        print(("::error::" if os.environ.get("GITHUB_ACTIONS") else "tag-check: ") + problem, file=sys.stderr)
        return 1
    print(f"tag-check: {a.tag.removeprefix('refs/tags/')} publishes prerast {package_version()}")
    return 0


def manifests_main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ci release-manifests", description=release_manifests.__doc__)
    p.add_argument("--out", required=True, help="the merged manifest to write, e.g. previous.json")
    p.add_argument("--gh", default="gh", help="the GitHub CLI (it reads GH_TOKEN and GH_REPO)")
    a = p.parse_args(argv)
    try:
        tags = release_manifests(a.out, a.gh)
    except ReleaseError as e:
        print(f"release-manifests: {e}", file=sys.stderr)
        return 1
    print(
        f"release-manifests: {len(tags)} releases merged into {a.out}"
        + (f": {', '.join(tags)}" if tags else " (none yet: the first release)")
    )
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci release-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tag", help="the tag to push (default: v + the package version)")
    a = p.parse_args(argv)
    failed = release_check(a.tag)
    if failed:
        print(f"release-check: {failed} check(s) failed", file=sys.stderr)
    return 1 if failed else 0
