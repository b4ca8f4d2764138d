"""Do the torch builds of the cells exist? Asked of each cell's own index before anything is installed.

    python -m ci preflight --pr              # the cells of a pull request, and those its binding parts build with
    python -m ci preflight --published       # the cells of a release
    python -m ci preflight --cell 2.14.1+cu130 [--cell ...]
    python -m ci preflight --published --pypi DIR --torch-index DIR/{platform}   # other indexes (a mirror, a test)
    python -m ci preflight --published --disk    # also: each smoke job fits its runner's disk (ci/matrix/disk.py)

A cell names one exact torch build (2.14.1 from PyPI, or 2.14.1+cu126 from download.pytorch.org/whl/cu126), and
its wheel job installs that build under each of the cell's Pythons on its target (inside the manylinux image on
Linux, on the runner on Windows and macOS). This asks the index (`pip index versions`: the index page only, no
multi-GB download) which versions it has for that Python and the target's platform tags, one question per (index,
Python, target), and names every (cell, Python) whose build is missing. It reads
no pip configuration: the answer must come from the cell's index alone, not from a local mirror or constraint.
"""

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys

from ci import matrix
from ci.matrix import parts

PYPI_SIMPLE = "https://pypi.org/simple"


def index_of(cell, pypi=PYPI_SIMPLE, torch_index=None):
    """Where the cell's wheel job gets its torch: PyPI for the build PyPI serves, torch's index for the others.
    `torch_index` replaces the matrix's template (https://download.pytorch.org/whl/{platform})."""
    if cell.on_pypi:
        return pypi
    return torch_index.format(platform=cell.platform) if torch_index else cell.torch_index()


def wanted_version(cell):
    """The version string the index must list: '2.14.1' on PyPI, '2.14.1+cu126' on torch's index."""
    return cell.torch if cell.on_pypi else cell.torch_build


# glibc versions whose manylinux tag has a legacy alias (PEP 513, 571, 599).
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def target_platforms(target):
    """Every platform tag a wheel may carry and still install where the target's wheel job installs torch, in
    the order pip there prefers them.
    Linux (packaging.tags on the manylinux image's glibc): manylinux_2_28 down to the oldest manylinux of the
    machine (2_5 on x86, 2_17 elsewhere), each with its legacy alias, then the plain linux_<machine> tag, which pip
    accepts on every Linux. PyTorch's own index tags its 2.4-2.6 builds linux_x86_64 (cu126 of 2.6 and everything
    from 2.7 on manylinux_2_28), PyPI's torch up to 2.6 is manylinux1; pip never widens a --platform list itself.
    Windows: win_amd64. macOS: the runner's release (macos-15: macosx_15_0) down to 11.0, the first on arm64."""
    machine = target.machine.lower()
    if target.os == "windows":
        return [target.plat]
    if target.os == "macos":
        runner = re.fullmatch(r"macos-(\d+)\D*", target.runner)
        newest = int(runner.group(1)) if runner else int(re.fullmatch(r"macosx_(\d+)_\d+_\w+", target.plat).group(1))
        return [f"macosx_{m}_0_{machine}" for m in range(newest, 10, -1)]
    major, glibc = (int(x) for x in re.fullmatch(r"manylinux_(\d+)_(\d+)", target.manylinux).groups())
    oldest = 5 if machine in ("x86_64", "i686") else 17
    tags = []
    for minor in range(glibc, oldest - 1, -1):
        tags.append(f"manylinux_{major}_{minor}_{machine}")
        if minor in LEGACY_MANYLINUX:
            tags.append(f"{LEGACY_MANYLINUX[minor]}_{machine}")
    return tags + [f"linux_{machine}"]


def pip_env():
    """The environment without pip's settings: no config file, no PIP_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def source_args(index):
    """A URL is asked as an index; a local folder (the tests' fake index) as the only find-links source."""
    return ["--no-index", "--find-links", index] if os.path.isdir(index) else ["--index-url", index]


def available_versions(index, python, platforms, pip=(sys.executable, "-m", "pip")):
    """Versions of torch `index` has for CPython `python` on one of `platforms`: (versions, None), or (None, the
    error) when the index could not be asked."""
    cmd = [
        *pip,
        "index",
        "versions",
        "torch",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        *source_args(index),
    ]
    for p in platforms:
        cmd += ["--platform", p]
    out = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(), timeout=300)
    return parse_answer(out.returncode, out.stdout, out.stderr)


def parse_answer(returncode, stdout, stderr):
    """(versions, None) from pip's answer, or (None, why) when the index was not reached: pip then also says
    "No matching distribution", which must not pass for a verdict on the build."""
    m = re.search(r"^Available versions: (.*)$", stdout, re.M)
    if m:
        return {v.strip() for v in m.group(1).split(",")}, None
    trouble = re.search(r"^.*(Retrying \(|Could not fetch URL|connection broken|ProxyError|SSLError).*$", stderr, re.M)
    if trouble:
        cause = re.search(
            r"Name or service not known|Connection refused|timed out|\d{3} \w+ Error[^'\"]*|SSLError", trouble.group(0)
        )
        return None, "index not reached" + (f" ({cause.group(0)})" if cause else "")
    if "No matching distribution" in stdout + stderr:
        return set(), None
    return None, (stderr.strip().splitlines() or [f"pip exited with {returncode}"])[-1]


def check(cells, index_for=index_of, ask=None, jobs=8):
    """[(cell id, python, why)] for every (cell, Python) whose torch build the index lacks or could not confirm."""
    ask = ask or available_versions
    questions = {}
    for cell in cells:
        for python in cell.pythons:
            questions.setdefault((index_for(cell), python, cell.target.name), []).append(cell)
    tags = {c.target.name: target_platforms(c.target) for c in cells}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        answers = dict(zip(questions, pool.map(lambda q: ask(q[0], q[1], tags[q[2]]), questions)))
    problems = []
    for (index, python, target), asked in questions.items():
        versions, error = answers[(index, python, target)]
        for cell in asked:
            if error:
                problems.append((cell.id, python, f"could not ask {index}: {error}"))
            elif wanted_version(cell) not in versions:
                problems.append(
                    (
                        cell.id,
                        python,
                        f"{index} has no torch {wanted_version(cell)} for Python {python} "
                        f"on {tags[target][0]} or an older tag",
                    )
                )
    return sorted(problems, key=lambda p: (matrix._vkey(p[0]), p[0], matrix._vkey(p[1])))


def selected_cells(cells, published=False, pr=False):
    """The selected cells, then those whose torch builds the selected parts are built with and the selection lacks
    (a pull request's 2.4 binding is built with PyPI's 2.4.0, cu121, while its `pr` cell is 2.4.0+cu124)."""
    chosen = matrix.select(cells, published, pr)
    ids = {c.id for c in chosen}
    for p in parts.select(parts.load(cells=cells), published, pr):
        if p.cell and p.cell.id not in ids:
            chosen.append(p.cell)
            ids.add(p.cell.id)
    return chosen


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci preflight", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--published", action="store_true")
    p.add_argument("--pr", action="store_true", help="only the cells built on pull requests")
    p.add_argument("--cell", action="append", help="a cell name, e.g. 2.14.1+cu130 (repeatable)")
    p.add_argument(
        "--pypi",
        default=PYPI_SIMPLE,
        help=f"the index of PyPI's builds (default {PYPI_SIMPLE}); a local folder is read as a find-links folder",
    )
    p.add_argument(
        "--torch-index",
        help="the index of the other builds, {platform} replaced by cpu, cu126, ... "
        "(default: the matrix's, https://download.pytorch.org/whl/{platform})",
    )
    p.add_argument(
        "--disk",
        action="store_true",
        help="also check that each smoke job of the selection fits its runner's disk (ci/matrix.toml [disk])",
    )
    p.add_argument(
        "--runner-disk",
        action="append",
        default=[],
        metavar="LABEL=GIB",
        help="the GiB a runner offers instead of ci/matrix.toml's (a self-hosted runner; repeatable)",
    )
    a = p.parse_args(argv)
    try:
        offered = {k: float(v) for k, _, v in (r.partition("=") for r in a.runner_disk)}
    except ValueError:
        p.error(f"--runner-disk {a.runner_disk}: LABEL=GIB, e.g. ubuntu-24.04=14")
    if a.disk and a.cell:
        p.error("--disk checks the smoke jobs of a selection (--pr, --published or neither), not of --cell")
    if a.torch_index and "{platform}" not in a.torch_index:
        p.error(
            f"--torch-index {a.torch_index}: needs {{platform}}, e.g. https://download.pytorch.org/whl/{{platform}}"
        )
    cells = matrix.load()
    cells = [matrix.find(n, cells) for n in a.cell] if a.cell else selected_cells(cells, a.published, a.pr)
    problems = check(cells, index_for=lambda c: index_of(c, a.pypi, a.torch_index))
    pairs = sum(len(c.pythons) for c in cells)
    failed = False
    if not problems:
        print(f"preflight: all {pairs} torch builds of {len(cells)} cells exist")
    else:
        failed = True
        for cell_id, python, why in problems:
            error(f"{cell_id} (Python {python}): {why}")
        missing = sorted({c for c, _, _ in problems}, key=lambda c: (matrix._vkey(c), c))
        print(
            f"preflight: {len(problems)} of {pairs} torch builds missing or unconfirmed, in cells: "
            f"{', '.join(missing)}",
            file=sys.stderr,
        )
    if a.disk:
        failed |= not disk_fits(a.published, a.pr, a.pypi, offered)
    if failed:
        print("preflight: nothing is built, merged or published in this run (the workflow stops here)", file=sys.stderr)
    return 1 if failed else 0


def error(message):
    """A problem line: on GitHub also an error annotation, which the run's summary page lists."""
    print(f"preflight: {message}")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::error title=preflight::{message}")


def disk_fits(published, pr, pypi, offered):
    """Print each smoke job's disk need against its runner's budget; False when one cannot fit or be sized."""
    from ci.matrix import cibw, disk  # noqa: PLC0415  (only with --disk: packaging, the network)

    rows = cibw.target_matrix(parts.select(parts.load(), published=published, pr=pr))["include"]
    try:
        needs = disk.smoke_needs(rows, pypi, target_platforms, offered)
    except disk.DiskError as e:
        error(f"disk: the smoke jobs could not be sized: {e}")
        return False
    for need in needs:
        if need.fits():
            print(f"preflight: disk: {need.line()}")
        else:
            error(f"disk: {need.line()}: it cannot fit")
    return all(n.fits() for n in needs)
