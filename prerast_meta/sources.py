"""The build inputs of prerast's plugin: which files they are, where to find them, their hash, and a fresh copy
of them to build from.

Wheels carry these files under prerast/_src, so that `python -m prerast build-wheel` and the opt-in first-use
build work from an installed prerast as well as from a checkout. Standard library only.
"""

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess

META_DIR = os.path.dirname(os.path.abspath(__file__))
# The runtime package beside this one: <site-packages>/prerast, or <checkout>/package/prerast.
PACKAGE_DIR = os.path.join(os.path.dirname(META_DIR), "prerast")
if not os.path.isdir(PACKAGE_DIR):
    PACKAGE_DIR = os.path.join(os.path.dirname(META_DIR), "package", "prerast")
SHIPPED_DIR = os.path.join(PACKAGE_DIR, "_src")
CHECKOUT_DIR = os.path.dirname(META_DIR)  # <checkout>/prerast_meta -> <checkout>

# What a build reads besides the Python package. csrc/ is walked rather than listed so that a new header cannot
# be forgotten here.
BUILD_FILES = ["setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"]
SOURCE_DIRS = {"csrc": (".h", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".cu"), "prerast_meta": (".py",)}
SOURCE_DIR = "csrc"
# Packaging and documents: they do not change the compiled plugin, so they stay out of its hash.
NOT_HASHED = {"pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"}
# Never copied from a package folder into a build tree: compiled output and the shipped copy itself.
PACKAGE_IGNORE = ("_src", "__pycache__", "*.so", "*.pyd", "_build_info.json", "*.egg-info")


# What each library compiles, by folder: a new op's files are found by their names, with no list to add them to.
# The binding (csrc/bindings) builds once per torch ABI, its CUDA part with PRERAST_CUDA_LIBRARY defined (it then
# registers the CUDA kernels); the kernel libraries (csrc/core) are torch-free: *_cpu.cpp make the CPU one, *.cu
# the CUDA one of each CUDA major.
LIBRARY_SOURCES = {
    "binding": ("csrc/bindings/*.cpp",),
    "kernels-cpu": ("csrc/core/*_cpu.cpp",),
    "kernels-cuda": ("csrc/core/*.cu",),
}
# The suffixes of files that are compiled on their own (headers are included, never compiled).
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cu")


def library_sources(root, library):
    """The sources that `library` (a key of LIBRARY_SOURCES) compiles, relative to root with '/', in a stable order."""
    found = []
    for pattern in LIBRARY_SOURCES[library]:
        folder, _, name = pattern.rpartition("/")
        here = os.path.join(root, *folder.split("/"))
        names = sorted(os.listdir(here)) if os.path.isdir(here) else []
        found += [f"{folder}/{n}" for n in names if fnmatch.fnmatchcase(n, name)]
    return found


def uncompiled_sources(root):
    """Files under csrc/ with a compiled suffix that no library compiles: a name that misses the rules above."""
    compiled = {rel for library in LIBRARY_SOURCES for rel in library_sources(root, library)}
    return [
        rel
        for rel in source_files(root)
        if rel.startswith(SOURCE_DIR + "/") and rel.endswith(COMPILED_SUFFIXES) and rel not in compiled
    ]


def is_source_root(root):
    return (
        bool(root) and os.path.isfile(os.path.join(root, "setup.py")) and os.path.isdir(os.path.join(root, SOURCE_DIR))
    )


def source_root():
    """The shipped sources of an installed prerast, else the checkout this package lives in, else None."""
    for root in (SHIPPED_DIR, CHECKOUT_DIR):
        if is_source_root(root):
            return root
    return None


def source_files(root):
    """Paths relative to root of every build input present there, sorted."""
    found = [f for f in BUILD_FILES if os.path.isfile(os.path.join(root, f))]
    for top, suffixes in SOURCE_DIRS.items():
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in files:
                if name.endswith(suffixes):
                    found.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(found)


def digest(root):
    """A short hash of the files that decide what the compiler produces (names and contents)."""
    h = hashlib.sha256()
    for rel in source_files(root):
        if rel in NOT_HASHED:
            continue
        h.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:16]


def copy_sources(root, dest):
    """Copy the build inputs under root into dest, keeping their relative paths."""
    for rel in source_files(root):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(root, rel), target)


def materialize(dest, root=None, package_dir=PACKAGE_DIR):
    """A complete source tree in dest (build inputs plus the Python package, without any compiled plugin) that
    `pip wheel` or `setup.py build_ext` can build from without touching the original. Returns dest."""
    root = root or source_root()
    if not is_source_root(root):
        raise FileNotFoundError(
            f"prerast's sources are not here: neither {SHIPPED_DIR} nor a checkout at {CHECKOUT_DIR} has "
            f"setup.py and {SOURCE_DIR}/. Install a prerast wheel or sdist (they carry the sources), or use a clone."
        )
    copy_sources(root, dest)
    shutil.copytree(
        package_dir, os.path.join(dest, "package", "prerast"), ignore=shutil.ignore_patterns(*PACKAGE_IGNORE)
    )
    return dest


def source_commit(root):
    """The git commit the sources at root come from: the checkout's HEAD, or for shipped sources the commit that
    the installed package's build recorded."""
    if root == SHIPPED_DIR:
        try:
            with open(os.path.join(PACKAGE_DIR, "_build_info.json")) as f:
                return json.load(f).get("git_commit")
        except (OSError, ValueError):
            return None
    return git_commit(root)


def commit_epoch(root, commit="HEAD"):
    """The commit's date in seconds since 1970, as text (SOURCE_DATE_EPOCH for a reproducible build of it), or None
    (no git, no checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "log", "-1", "--format=%ct", commit], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip().isdigit() else None


def git_commit(root):
    """HEAD of the git checkout at root, or None (no git, no checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None
