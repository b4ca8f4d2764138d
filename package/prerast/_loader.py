"""Finds the compiled plugin that ships with prerast, checks that it fits what is running, and loads it.

A plugin is one of two kinds (`abi` in its _build_info.json):
- stable: built on torch's stable C ABI, it serves every torch from its floor (2.10) on, whatever the patch
  release, vendor suffix or C++ ABI. Its CUDA kernels are in a library of their own, loaded only into a CUDA
  torch of the same CUDA major; in a CPU-only torch the CPU ops work and a CUDA tensor gets a clear error.
- classic: built against one torch release with ATen, it serves every patch release of that torch minor with
  the same CUDA version and C++ ABI. A CPU-only classic plugin loads into a CUDA torch too (CPU ops).

Loading goes through torch.ops.load_library on a prebuilt file: no compiler is started, nothing is written to
disk, and torch.utils.cpp_extension is never imported. Any mismatch becomes a BinaryMismatchError that says what
the binary was built for, what is running, and how to get a binary that fits. When the bundled plugin does not
fit, a fitting one from the build cache is loaded instead, the same way (see _source_build.py and _cache.py).

Before a library is handed to the dynamic loader, its size and SHA-256 are compared with those its build stamped
in _build_info.json, and its ELF header with the running interpreter's (_integrity.py): a copy cut short, a
flipped bit or a library for another machine is a BinaryMismatchError naming the file, never a crash in dlopen.
"""
import glob
import itertools
import json
import os
import sys

import torch

from ._version import __version__
from . import _integrity
from .errors import BinaryMismatchError

INFO_FILE = "_build_info.json"
DEFAULT_INDEX_URL = "https://prerast.github.io/whl"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# source: where the loaded plugin came from: "bundled" (the package's own), "cache" (a build found in the build
# cache) or "built" (built into the cache by this process).
# cuda: why the CUDA kernels were not loaded (None when they were).
_state = {"info": None, "path": None, "source": None, "error": None, "devices": set(), "cuda": None}


def index_url():
    return os.environ.get("PRERAST_INDEX_URL", DEFAULT_INDEX_URL).rstrip("/")


def base_version(v):
    return v.split("+")[0]


def running():
    """What the binary has to fit, as a dict of plain values."""
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


# The oldest torch the stable-ABI plugin serves (ci/build_env.STABLE_FLOOR), and the CUDA major of the stable
# wheel that carries no local version tag (the one on PyPI).
STABLE_FLOOR = (2, 10)
PYPI_CUDA_MAJOR = "13"


def release(torch_version):
    """'2.14.1+cu130' -> (2, 14, 1); '2.5.0a0+nv24.10' -> (2, 5, 0)."""
    parts = []
    for x in base_version(torch_version).split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, x))
        parts.append(int(digits or 0))
    return tuple(parts)


def minor(torch_version):
    return ".".join(str(x) for x in release(torch_version)[:2])


def cuda_major(cuda_version):
    return cuda_version.split(".")[0] if cuda_version else None


def platform_tag(torch_version, cuda_version):
    """The local version tag of the wheel that serves this torch: 'cu12' or '' (stable wheels: torch >= 2.10,
    by CUDA major; a CPU torch takes the PyPI wheel), else the classic 'pt24cu121' / 'pt29cpu'."""
    if release(torch_version)[:2] >= STABLE_FLOOR:
        major = cuda_major(cuda_version)
        return "" if major in (None, PYPI_CUDA_MAJOR) else f"cu{major}"
    major, minor_ = release(torch_version)[:2]
    return f"pt{major}{minor_}" + ("cpu" if not cuda_version else "cu" + cuda_version.replace(".", ""))


def fix_command(run=None):
    """The pip command that installs the prerast wheel for the running torch, from the index page of that torch
    release (every release a wheel serves has a page listing it)."""
    run = run or running()
    tag = platform_tag(run["torch_version"], run["cuda_version"])
    page = "torch-%s%s.html" % (base_version(run["torch_version"]),
                                "+cpu" if not run["cuda_version"] else "+cu" + run["cuda_version"].replace(".", ""))
    version = base_version(__version__) + (f"+{tag}" if tag else "")
    return f'pip install --force-reinstall --no-deps "prerast=={version}" -f {index_url()}/{page}'


def is_stable(info):
    return info.get("abi") == "stable"


def floor(info):
    """The oldest torch a stable-ABI binary serves, as 'major.minor'."""
    return info.get("torch_floor") or "%d.%d" % STABLE_FLOOR


def serves(info):
    """Which torch releases a binary serves, in words: 'torch >= 2.10 (stable ABI)' or 'torch 2.4.x'."""
    if is_stable(info):
        return f"torch >= {floor(info)} (stable ABI)"
    return f"torch {minor(info.get('torch_version', '0.0'))}.x"


def describe(info):
    if is_stable(info):
        cuda = f"CUDA {cuda_major(info['cuda_version'])}.x" if info.get("cuda_version") else "CPU only"
    else:
        cuda = "CUDA " + info["cuda_version"] if info.get("cuda_version") else "CPU only"
    archs = ", GPU archs " + " ".join(info["cuda_archs"]) if info.get("cuda_archs") else ""
    return (f"prerast {info.get('prerast_version')} for {serves(info)}, built with torch "
            f"{info.get('torch_version')} ({cuda}{archs})")


def describe_running(run):
    cuda = "CUDA " + run["cuda_version"] if run["cuda_version"] else "CPU only"
    return f"Python {run['python']}, torch {run['torch_version']} ({cuda})"


def problems(info, run=None):
    """Why a binary with build metadata `info` cannot run here; empty if it fits."""
    run = run or running()
    found = []
    if is_stable(info):
        oldest = floor(info)
        if release(run["torch_version"])[:2] < release(oldest)[:2]:
            found.append(f"torch {run['torch_version']} (running) is older than {oldest}, the oldest torch this "
                         "stable-ABI binary serves")
    else:
        if minor(info.get("torch_version", "0.0")) != minor(run["torch_version"]):
            found.append(f"torch {info.get('torch_version')} (built; serves torch {minor(info['torch_version'])}.x)"
                         f" != torch {run['torch_version']} (running)")
        if info.get("cuda_version") and run["cuda_version"] and info["cuda_version"] != run["cuda_version"]:
            found.append(f"CUDA {info['cuda_version']} (built) != CUDA {run['cuda_version']} (running torch)")
        if bool(info.get("cxx11_abi")) != run["cxx11_abi"]:
            found.append(f"C++11 ABI {int(bool(info.get('cxx11_abi')))} (built) != {int(run['cxx11_abi'])} "
                         "(running torch)")
    if base_version(info.get("prerast_version", "?")) != base_version(__version__):
        found.append(f"prerast {info.get('prerast_version')} (binary) != prerast {__version__} (Python package)")
    return found


def mismatch_message(info, reasons, run=None):
    run = run or running()
    lines = [
        "prerast's compiled plugin does not fit this environment.",
        f"  built for: {describe(info)}",
        f"  running:   {describe_running(run)}",
    ]
    lines += [f"  mismatch:  {r}" for r in reasons]
    lines.append(f"Install the wheel built for the running torch:\n    {fix_command(run)}")
    return "\n".join(lines)


def reinstall_fix(run=None):
    return f"Reinstall prerast:\n    {fix_command(run)}"


def damaged_message(path, found, fix):
    """The refusal of a library that is not the one its build stamped: which file, what was expected and found."""
    return (f"prerast will not load {path}: {found['what']}, so loading it could crash Python.\n"
            f"  expected: {found['expected']}\n"
            f"  found:    {found['found']}\n{fix}")


def read_info(directory):
    """Build metadata and plugin path in `directory`, or (None, reason). Never raises: a missing, unreadable or
    malformed _build_info.json is a reason that names the file."""
    path = os.path.join(directory, INFO_FILE)
    if not os.path.exists(path):
        libs = sorted(glob.glob(os.path.join(directory, "_C*.so")))
        if libs:
            return None, (f"{path} is missing: it records the size and SHA-256 of {libs[0]}, which is not loaded "
                          "without them (a copy of the package cut short?)")
        return None, f"no {INFO_FILE} in {directory}: this prerast has no compiled plugin (a source checkout?)"
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{path} cannot be read: expected the JSON build metadata, found {type(e).__name__}: {e}"
    libraries = info.get("libraries") if isinstance(info, dict) else None
    names = [info.get("library"), info.get("cuda_library")] if isinstance(libraries, dict) else []
    if not names or not isinstance(names[0], str) or not all(n is None or n in libraries for n in names):
        return None, (f"{path} is malformed: expected the build metadata with \"library\" and the size and SHA-256 "
                      f"of each library under \"libraries\", found "
                      + (f"the keys {sorted(info)}" if isinstance(info, dict) else f"a JSON {type(info).__name__}"))
    info["path"] = os.path.join(directory, names[0])
    info["cuda_path"] = os.path.join(directory, names[1]) if names[1] else None
    return info, None


def stamp_of(info, path):
    return info["libraries"].get(os.path.basename(path))


def integrity(info, paths=None):
    """[(path, problem)] for the libraries of `info` (or `paths`) that are not the files their build stamped."""
    found = []
    for lib in paths if paths is not None else (info["path"], info.get("cuda_path")):
        if lib:
            why = _integrity.problem(lib, stamp_of(info, lib))
            if why is not None:
                found.append((lib, why))
    return found


def why_fits(info, run=None):
    """In words: what kind of binary this is and why it serves the running torch."""
    run = run or running()
    if is_stable(info):
        return (f"stable-ABI binary (torch's stable C ABI): serves every torch from "
                f"{floor(info)} on; torch {run['torch_version']} is one")
    cuda = f" with CUDA {info['cuda_version']}" if info.get("cuda_version") else ""
    return (f"classic binary built with torch {info.get('torch_version')}: serves every torch "
            f"{minor(info.get('torch_version', '0.0'))}.x{cuda} (C++11 ABI {int(bool(info.get('cxx11_abi')))}); "
            f"torch {run['torch_version']} is one")


def cuda_skip_reason(info, run=None):
    """Why the binary's CUDA kernels are not for this torch (None when they are): the binary has none, torch is
    a CPU build, or (stable) the CUDA majors differ."""
    run = run or running()
    if not info.get("cuda_path"):
        return f"this prerast binary is CPU-only ({describe(info)})"
    if not run["cuda_version"]:
        return f"the running torch {run['torch_version']} is a CPU-only build"
    if cuda_major(info.get("cuda_version")) != cuda_major(run["cuda_version"]):
        return (f"its CUDA kernels are built for CUDA {cuda_major(info.get('cuda_version'))}.x but torch "
                f"{run['torch_version']} runs CUDA {run['cuda_version']}")
    return None


def _ways_out(why_not):
    """The lines that follow a refusal: why nothing was built, and the two ways to a binary that fits."""
    from . import _cache, _source_build

    if _source_build.opted_in():
        return f"\n{why_not}."
    return (f"\nNo plugin was built for this environment: {why_not}. The ways out:\n"
            "  - install the wheel built for the running torch (above); where none is published (a custom torch\n"
            "    build, a new GPU), build one where a compiler (and for a CUDA torch the CUDA toolkit) is installed:\n"
            "        python -m prerast build-wheel --out dist\n"
            "  - or let prerast build its plugin at first use (same needs). The build is cached in\n"
            f"    {_cache.cache_dir()} (set {_cache.ENV_DIR} to move it); that folder can be copied into an image\n"
            f"    without a compiler and used there with {_cache.ENV_DIR}:\n"
            f"        export {_source_build.ENV_OPT_IN}=1")


def _load_plugin(info, fix, verified=False):
    """Check, then load, the CPU library and, where they fit, the CUDA kernels. BinaryMismatchError when a library
    is not the file its build stamped (nothing is loaded then); OSError when one does not load."""
    skip = cuda_skip_reason(info)
    libs = [info["path"]] + ([info["cuda_path"]] if skip is None else [])
    if not verified:
        for path, why in integrity(info, libs)[:1]:
            raise BinaryMismatchError(damaged_message(path, why, fix))
    for lib in libs:
        if os.environ.get(PROBE_ENV):  # the doctor's child process: say which library a crash happened in
            print(f"{PROBE_TAG}{lib}", file=sys.stderr, flush=True)
        torch.ops.load_library(lib)
    _state["cuda"] = skip


# Set by `python -m prerast doctor` in the child process that tries the load for it (see _doctor.probe_load).
PROBE_ENV = "PRERAST_LOAD_PROBE"
PROBE_TAG = "prerast-load-probe: loading "


def _load_library(info, refusal, fix):
    try:
        _load_plugin(info, fix, verified=True)
    except OSError as e:
        raise BinaryMismatchError(mismatch_message(info, [f"the plugin failed to load: {e}"]) + refusal) from e


def load(directory=PACKAGE_DIR, build=True):
    """Check and load the plugin in `directory`; returns its build metadata or raises BinaryMismatchError.

    When it does not fit, a fitting build from the build cache is loaded instead, or (with
    PRERAST_BUILD_ON_MISMATCH=1 and `build`) made there first. Every library is checked against the size and
    SHA-256 its build stamped before it is loaded."""
    if _state["info"] is not None:
        return _state["info"]
    info, why = read_info(directory)
    cause = damaged = None
    if info is None:
        message = (f"prerast cannot run: {why}.\n  running: {describe_running(running())}\n"
                   f"Install a prebuilt wheel:\n    {fix_command()}")
        # A plugin is there but its metadata is not (or is garbled): a damaged package, not a source checkout.
        damaged = bool(glob.glob(os.path.join(directory, "_C*.so"))) or os.path.exists(os.path.join(directory,
                                                                                                     INFO_FILE))
    else:
        reasons = problems(info)
        message = mismatch_message(info, reasons)
        if not reasons:
            try:
                _load_plugin(info, reinstall_fix())
                return _loaded(info, "bundled")
            except OSError as e:
                cause = e
                message = mismatch_message(info, [f"the plugin failed to load: {e}"])
            except BinaryMismatchError as e:
                damaged = True
                message = str(e)
    from . import _source_build

    try:
        found, how = _source_build.find_or_build(allow_build=build)
    except _source_build.BuildFailed as e:
        raise BinaryMismatchError(
            f"{message}\n{_source_build.ENV_OPT_IN}=1 is set, but building a plugin that fits failed: {e}") from e
    except _source_build.Refused as e:
        raise BinaryMismatchError(f"{message}\n{e}") from cause
    if found is None:
        # A damaged package is repaired by reinstalling it, which its message says; the ways to a plugin for
        # another torch are no help there.
        raise BinaryMismatchError(message if damaged else message + _ways_out(how)) from cause
    folder = os.path.dirname(found["path"])
    _load_library(found, f"\n(this build was found in the build cache: {folder})", _source_build.entry_fix(folder))
    return _loaded(found, how)


def _loaded(info, how):
    _state.update(info=info, path=info["path"], source=how, error=None)
    from . import _ops  # the ops' fakes and autograd, now that their schemas exist

    _ops.register()
    return info


def load_or_remember(build=True):
    """Load at import; remember the failure so that a command-line diagnosis can still run."""
    try:
        return load(build=build)
    except BinaryMismatchError as e:
        _state["error"] = e
        raise


def require():
    """The loaded metadata, or the load failure raised again (for ops called after a tolerated failure)."""
    if _state["info"] is None:
        raise _state["error"] or BinaryMismatchError("prerast's plugin is not loaded")
    return _state["info"]


def arch_serves(arch, capability):
    """Does one entry of the arch list ('8.0', '9.0a', '12.0+PTX') run on a GPU of this compute capability?"""
    major, minor = capability
    name = arch.replace("+PTX", "")
    exact = name.endswith("a")
    a_major, a_minor = (int(x) for x in name.rstrip("a").split("."))
    if exact:
        return (a_major, a_minor) == (major, minor)
    if a_major == major and a_minor <= minor:  # SASS runs on later minor revisions of its major
        return True
    return arch.endswith("+PTX") and (a_major, a_minor) <= (major, minor)  # PTX is JIT-compiled forward


def check_device(device):
    """Raise BinaryMismatchError at first use of a GPU that the plugin has no code for."""
    info = require()
    if torch.compiler.is_compiling():  # queries of the device do not belong in a graph; eager calls check
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _state["devices"]:
        return
    if _state["cuda"] is not None:
        raise BinaryMismatchError(
            mismatch_message(info, [f"a CUDA tensor was passed, but prerast's CUDA kernels are not loaded: "
                                    f"{_state['cuda']}"]))
    cap = torch.cuda.get_device_capability(index)
    if not any(arch_serves(a, cap) for a in info.get("cuda_archs", [])):
        name = torch.cuda.get_device_name(index)
        raise BinaryMismatchError(
            f"prerast's plugin has no code for GPU {index} ({name}, compute capability {cap[0]}.{cap[1]}).\n"
            f"  built for: {describe(info)}\n"
            f"Build a wheel that includes this GPU, in an environment with the CUDA toolkit:\n"
            f"    python -m prerast build-wheel --arch {cap[0]}.{cap[1]}")
    _state["devices"].add(index)
