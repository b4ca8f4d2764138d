"""_build_info.json: what a compiled plugin was built for, written by its build beside the libraries and read by
the loader, the doctor, the repair and the index before anything is loaded.

A plugin is a binding (the op library for one torch ABI: a CPU part and, for CUDA torch, a CUDA part) and the
torch-free kernel libraries it calls (one for the CPU, one per CUDA major). A build makes either or both; a
merged wheel (python -m ci merge) carries several bindings and kernel libraries, and the loader picks (choose).

Keys (every build writes all of them):
    abi                "stable" or "classic" (prerast_meta.compat); None for kernel libraries alone
    torch_floor        the oldest torch a stable binary serves ("2.10"); None for classic
    prerast_version    the full version, with its local tag ("0.1.0+cu12")
    torch_version      the torch it was compiled with; cuda_version: that torch's CUDA (None: no CUDA part)
    nvcc_version, cuda_archs   the toolkit and the GPU archs of the CUDA kernels ([] without CUDA)
    cxx11_abi          the C++ ABI of that torch (what a classic binary must match)
    python_tag         "py3-none"; python_built_with: the Python that ran the build
    git_commit, built_at, source_hash  where the sources came from (prerast_meta.sources.digest)
    library, cuda_library      file names of the binding's CPU part and CUDA part (None where absent)
    kernels            {"cpu" or "cu12"...: {"library", "cuda_version", "nvcc_version", "cuda_archs",
                       "interface"}}: the kernel libraries, by compute
    bindings           the other bindings of a merged wheel (abi, torch_floor, torch_version, cuda_version,
                       cxx11_abi, library, cuda_library each); [] for one build
    parts              what a merged wheel was made of (python -m ci merge): one record per part; [] for one build
    libraries          {file name: {"size", "sha256"}} of every library (prerast_meta.integrity)
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
    "kernels",
    "bindings",
    "parts",
    "libraries",
)
# The fields of one binding (the top level holds the first; "bindings" the others).
BINDING_KEYS = ("abi", "torch_floor", "torch_version", "cuda_version", "cxx11_abi", "library", "cuda_library")
# The version of kernel_table.h's interface that this package's loader expects (csrc/core/kernel_table.h's
# kKernelInterface; tests/core/test_kernel_table.py checks that they agree).
KERNEL_INTERFACE = 2
# The plugin's libraries in a package folder: _C.abi3.so and _C_cuda.abi3.so (Linux, macOS), _C.pyd and
# _C_cuda.pyd (Windows); platforms.PLATFORMS says which.
LIBRARY_GLOB = platforms.library_glob()


def make(torch, version, root, abi=None, cuda_version=None):
    """The metadata of a build with `torch` (the module; None for kernel libraries alone), before its libraries
    are stamped (see `write`). cuda_version: the CUDA of torch when the build has a CUDA part."""
    return {
        "abi": abi,
        "torch_floor": compat.floor_text() if abi == "stable" else None,
        "prerast_version": version,
        "torch_version": torch.__version__ if torch is not None else None,
        "cuda_version": cuda_version,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI) if torch is not None else None,
        "python_tag": compat.WHEEL_TAG,
        "python_built_with": "%d.%d" % sys.version_info[:2],
        "git_commit": sources.git_commit(root),
        "built_at": built_at(),
    }


def built_at(environ=None):
    """When the build ran: $SOURCE_DATE_EPOCH where set (a reproducible build: the commit's date, so that two builds
    of one commit write the same metadata), else now; UTC."""
    environ = os.environ if environ is None else environ
    epoch = environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = (
        datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
        if epoch.isdigit()
        else datetime.datetime.now(datetime.timezone.utc)
    )
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def kernel_entry(library, cuda_version, nvcc_version, archs):
    """One kernel library of "kernels": its file, its CUDA toolkit (None for the CPU one) and GPU archs."""
    return {
        "library": library,
        "cuda_version": cuda_version,
        "nvcc_version": nvcc_version,
        "cuda_archs": list(archs),
        "interface": KERNEL_INTERFACE,
    }


def write(directory, info, library, cuda_library=None, kernels=None):
    """Stamp the libraries in `directory` into `info` and write it there as INFO_FILE. The CUDA kernels' toolkit
    and archs are also the top level's nvcc_version and cuda_archs (what the doctor and check_device read)."""
    kernels = kernels or {}
    info = dict(info, library=library, cuda_library=cuda_library, kernels=kernels, bindings=[], parts=[])
    info.update(newest_cuda_fields(kernels))
    info["libraries"] = integrity.stamp(directory, library_names(info))
    with open(os.path.join(directory, INFO_FILE), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    return info


def cuda_kernel_keys(kernels):
    """The keys of the CUDA kernel libraries of a "kernels" table, oldest CUDA major first: ['cu12', 'cu13']."""
    return sorted((k for k in kernels if k != "cpu"), key=lambda k: int(k[2:]))


def newest_cuda_fields(kernels):
    """The top level's nvcc_version and cuda_archs: those of the newest CUDA kernel library of a "kernels" table
    (None and [] without one)."""
    keys = cuda_kernel_keys(kernels)
    newest = kernels[keys[-1]] if keys else {}
    return {"nvcc_version": newest.get("nvcc_version"), "cuda_archs": newest.get("cuda_archs", [])}


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
    why = malformed(info)
    if why:
        return None, f"{path} is malformed: {why}"
    names = library_names(info)
    wrong = [misnamed(n) for n in names if misnamed(n)]
    if wrong:  # a build for another OS: its libraries cannot be loaded here, whatever their content
        return None, (
            f"{path} describes a build for another platform: {wrong[0]} (a wheel for another platform "
            "installed by force, or a copied folder?)"
        )
    info.setdefault("kernels", {})
    if not info["library"] or "cpu" not in info["kernels"]:
        has = "no binding" if not info["library"] else "no CPU kernel library"
        return None, (
            f"{path} describes a part of a plugin ({has}), which does not run by itself: merge it with the other "
            "parts (python -m ci merge)"
        )
    info["dir"] = directory
    info["path"] = os.path.join(directory, info["library"])
    info["cuda_path"] = os.path.join(directory, info["cuda_library"]) if info["cuda_library"] else None
    info["kernel_path"] = os.path.join(directory, info["kernels"]["cpu"]["library"])
    info["cuda_kernel_path"] = None  # chosen for the running torch's CUDA (choose)
    return info, None


def bindings_of(info):
    """Every binding of the metadata: the top level's (when it has one), then those of "bindings"."""
    first = [{k: info.get(k) for k in BINDING_KEYS}] if info.get("library") else []
    return first + list(info.get("bindings") or [])


def library_names(info):
    """The file names of every library the metadata describes: bindings' parts and kernel libraries."""
    names = [n for b in bindings_of(info) for n in (b.get("library"), b.get("cuda_library")) if n]
    return names + [k.get("library") for k in (info.get("kernels") or {}).values()]


def malformed(info):
    """Why `info` is not build metadata this package reads (None when it is)."""
    if not isinstance(info, dict):
        return f"expected a JSON object, found a JSON {type(info).__name__}"
    libraries, kernels = info.get("libraries"), info.get("kernels") or {}
    if not isinstance(libraries, dict) or not isinstance(kernels, dict) or "library" not in info:
        return (
            'expected the build metadata with "library", the kernel libraries under "kernels" and the size and '
            f'SHA-256 of each library under "libraries", found the keys {sorted(info)}'
        )
    if not all(isinstance(k, dict) for k in kernels.values()) or not isinstance(info.get("bindings", []), list):
        return '"kernels" or "bindings" is not of the expected shape'
    missing = [n for n in library_names(info) if not isinstance(n, str) or n not in libraries]
    if missing:
        return f'the libraries {missing} have no size and SHA-256 under "libraries"'
    return None


def cuda_kernels_for(info, cuda_version):
    """The key ("cu12") of the CUDA kernel library for a torch of `cuda_version`: its major's, else (to name in a
    refusal) the newest there is; None without any."""
    keys = cuda_kernel_keys(info.get("kernels", {}))
    major = compat.cuda_major(cuda_version)
    if major and f"cu{major}" in keys:
        return f"cu{major}"
    return keys[-1] if keys else None


def compose(info, binding, run):
    """The metadata of one binding of `info` (read's) with the kernel libraries it would load in `run`: the
    fields the compatibility rules (prerast_meta.compat) and the loader read, as for a build of that binding
    alone. cuda_version, nvcc_version and cuda_archs are then those of the CUDA kernels it would load."""
    out = {k: v for k, v in info.items() if k != "bindings"}
    out.update({k: binding.get(k) for k in BINDING_KEYS})
    key = cuda_kernels_for(info, run["cuda_version"])
    kern = info["kernels"][key] if key else None
    out["cuda_kernels"] = key
    out["cuda_version"] = kern["cuda_version"] if kern else None
    out["nvcc_version"] = kern["nvcc_version"] if kern else None
    out["cuda_archs"] = list(kern["cuda_archs"]) if kern else []
    directory = info["dir"]
    out["path"] = os.path.join(directory, binding["library"])
    has_cuda = bool(binding.get("cuda_library") and kern)
    out["cuda_path"] = os.path.join(directory, binding["cuda_library"]) if has_cuda else None
    out["cuda_kernel_path"] = os.path.join(directory, kern["library"]) if has_cuda else None
    return out


def choose(info, run):
    """(metadata, reasons): the first binding of `info` that serves `run` composed with its kernel libraries
    and no reasons; or, when none serves, the first binding's and why each does not."""
    composed = [compose(info, b, run) for b in bindings_of(info)]
    reasons = []
    for c in composed:
        found = compat.problems(c, run)
        if not found:
            return c, []
        reasons.append((c, found))
    if len(composed) == 1:
        return composed[0], reasons[0][1]
    carried = "; ".join(compat.serves(c) for c in composed)
    return composed[0], [
        f"torch {run['torch_version']} (running) is served by none of the bindings this prerast carries ({carried})"
    ]


def stamp_of(info, path):
    return info["libraries"].get(os.path.basename(path))


def loaded_paths(info):
    """The libraries a composed `info` loads: the binding's CPU part and the CPU kernels, and where both exist
    the binding's CUDA part and the CUDA kernels."""
    paths = [info["path"], info.get("kernel_path")]
    return paths + [info.get("cuda_path"), info.get("cuda_kernel_path")]


def integrity_problems(info, paths=None):
    """[(path, problem)] for the libraries of `info` (or `paths`) that are not the files their build stamped."""
    found = []
    for lib in paths if paths is not None else loaded_paths(info):
        if lib:
            why = integrity.problem(lib, stamp_of(info, lib))
            if why is not None:
                found.append((lib, why))
    return found
