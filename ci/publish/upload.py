"""A tag's release: the wheels of the plan's publishing targets and each target's manifest, as release assets.

    python -m ci release-upload v0.2.0 --wheels wheelhouse --plan plan.json   the assets of the publishing targets

Apart from ci/publish/release.py (the checks before a tag, the manifests) because it reads the publish plan
(ci/publish/plan.py), which itself reads the release's version: one module for both would import itself in a circle.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from ci import matrix
from ci.publish import plan as publish, release
from prerast_meta import integrity


def release_upload(tag, wheels, plan, gh="gh", base_url=None, notes_file=None, work=None, log=print):
    """Make the release of `tag` (or update its notes), then upload each wheel of the plan's publishing targets and
    each target's manifest that the release lacks. An asset of the same name is skipped when its bytes are the same
    and stops everything, before anything is uploaded, when they differ. Returns {'uploaded': [...], 'skipped':
    [...]}."""
    if not plan["published"]:
        raise release.ReleaseError("the plan publishes no target: " + (publish.summary(plan).strip()))
    base_url = base_url or f"https://github.com/{os.environ.get('GH_REPO', '<owner>/<repo>')}/releases/download/{tag}"
    targets = set(matrix.targets().values())
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        files = {}  # asset name -> local path
        by_target = {}
        paths = publish.wheel_paths(wheels)
        for name in plan["wheels"]:
            files[name] = publish.wheel_path(paths, name, wheels)
            by_target.setdefault(publish.target_of_wheel(name, targets).name, []).append(files[name])
        manifests = []
        for target in plan["published"]:
            path = os.path.join(tmp, f"manifest-{target}.json")
            with open(path, "wb") as f:
                f.write(release.target_manifest(target, by_target[target], base_url))
            files[os.path.basename(path)] = path
            manifests.append(os.path.basename(path))
        if notes_file is None:
            notes_file = os.path.join(tmp, "notes.md")
            with open(notes_file, "w") as f:
                f.write(publish.notes(plan))
        exists = subprocess.run([gh, "release", "view", tag], capture_output=True, text=True)
        if exists.returncode == 0:
            release._gh(gh, "release", "edit", tag, "--notes-file", notes_file)
            log(f"release-upload: release {tag} exists: its notes updated")
        elif "release not found" in exists.stderr:
            release._gh(
                gh, "release", "create", tag, "--verify-tag", "--title", f"prerast {tag}", "--notes-file", notes_file
            )
            log(f"release-upload: release {tag} created")
        else:
            raise release.ReleaseError(f"{gh} release view {tag} failed: {exists.stderr.strip()}")
        present = release._asset_digests(gh, tag, set(files), tmp)
        conflicts = []
        for name in sorted(set(files) & set(present)):
            ours = integrity.digest(files[name])[1]
            if present[name] != ours:
                conflicts.append(f"{name}: the release's asset has sha256 {present[name]}, this run's file {ours}")
        if conflicts:
            raise release.ReleaseError(
                "release assets are never replaced, and these differ from this run's files:\n  "
                + "\n  ".join(conflicts)
                + "\nThe release (and the index's sha256) describe the "
                "assets as first uploaded. Find out why the bytes differ (a rebuild is not "
                "reproducible byte for byte); to publish new bytes, release a new version."
            )
        # Wheels first, each target's manifest after its wheels: a manifest never names a wheel not yet there.
        order = [n for n in files if n not in manifests] + manifests
        todo = [n for n in order if n not in present]
        for name in todo:
            release._gh(gh, "release", "upload", tag, files[name])
        skipped = [n for n in order if n in present]
    log(
        f"release-upload: {len(todo)} uploaded, {len(skipped)} already there with the same bytes"
        + (": " + ", ".join(todo) if todo else "")
    )
    return {"uploaded": todo, "skipped": skipped}


def upload_main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ci release-upload", description=release_upload.__doc__)
    p.add_argument("tag", help="the release's tag, e.g. v0.2.0")
    p.add_argument("--wheels", required=True, help="the folder of the run's wheels")
    p.add_argument("--plan", required=True, help="python -m ci publish-plan's plan")
    p.add_argument("--notes", help="the release notes (publish-plan --notes); default: made from the plan")
    p.add_argument("--gh", default="gh", help="the GitHub CLI (it reads GH_TOKEN and GH_REPO)")
    p.add_argument("--base-url", help="where the assets are downloaded from (default: the release's download URL)")
    a = p.parse_args(argv)
    try:
        release_upload(a.tag, a.wheels, json.load(open(a.plan)), a.gh, a.base_url, a.notes)
    except release.ReleaseError as e:
        print(("::error::" if os.environ.get("GITHUB_ACTIONS") else "") + f"release-upload: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(upload_main())
