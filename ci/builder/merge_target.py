"""python -m ci merge-target: the wheels of one target from the part wheels its jobs built (the workflow's merge job).

    python -m ci merge-target linux-x86_64 --published --parts parts --out merged

Every part of the target that the selection builds (ci/matrix/parts.py: --published, --pr, or neither for all)
must be under --parts (any depth: download-artifact's folders) exactly once, and a binding built with a CUDA torch
must carry its CUDA part: a missing or incomplete part stops the merge, naming it, so that no wheel lacking a torch
release or a compute goes out. Then what `python -m ci merge` does (ci/builder/merge.py), once for the one wheel of
all the parts (no local version: PyPI's) and once with --slim for each slim wheel the index pages serve. Each wheel
written must have the name the matrix gives it (parts.merges), which the publish plan looks for.
"""

import argparse
import os
import sys

from ci import matrix
from ci.builder import merge as _merge
from ci.matrix import parts as _parts


def part_wheels(folder, target):
    """{local version tag: [paths]} of the part wheels of `target` under `folder`."""
    found = {}
    for d, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            if not (f.startswith("prerast-") and f.endswith(".whl")):
                continue
            _, version, tags = _merge.wheel_fields(f)
            if matrix.target_of_tag(tags.split("-")[-1]) == target and "+" in version:
                found.setdefault(version.partition("+")[2], []).append(os.path.join(d, f))
    return found


def chosen_parts(target_parts, folder):
    """{part id: its wheel} for every part of target_parts, or MergeRefused naming the missing and doubled ones."""
    found = part_wheels(folder, target_parts[0].target)
    missing = [p.id for p in target_parts if p.local_tag not in found]
    doubled = [f"{p.id} ({', '.join(found[p.local_tag])})" for p in target_parts if len(found.get(p.local_tag, [])) > 1]
    if missing or doubled:
        raise _merge.MergeRefused(
            (
                f"parts missing under {folder}: {', '.join(missing)} (their jobs failed or did not run)"
                if missing
                else ""
            )
            + ("; " if missing and doubled else "")
            + (f"parts found twice: {'; '.join(doubled)}" if doubled else "")
        )
    chosen = {p.id: found[p.local_tag][0] for p in target_parts}
    for p in target_parts:
        if p.kind == "binding" and p.cell.cuda and not _merge.read_part(chosen[p.id]).info.get("cuda_library"):
            raise _merge.MergeRefused(
                f"{os.path.basename(chosen[p.id])}: the {p.id} binding was built with torch {p.cell.torch_build} but "
                "has no CUDA part (its build found no CUDA headers): its wheel would run on the CPU only"
            )
    return chosen


def merge_target(target_parts, folder, out_dir, version=None):
    """Merge the parts of one target (target_parts: its selected parts) found under `folder` into out_dir; returns
    the paths written, the one wheel first."""
    chosen = chosen_parts(target_parts, folder)
    written = []
    for m in _parts.merges(target_parts):
        path = _merge.merge([chosen[p.id] for p in m.parts], out_dir, slim=m.slim)
        base = _merge.wheel_fields(path)[1].partition("+")[0]
        want = m.wheel_name(version or base)
        # Up to the platform tag: parts built here may carry a newer manylinux level than the target's.
        if os.path.basename(path).rsplit("-", 1)[0] != want.rsplit("-", 1)[0]:
            raise _merge.MergeRefused(
                f"{os.path.basename(path)} was written where the matrix expects {want} (ci/matrix/parts.py merges)"
            )
        written.append(path)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ci merge-target", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("target", help="a [target.*] of ci/matrix.toml, e.g. linux-x86_64")
    ap.add_argument("--published", action="store_true", help="the parts of the published cells (a tag's run)")
    ap.add_argument("--pr", action="store_true", help="the parts of the cells built on pull requests")
    ap.add_argument("--parts", required=True, help="the folder of the part wheels (searched recursively)")
    ap.add_argument("--out", required=True, help="the folder for the merged wheels")
    a = ap.parse_args(argv)
    selected = _parts.by_target(_parts.select(_parts.load(), published=a.published, pr=a.pr))
    if a.target not in selected:
        print(f"python -m ci merge-target: no part of this selection is for {a.target!r}", file=sys.stderr)
        return 2
    try:
        written = merge_target(selected[a.target], a.parts, a.out)
    except _merge.MergeRefused as e:
        print(f"python -m ci merge-target: {a.target}: {e}", file=sys.stderr)
        return 1
    for path in written:
        print("\n".join(_merge.describe(path)))
    return 0
