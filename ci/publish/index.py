"""Wheel indexes from a folder of wheels:

  <out>/torch-2.14.1+cu130.html   one find-links page per (torch release, platform), the page prerast's loader
                                  names in its fix-it message:  pip install prerast -f <root>/torch-2.14.1+cu130.html
  <out>/index.html                the list of those pages
  <out>/simple/prerast/           a PEP 503 simple index of every wheel (pip install --index-url <root>/simple)
  <out>/manifest.json             what the pages list (file, url, sha256, pages); a later release merges into it

A wheel is listed on the page of every torch build it serves. One page lists the wheels of every platform (Linux
x86-64 and aarch64, Windows, macOS) for that torch build: pip takes the one whose platform tag fits the machine it
runs on. Which builds a wheel serves comes from the wheel itself (prerast/_build_info.json; its file name: the
platform) and the torch builds the matrix's cells of its target serve (ci/matrix/__init__.py):
- a wheel with kernel libraries (a merged wheel, a slim one, one build of the whole plugin) serves each of those
  builds that one of its bindings serves (stable: every release from the floor on; classic: its torch minor) and
  one of its kernel libraries computes for (cpu, or the build's CUDA major). The one wheel of a target is listed
  on all of them: on Linux x86-64, classic 2.4-2.9 and every stable build, CUDA 12, CUDA 13 and CPU. A slim wheel
  with CUDA kernels leaves the CPU builds to the slim CPU wheel (+cpu, +pt24cpu), which pip prefers there to the
  untagged one wheel (a local version sorts after the public one), so that a CPU page installs the small file;
- an older wheel of one torch build (no kernel libraries in its metadata) is on the pages of its matrix cell;
- a wheel the matrix has no cell or target for is listed on the page of the torch it was built with.
Standard library only.
"""

import argparse
import hashlib
import html
import json
import os
import re
import sys
import zipfile

from ci import matrix
from ci.builder import wheel
from prerast_meta import compat

PROJECT = "prerast"


def find_wheels(paths):
    """The prerast wheel files among `paths` (folders searched recursively, or wheel files), absolute."""
    for p in paths:
        if os.path.isfile(p) and p.endswith(".whl"):
            yield os.path.abspath(p)
        for d, _, files in sorted(os.walk(p)):
            for f in sorted(files):
                if f.endswith(".whl") and f.startswith(PROJECT + "-"):
                    yield os.path.abspath(os.path.join(d, f))


def page_name(torch_version, cuda_version):
    """'2.14.1+cu130', '13.0' -> 'torch-2.14.1+cu130.html'; a CPU build -> 'torch-2.13.0+cpu.html'."""
    return compat.find_links_page(torch_version, compat.compute_platform(cuda_version))


def _compute(platform):
    """The kernel library a torch build of `platform` runs: 'cu126' -> 'cu12', 'cpu' -> 'cpu'."""
    return "cpu" if platform == "cpu" else f"cu{matrix._cuda_major(platform)}"


def _binding_serves(binding, torch_release):
    """Does a binding (the top level of _build_info.json, or an entry of its `bindings`) serve this release?"""
    if compat.is_stable(binding):
        return compat.release(torch_release)[:2] >= compat.release(compat.floor(binding))[:2]
    return compat.minor(torch_release) == compat.minor(binding["torch_version"])


def served_pages(info, cells, target):
    """The pages of a wheel with kernel libraries on `target`: the module docstring says which."""
    if not info["kernels"] or not info.get("abi"):
        raise ValueError("a part (a binding or kernel libraries alone) is no wheel to index: merge its target first")
    bindings = [info] + list(info.get("bindings") or [])
    tagged = "+" in (info.get("prerast_version") or "")
    leave_cpu = tagged and any(k != "cpu" for k in info["kernels"])
    builds = dict.fromkeys(build for c in cells if c.target == target for build in c.serves)
    return [
        compat.find_links_page(release, platform)
        for release, platform in builds
        if _compute(platform) in info["kernels"]
        and any(_binding_serves(b, release) for b in bindings)
        and not (leave_cpu and platform == "cpu")
    ]


def pages_for(info, cells=None, plat=None):
    """The find-links pages a wheel with build metadata `info` and platform tag `plat` belongs on: those of the
    torch builds it serves on its target (the wheel's OS and machine; pip picks by tag among the wheels of every
    platform on one page)."""
    cells = matrix.load() if cells is None else cells
    target = matrix.target_of_tag(plat, among={c.target for c in cells}) if plat else None
    if target and "kernels" in info:
        return served_pages(info, cells, target)
    cell = matrix.cell_for_build(info, cells, target) if (target or not plat) else None
    if cell is None:
        return [page_name(info["torch_version"], info.get("cuda_version"))]
    return cell.pages


def describe(path, cells=None):
    """Manifest entry of one wheel file."""
    with zipfile.ZipFile(path) as z:
        info_name = next((n for n in z.namelist() if n.endswith(f"{PROJECT}/_build_info.json")), None)
        if info_name is None:
            raise ValueError(f"{path}: no {PROJECT}/_build_info.json inside: not a prerast binary wheel")
        info = json.loads(z.read(info_name))
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = z.read(meta_name).decode()
    m = re.search(r"^Requires-Python: *(.+)$", meta, re.M)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    plat = ".".join(wheel.wheel_tags(path)[2])
    return {
        "file": os.path.basename(path),
        "path": path,
        "sha256": digest,
        "size": os.path.getsize(path),
        "pages": pages_for(info, cells, plat),
        "kind": info.get("abi", "classic"),
        "platform": plat,
        "torch": info["torch_version"],
        "requires_python": m.group(1).strip() if m else None,
    }


def collect(paths, base_url=None, manifest=None):
    """Manifest entries: those of an earlier manifest, then each wheel found (a newer file of the same name wins;
    the same name twice among the new wheels keeps the first and warns)."""
    entries = {}
    if manifest:
        with open(manifest) as f:
            for e in json.load(f)["wheels"]:
                if "page" in e:  # a manifest from before wheels could serve several torch builds
                    e["pages"] = [e.pop("page")]
                entries[e["file"]] = e
    seen = set()
    cells = matrix.load()
    for path in find_wheels(paths):
        e = describe(path, cells)
        if e["file"] in seen:
            print(f"index: {e['file']} found twice; keeping the first ({entries[e['file']]['path']})", file=sys.stderr)
            continue
        seen.add(e["file"])
        if base_url:
            e["url"] = base_url.rstrip("/") + "/" + e["file"]
        entries[e["file"]] = e
    return sorted(entries.values(), key=lambda e: e["file"])


def _href(entry, page_dir):
    url = entry.get("url") or os.path.relpath(entry["path"], page_dir)
    return html.escape(url, quote=True) + "#sha256=" + entry["sha256"]


def _anchor(entry, page_dir):
    rp = entry.get("requires_python")
    attr = f' data-requires-python="{html.escape(rp, quote=True)}"' if rp else ""
    return f'    <a href="{_href(entry, page_dir)}"{attr}>{html.escape(entry["file"])}</a><br>'


def _page(title, lines):
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        + "\n".join(lines)
        + "\n  </body>\n</html>\n"
    )


def write(entries, out):
    """Write the pages, the PEP 503 index and the manifest into `out`; returns the page file names."""
    out = os.path.abspath(out)
    os.makedirs(os.path.join(out, "simple", PROJECT), exist_ok=True)
    pages = {}
    for e in entries:
        for page in e["pages"]:
            pages.setdefault(page, []).append(e)
    for page, group in pages.items():
        torch = page[len("torch-") : -len(".html")]
        with open(os.path.join(out, page), "w") as f:
            f.write(_page(f"{PROJECT} wheels for torch {torch}", [_anchor(e, out) for e in group]))
    links = [f'    <a href="{html.escape(p)}">{html.escape(p[:-5])}</a><br>' for p in sorted(pages)]
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(
            _page(f"{PROJECT} wheels, one page per torch build: pip install {PROJECT} -f <this folder>/<page>", links)
        )
    with open(os.path.join(out, "simple", "index.html"), "w") as f:
        f.write(_page("Simple index", [f'    <a href="{PROJECT}/">{PROJECT}</a>']))
    project_dir = os.path.join(out, "simple", PROJECT)
    with open(os.path.join(project_dir, "index.html"), "w") as f:
        f.write(_page(f"Links for {PROJECT}", [_anchor(e, project_dir) for e in entries]))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"wheels": entries}, f, indent=2)
    return sorted(pages)


def main(argv=None):
    i = argparse.ArgumentParser(
        prog="python -m ci index", description="Find-links pages and a PEP 503 index from wheels."
    )
    i.add_argument("wheels", nargs="*", help="folders (searched recursively) or wheel files")
    i.add_argument("--out", required=True)
    i.add_argument("--base-url", help="URL the wheels are served from (default: relative links to the files)")
    i.add_argument("--manifest", help="manifest.json of an earlier index whose wheels the new index keeps")
    args = i.parse_args(argv)
    entries = collect(args.wheels, args.base_url, args.manifest)
    if not entries:
        where = [f"under {' '.join(args.wheels)}"] if args.wheels else []
        where += [f"in {args.manifest}"] if args.manifest else []
        raise SystemExit(f"index: no {PROJECT} wheels {' or '.join(where) or '(give wheel folders or --manifest)'}")
    pages = write(entries, args.out)
    print(f"index: {len(entries)} wheels on {len(pages)} pages in {args.out}: " + ", ".join(pages))
