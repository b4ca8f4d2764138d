"""_build_info.json: what a compiled plugin was built for, written by its build beside the libraries and read by
the loader, the doctor, the repair and the index before anything is loaded.

Keys (every build writes all of them):
    abi                "stable" or "classic" (prerast_meta.compat)
    torch_floor        the oldest torch a stable binary serves ("2.10"); None for classic
    prerast_version    the full version, with its local tag ("0.1.0+cu12")
    torch_version      the torch it was compiled with; cuda_version: that torch's CUDA (None: CPU-only build)
    nvcc_version, cuda_archs   the toolkit and the GPU archs compiled ([] without CUDA)
    cxx11_abi          the C++ ABI of that torch (what a classic binary must match)
    python_tag         "cp310-abi3"; python_built_with: the Python that ran the build
    git_commit, built_at, source_hash  where the sources came from (prerast_meta.sources.digest)
    library, cuda_library      file names of the CPU library and the CUDA one (None without CUDA)
    libraries          {file name: {"size", "sha256"}} of each (prerast_meta.integrity)
Standard library only.
"""

import datetime
import glob
import json
import os
import sys

from . import compat, integrity, platforms, sources

INFO_FILE = "_build_info.json"
KEYS = (
    "abi",
    "torch_floor",
    "prerast_version",
    "torch_version",
    "cuda_version",
    "nvcc_version",
    "cuda_archs",
    "cxx11_abi",
    "python_tag",
    "python_built_with",
    "git_commit",
    "built_at",
    "source_hash",
    "library",
    "cuda_library",
    "libraries",
)
# The plugin's libraries in a package folder: _C.abi3.so and _C_cuda.abi3.so (Linux, macOS), _C.pyd and
# _C_cuda.pyd (Windows); platforms.PLATFORMS says which.
LIBRARY_GLOB = platforms.library_glob()


def make(torch, version, with_cuda, nvcc_version, archs, root, abi="classic"):
    """The metadata of a build with `torch` (the module), before its libraries are stamped (see `write`)."""
    return {
        "abi": abi,
        "torch_floor": compat.floor_text() if abi == "stable" else None,
        "prerast_version": version,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if with_cuda else None,
        "nvcc_version": nvcc_version if with_cuda else None,
        "cuda_archs": archs,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python_tag": f"{compat.PYTHON_TAG}-abi3",
        "python_built_with": "%d.%d" % sys.version_info[:2],
        "git_commit": sources.git_commit(root),
        "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write(directory, info, library, cuda_library=None):
    """Stamp the libraries in `directory` into `info` and write it there as INFO_FILE."""
    info = dict(info, library=library, cuda_library=cuda_library)
    info["libraries"] = integrity.stamp(directory, [n for n in (library, cuda_library) if n])
    with open(os.path.join(directory, INFO_FILE), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    return info


def libraries_in(directory):
    """The plugin's libraries in directory, under the file names of any OS: one of another OS is found too, so
    that it is named rather than overlooked."""
    return sorted({p for pattern in platforms.all_library_globs() for p in glob.glob(os.path.join(directory, pattern))})


def foreign_library(path):
    """Why the library at path is not one this OS loads, judged by its header (or else its name); None when
    it may be."""
    try:
        with open(path, "rb") as f:
            why = integrity.foreign(f.read(integrity.HEAD))
    except OSError:
        why = None
    return why or misnamed(os.path.basename(path))


def misnamed(name):
    """Why a library file name is not one this OS's plugin has (None when it is): _C.pyd on Linux."""
    here = platforms.current()
    others = [p.name for p in platforms.platform_of_library_name(name)]
    if name.endswith(here.library_ext) or not others:  # ours, or a name no OS's build gives (left to the header)
        return None
    return (
        f"{name} is the file name of a {' or '.join(others)} library, but this Python runs on "
        f"{platforms.describe_running()}, whose plugin is {platforms.library_name()}"
    )


def read(directory):
    """Build metadata and plugin path in `directory`, or (None, reason). Never raises: a missing, unreadable or
    malformed INFO_FILE is a reason that names the file."""
    path = os.path.join(directory, INFO_FILE)
    if not os.path.exists(path):
        libs = libraries_in(directory)
        if libs:
            why = foreign_library(libs[0])
            if why is not None:  # e.g. a wheel of another OS installed by force, whose names differ from ours
                return None, (
                    f"{libs[0]} is not a library for this machine: {why} (a wheel for another platform "
                    f"installed by force, or a copied folder?)"
                )
            return None, (
                f"{path} is missing: it records the size and SHA-256 of {libs[0]}, which is not loaded "
                "without them (a copy of the package cut short?)"
            )
        return None, f"no {INFO_FILE} in {directory}: this prerast has no compiled plugin (a source checkout?)"
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{path} cannot be read: expected the JSON build metadata, found {type(e).__name__}: {e}"
    libraries = info.get("libraries") if isinstance(info, dict) else None
    names = [info.get("library"), info.get("cuda_library")] if isinstance(libraries, dict) else []
    if not names or not isinstance(names[0], str) or not all(n is None or n in libraries for n in names):
        return None, (
            f'{path} is malformed: expected the build metadata with "library" and the size and SHA-256 '
            f'of each library under "libraries", found '
            + (f"the keys {sorted(info)}" if isinstance(info, dict) else f"a JSON {type(info).__name__}")
        )
    wrong = [misnamed(n) for n in names if n and misnamed(n)]
    if wrong:  # a build for another OS: its libraries cannot be loaded here, whatever their content
        return None, (
            f"{path} describes a build for another platform: {wrong[0]} (a wheel for another platform "
            "installed by force, or a copied folder?)"
        )
    info["path"] = os.path.join(directory, names[0])
    info["cuda_path"] = os.path.join(directory, names[1]) if names[1] else None
    return info, None


def stamp_of(info, path):
    return info["libraries"].get(os.path.basename(path))


def integrity_problems(info, paths=None):
    """[(path, problem)] for the libraries of `info` (or `paths`) that are not the files their build stamped."""
    found = []
    for lib in paths if paths is not None else (info["path"], info.get("cuda_path")):
        if lib:
            why = integrity.problem(lib, stamp_of(info, lib))
            if why is not None:
                found.append((lib, why))
    return found
