"""A fresh clone of this repository and a machine with only what README.md asks to install: the documented
commands are tried there, as a new user would, rather than in the working tree that built and ran everything."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Build tools the cell's virtualenv brings (ci/requirements-cell.txt) or that only a CUDA build needs: a copy on
# the machine must not make a documented command work that would fail without it.
NOT_ON_A_FRESH_MACHINE = {"ccache", "sccache", "ninja", "patchelf", "auditwheel", "nvcc", "cmake"}


def clone(dest):
    """`git clone` of the committed HEAD (what a new user gets) into dest; returns dest as a str."""
    dest = str(dest)
    subprocess.run(["git", "clone", "-q", "--shared", ROOT, dest], check=True)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    subprocess.run(["git", "-C", dest, "checkout", "-q", "--detach", head.stdout.strip()], check=True)
    return dest


def system_bin(dest):
    """A folder of links to the programs of /usr/bin and /bin, less NOT_ON_A_FRESH_MACHINE: the system part of
    a fresh machine's PATH (gcc, g++, git and the binutils stay: the README asks for a compiler and a clone)."""
    os.makedirs(dest, exist_ok=True)
    for folder in ("/usr/bin", "/bin"):
        for name in sorted(os.listdir(folder)):
            link = os.path.join(dest, name)
            if name not in NOT_ON_A_FRESH_MACHINE and not os.path.lexists(link):
                os.symlink(os.path.join(folder, name), link)
    return str(dest)


def fresh_env(path_dirs, **extra):
    """The environment of a new user's shell: PATH from path_dirs, HOME and pip's configuration of this machine
    (where its packages come from), and nothing else of the test run (no PYTHONPATH, CUDA_HOME, PRERAST_*)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("HOME", "LANG", "TERM", "USER")}
    env["PATH"] = os.pathsep.join(str(d) for d in path_dirs)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def venv_bin():
    """The bin folder of the Python running the tests: the user's `python` with torch and prerast installed."""
    return os.path.dirname(sys.executable)
