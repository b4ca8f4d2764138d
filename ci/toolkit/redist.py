"""The CUDA toolkit of a Windows part, from NVIDIA's redistributable archives. Standard library only.

    python -m ci toolkit-redist --part kernels-cu13-windows-amd64     # into .cibw/cuda-13.0: the part's CUDA_HOME
    python -m ci toolkit-redist --part PART --out DIR --root URL-OR-FOLDER --release 13.0.2

A Windows part with a toolkit (ci/matrix/parts.py: `cuda`) is a CUDA kernels part, whose nvcc it is, or the stable
binding of a CUDA torch, which compiles with its headers only (Windows torch brings no nvidia-* wheels).

NVIDIA publishes the components of each CUDA release as archives under one root (the target's `toolkit` in
ci/matrix.toml), described by redistrib_<release>.json: per component (cuda_nvcc, cuda_cudart, ...) and platform
(windows-x86_64, linux-x86_64, linux-sbsa) the archive's relative_path and sha256. This takes the newest release
of the part's CUDA version that the root lists (or --release), the components of [toolkit].packages under their
redist names (cuda-nvcc -> cuda_nvcc, cuda-cudart-devel -> cuda_cudart), checks each archive's SHA-256 and unpacks
it without its top folder, so that the components merge into one toolkit tree (bin/nvcc.exe, include/, lib/x64/).
The root may be a URL, a file:// URL or a folder (the tests' fake redist).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile

# NVIDIA's platform names in redistrib_*.json, per (target os, machine).
REDIST_PLATFORM = {
    ("windows", "amd64"): "windows-x86_64",
    ("linux", "x86_64"): "linux-x86_64",
    ("linux", "aarch64"): "linux-sbsa",
}
# Parts of a component that NVIDIA ships as components of their own in some releases (CUDA 13 moved nvcc's CRT
# headers and NVVM out of cuda_nvcc): taken along wherever the release lists them.
COMPANIONS = {"cuda_nvcc": ("cuda_crt", "libnvvm")}
MARKER = "prerast-redist.json"  # what was unpacked, written last: a complete toolkit has it


class RedistError(RuntimeError):
    """The redist root lacks the release, a component or an archive, or an archive is not what the JSON says."""

    exit_code = 1


def redist_name(package):
    """[toolkit].packages' RHEL name -> the redist component: cuda-cudart-devel -> cuda_cudart."""
    return re.sub(r"-devel$", "", package).replace("-", "_")


def _local(root):
    """The folder of a folder path or a file:// URL; None for a remote URL."""
    if root.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(root).path)
    return root if "://" not in root else None


def _open(root, relative):
    local = _local(root)
    if local is not None:
        path = os.path.join(local, *relative.split("/"))
        if not os.path.exists(path):
            raise RedistError(f"{relative} is not under {root}")
        return open(path, "rb")
    url = root.rstrip("/") + "/" + relative
    try:
        return urllib.request.urlopen(url, timeout=120)
    except OSError as e:
        raise RedistError(f"cannot fetch {url}: {e}") from e


def releases(root):
    """The releases whose redistrib_<release>.json the root lists: ['12.6.3', '13.0.0', ...], oldest first."""
    local = _local(root)
    if local is not None:
        if not os.path.isdir(local):
            raise RedistError(f"the redist root {root} is not a folder")
        text = "\n".join(os.listdir(local))
    else:
        with _open(root, "") as f:
            text = f.read().decode("utf-8", "replace")
    found = set(re.findall(r"redistrib_(\d+\.\d+\.\d+)\.json", text))
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def newest_release(root, cuda):
    """The newest release of CUDA version `cuda` ('13.0') the root lists: '13.0.2'."""
    mine = [r for r in releases(root) if r.startswith(cuda + ".")]
    if not mine:
        raise RedistError(
            f"{root} lists no redistrib_{cuda}.*.json: no CUDA {cuda} release there "
            "(give --release, or check the target's toolkit in ci/matrix.toml)"
        )
    return mine[-1]


def components(manifest, packages, platform):
    """[(component, entry)] to unpack: the packages' redist names and their companions, for `platform`."""
    wanted = []
    for package in packages:
        name = redist_name(package)
        if name not in manifest or platform not in manifest[name]:
            have = sorted(k for k, v in manifest.items() if isinstance(v, dict) and platform in v)
            raise RedistError(
                f"redistrib_{manifest.get('release_label', '?')}.json has no {name} (from {package}) "
                f"for {platform}; it has: {', '.join(have)}"
            )
        wanted.append(name)
        wanted += [c for c in COMPANIONS.get(name, ()) if platform in manifest.get(c, {})]
    return [(name, manifest[name][platform]) for name in dict.fromkeys(wanted)]


def _fetch(root, entry, work):
    """The archive of one component, downloaded into `work` and checked against its sha256."""
    relative = entry["relative_path"]
    path = os.path.join(work, os.path.basename(relative))
    digest = hashlib.sha256()
    with _open(root, relative) as src, open(path, "wb") as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    if entry.get("sha256") and digest.hexdigest() != entry["sha256"]:
        raise RedistError(
            f"{relative}: SHA-256 {digest.hexdigest()} is not the {entry['sha256']} that the "
            "redist JSON names (a damaged or replaced download): run again"
        )
    return path


def _members(names):
    """(member, path inside the toolkit) without the archive's top folder; refuses paths that leave it."""
    for name in names:
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
            raise RedistError(f"archive member {name!r} would land outside the toolkit folder")
        inner = [p for p in parts[1:] if p]
        if inner:
            yield name, os.path.join(*inner)


def unpack(archive, out):
    """Unpack a .zip or .tar.xz component archive into `out`, dropping its top folder."""
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for name, rel in _members(z.namelist()):
                dest = os.path.join(out, rel)
                if name.endswith("/"):
                    os.makedirs(dest, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with z.open(name) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        return
    with tarfile.open(archive) as t:
        for member in t.getmembers():
            for _, rel in _members([member.name]):
                dest = os.path.join(out, rel)
                if member.isdir():
                    os.makedirs(dest, exist_ok=True)
                elif member.isfile():
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with t.extractfile(member) as src, open(dest, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.chmod(dest, member.mode & 0o755 | 0o644)


def install(root, cuda, packages, platform, out, release=None, log=print):
    """Unpack the components of `packages` for `platform` of CUDA `cuda` from `root` into `out`. Returns the
    record written to out/prerast-redist.json: {'release': ..., 'platform': ..., 'components': {name: version}}."""
    release = release or newest_release(root, cuda)
    if not release.startswith(cuda + "."):
        raise RedistError(f"release {release} is not one of CUDA {cuda}")
    with _open(root, f"redistrib_{release}.json") as f:
        manifest = json.load(f)
    chosen = components(manifest, packages, platform)
    os.makedirs(out, exist_ok=True)
    marker = os.path.join(out, MARKER)
    if os.path.exists(marker):
        os.remove(marker)  # a partial unpack must not look complete
    work = tempfile.mkdtemp(prefix="prerast-redist-")
    try:
        for name, entry in chosen:
            log(f"CUDA {release} {name} ({entry['relative_path']})")
            unpack(_fetch(root, entry, work), out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = {
        "release": release,
        "platform": platform,
        "components": {name: manifest[name].get("version", "") for name, _ in chosen},
    }
    with open(marker, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    return record


def main(argv=None):
    from ci import matrix
    from ci.matrix import cibw, parts

    p = argparse.ArgumentParser(
        prog="python -m ci toolkit-redist", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--part", required=True, help="a part with a CUDA toolkit, e.g. kernels-cu13-windows-amd64")
    p.add_argument("--out", help="the toolkit folder (default: the part's CUDA_HOME, python -m ci cibw-env)")
    p.add_argument("--root", help="redist URL or folder (default: the part's target's toolkit)")
    p.add_argument("--release", help="exact CUDA release, e.g. 13.0.2 (default: the newest of the part's CUDA)")
    a = p.parse_args(argv)
    try:
        part = parts.find(a.part)
        if not part.cuda:
            raise RedistError(f"part {part.id} needs no CUDA toolkit")
        platform = REDIST_PLATFORM.get((part.target.os, part.target.machine.lower()))
        root = a.root or part.target.toolkit
        if platform is None or not (a.root or part.target.os == "windows"):
            raise RedistError(
                f"part {part.id}: its target {part.target.name} installs CUDA from {root}, not from "
                "NVIDIA's redist archives (give --root to use them anyway)"
            )
        out = a.out or cibw.redist_toolkit_dir(part)
        record = install(root, part.cuda, matrix.toolkit()["packages"], platform, out, a.release)
    except (RedistError, matrix.MatrixError) as e:
        print(f"toolkit-redist: {e}", file=sys.stderr)
        return RedistError.exit_code
    nvcc = os.path.join(out, "bin", "nvcc.exe" if platform.startswith("windows") else "nvcc")
    if "cuda_nvcc" in record["components"] and not os.path.exists(nvcc):
        print(f"toolkit-redist: the archives of CUDA {record['release']} gave no {nvcc}", file=sys.stderr)
        return RedistError.exit_code
    print(f"CUDA {record['release']} ({', '.join(record['components'])}) in {out}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
