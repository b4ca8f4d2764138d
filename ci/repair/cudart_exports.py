"""The cudart exports that a CUDA kernel library may import: per CUDA major, the symbols of the oldest CUDA runtime
that a torch build prerast serves ships, kept as generated lists in ci/repair/cudart/ (read by ci/repair/served.py).

    python -m ci cudart-exports            # what each list was made from (offline)
    python -m ci cudart-exports --update   # make them again: the matrix, PyPI's torch and nvidia-cuda-runtime wheels

How a list is made: the matrix (ci/matrix.toml) gives the torch builds the Linux x86-64 wheel serves; per CUDA
major, the lowest CUDA minor among them (cu121 for 12, cu130 for 13); among the builds of that minor that PyPI
serves as plain `torch==<release>` (the others come from torch's own index, which this command does not ask), the
runtime pinned by each (pip's resolution of torch, metadata only where PyPI has it); the oldest of those
(nvidia-cuda-runtime-cu12 12.1.105, pinned by torch 2.4.0); its wheel from PyPI, and `nm -D --defined-only` of its
libcudart.so.<major>. torch pins its runtime exactly, so a served torch never loads an older one.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

from ci import matrix
from ci.repair import served

PACKAGES = {"12": "nvidia-cuda-runtime-cu12", "13": "nvidia-cuda-runtime"}  # the runtime's wheel per CUDA major
TARGET = "linux-x86_64"


def _vkey(version):
    return tuple(int(x) for x in re.findall(r"\d+", version))


def served_builds(target=TARGET):
    """{(torch release, platform)} that the target's published wheels serve."""
    return {s for c in matrix.load() if c.target.name == target and c.published for s in c.serves}


def sources(target=TARGET):
    """{CUDA major: (platform, [torch releases PyPI serves as that build])}: the lowest CUDA minor the target's
    wheels serve per major, and the releases whose plain `torch==` is that build (the lowest served patch each)."""
    builds = served_builds(target)
    pypi = {r["version"]: r.get("pypi") for r in matrix._load_toml(matrix.MATRIX_FILE)["torch"]}
    by_minor = {matrix.minor(v): p for v, p in pypi.items()}
    out = {}
    for major in PACKAGES:
        platforms = sorted({p for _, p in builds if p.startswith(f"cu{major}")}, key=_vkey)
        if not platforms:
            continue
        lowest = platforms[0]
        releases = {}
        for release, platform in builds:
            if platform == lowest and by_minor.get(matrix.minor(release)) == lowest:
                m = matrix.minor(release)
                releases[m] = min(releases.get(m, release), release, key=_vkey)
        out[major] = (lowest, sorted(releases.values(), key=_vkey))
    return out


def pip(*args, **run):
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], **run)


def runtime_pin(release, major, tmp):
    """The runtime version `torch==release` installs on this machine's kind (pip's resolution; metadata only where
    PyPI has it)."""
    report = os.path.join(tmp, f"report-{release}.json")
    # ===: that very version, not a local build of it (a find-links folder's 2.13.0+cpu matches ==2.13.0).
    done = pip("install", "-q", "--dry-run", "--ignore-installed", "--report", report, f"torch==={release}")
    if done.returncode != 0:
        raise SystemExit(f"cudart-exports: pip could not resolve torch=={release} (PyPI reachable?)")
    with open(report) as f:
        for item in json.load(f)["install"]:
            if item["metadata"]["name"] == PACKAGES[major]:
                return item["metadata"]["version"]
    raise SystemExit(f"cudart-exports: torch=={release} installs no {PACKAGES[major]}")


def manylinux_platforms(plat):
    """Every platform tag a manylinux_2_28_x86_64 machine installs, newest first: pip takes a given --platform
    as it is, and the runtime wheels are tagged manylinux1 (12.1) or manylinux2014 (13.0)."""
    _, _, minor, machine = plat.split("_", 3)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for y in range(int(minor), 4, -1):
        tags.append(f"manylinux_2_{y}_{machine}")
        if y in legacy:
            tags.append(f"{legacy[y]}_{machine}")
    return tags


def library_exports(major, version, tmp):
    """(wheel file name, sorted 'name@version' lines) of libcudart.so.<major> in the runtime's wheel from PyPI."""
    dest = os.path.join(tmp, f"cudart-{version}")
    plat = next(t.plat for t in matrix.targets().values() if t.name == TARGET)
    platforms = [x for p in manylinux_platforms(plat) for x in ("--platform", p)]
    done = pip("download", "-q", "--no-deps", "--only-binary=:all:", *platforms, "-d", dest,
               f"{PACKAGES[major]}=={version}")  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"cudart-exports: pip could not download {PACKAGES[major]}=={version}")
    (wheel,) = glob.glob(os.path.join(dest, "*.whl"))
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if re.search(rf"/libcudart\.so\.{major}$", n)]
        library = z.extract(name, dest)
    lines = sorted({f"{n}@{v}" if v else n for n, v in served.dynamic_symbols(library, defined=True)})
    return os.path.basename(wheel), lines


def update():
    os.makedirs(served.CUDART_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for major, (platform, releases) in sorted(sources().items()):
            pins = {release: runtime_pin(release, major, tmp) for release in releases}
            oldest = min(pins.values(), key=_vkey)
            by = [r for r, v in pins.items() if v == oldest]
            wheel, lines = library_exports(major, oldest, tmp)
            header = [
                f"The symbols that libcudart.so.{major} of {PACKAGES[major]} {oldest} exports (nm -D --defined-only):",
                f"the oldest CUDA {major} runtime that a torch build prerast serves ships. Generated by",
                "`python -m ci cudart-exports --update` (ci/repair/cudart_exports.py); do not edit.",
                f"version: {oldest}",
                f"served by: torch {', '.join(by)} ({platform})",
                f"pins read: {', '.join(f'torch {r}: {v}' for r, v in pins.items())}",
                f"wheel: {wheel}",
            ]
            with open(served.exports_file(major), "w") as f:
                f.write("".join(f"# {h}\n" for h in header) + "".join(f"{line}\n" for line in lines))
            print(f"cu{major}: {len(lines)} exports of {PACKAGES[major]} {oldest} (torch {', '.join(by)})")


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci cudart-exports", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--update", action="store_true", help="make the lists again (needs PyPI)")
    a = p.parse_args(argv)
    if a.update:
        update()
        return 0
    for major, (platform, releases) in sorted(sources().items()):
        if not os.path.exists(served.exports_file(major)):
            print(f"cu{major}: no list (run python -m ci cudart-exports --update)")
            continue
        fields, names = served.cudart_exports(major)
        print(f"cu{major}: {len(names)} exports of libcudart {fields.get('version')}, {fields.get('served by')}; "
              f"the matrix's lowest CUDA {major} build now: {platform}, on PyPI as torch {', '.join(releases)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
