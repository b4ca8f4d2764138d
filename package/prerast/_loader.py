"""Finds the compiled plugin that ships with prerast, checks that it fits what is running, and loads it.

A plugin is a binding (the op library for the running torch: a CPU part and a CUDA part) and the torch-free
kernel libraries it calls through their C interface (csrc/core/kernel_table.h): one for the CPU and one per CUDA
major. A wheel may carry several bindings and kernel libraries (python -m ci merge); the loader picks
(prerast_meta.build_info.choose):
- the binding for the running torch: the stable one (torch's stable C ABI) for every torch from its floor (2.10)
  on, whatever the patch release, vendor suffix or C++ ABI; else the classic one (ATen) built for its minor
  release and C++ ABI;
- the CPU kernel library, and, when torch is a CUDA build, the kernel library of torch's CUDA major with the
  binding's CUDA part. Without one, the CPU ops work and a CUDA tensor gets a clear error.

Loading goes through ctypes (kernel libraries) and torch.ops.load_library (bindings) on prebuilt files: no compiler
is started, nothing is written to disk, and torch.utils.cpp_extension is never imported. Each binding library is
then handed its kernel library's table (prerast_attach_kernels), which both sides check for the interface version.
Any mismatch becomes a BinaryMismatchError that says what the binary was built for, what is running, and how to get
a binary that fits. When the bundled plugin does not fit, a fitting one from the build cache is loaded instead, the
same way (see _source_build.py and _cache.py).

Before a library is handed to the dynamic loader, its size and SHA-256 are compared with those its build stamped
in _build_info.json, and its ELF header with the running interpreter's (prerast_meta.integrity): a copy cut short, a
flipped bit or a library for another machine is a BinaryMismatchError naming the file, never a crash in dlopen.

The rules (which binary serves which torch, the messages, the fix-it command) are pure functions in
prerast_meta.compat; this module adds what is running, does the loading, and alone owns what it loaded: others
ask status(), loaded_info() or require().
"""

import ctypes
import os
import sys
import threading

import torch

from prerast_meta import build_info, compat, platforms

from .errors import BinaryMismatchError

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# source: where the loaded plugin came from: "bundled" (the package's own), "cache" (a build found in the build
# cache) or "built" (built into the cache by this process).
# cuda: why the CUDA kernels were not loaded (None when they were).
_state = {
    "info": None,
    "path": None,
    "source": None,
    "error": None,
    "devices": set(),
    "cuda": None,
    "kernel_libraries": [],
}
# Held while a load runs: the import loads under the import lock, but `python -m prerast demo` and the doctor load
# again later, and on a free-threaded Python nothing else would keep two threads from loading (and registering the
# ops) twice. Reentrant, so that nothing a load calls can deadlock on it.
_load_lock = threading.RLock()


def status():
    """A copy of what the loader did: info (the loaded plugin's build metadata, or None), path, source, error
    (the load failure, or None), cuda (why the CUDA kernels were not loaded; None when they were)."""
    return {k: v for k, v in _state.items() if k not in ("devices", "kernel_libraries")}


def loaded_info():
    """The loaded plugin's build metadata, or None while none is loaded."""
    return _state["info"]


def running():
    """What the binary has to fit, as a dict of plain values."""
    return compat.running(torch)


# The compatibility rules of prerast_meta.compat, applied to the running torch.
def fix_command(run=None):
    return compat.fix_command(run or running())


def reinstall_fix(run=None):
    return compat.reinstall_fix(run or running())


def problems(info, run=None):
    return compat.problems(info, run or running())


def mismatch_message(info, reasons, run=None):
    return compat.mismatch_message(info, reasons, run or running())


def why_fits(info, run=None):
    return compat.why_fits(info, run or running())


def cuda_skip_reason(info, run=None):
    return compat.cuda_skip_reason(info, run or running())


def _ways_out(why_not):
    """The lines that follow a refusal: why nothing was built, and the two ways to a binary that fits."""
    from . import _cache, _source_build

    if _source_build.opted_in():
        return f"\n{why_not}."
    return (
        f"\nNo plugin was built for this environment: {why_not}. The ways out:\n"
        "  - install the wheel built for the running torch (above); where none is published (a custom torch\n"
        "    build, a new GPU), build one where a compiler (and for a CUDA torch the CUDA toolkit) is installed:\n"
        "        python -m prerast build-wheel --out dist\n"
        "  - or let prerast build its plugin at first use (same needs). The build is cached in\n"
        f"    {_cache.cache_dir()} (set {_cache.ENV_DIR} to move it); that folder can be copied into an image\n"
        f"    without a compiler and used there with {_cache.ENV_DIR}:\n"
        + "".join(f"        {line}\n" for line in platforms.set_env_lines(_source_build.ENV_OPT_IN)).rstrip("\n")
    )


def _announce(lib):
    if os.environ.get(PROBE_ENV):  # the doctor's child process: say which library a crash happened in
        print(f"{PROBE_TAG}{lib}", file=sys.stderr, flush=True)


def _kernel_table(path):
    """Load the kernel library at path (ctypes) and return its table's address, checking its interface version.
    OSError when it does not load; BinaryMismatchError for a table of another interface."""
    _announce(path)
    lib = ctypes.CDLL(path)
    _state["kernel_libraries"].append(lib)  # kept: the binding calls into it for the life of the process
    entry = lib.prerast_kernel_table
    entry.restype = ctypes.c_void_p
    table = entry()
    version = ctypes.cast(table, ctypes.POINTER(ctypes.c_uint32))[0] if table else None
    if version != build_info.KERNEL_INTERFACE:
        raise BinaryMismatchError(
            f"prerast will not use {path}: its kernel interface is version {version}, this prerast's is "
            f"{build_info.KERNEL_INTERFACE} (files of two prerast builds mixed?).\n{reinstall_fix()}"
        )
    return table


def _attach(binding, table):
    """Hand the kernel table to the binding library at `binding` (loaded already): BinaryMismatchError with the
    binding's reason when it refuses it."""
    attach = ctypes.CDLL(binding).prerast_attach_kernels
    attach.restype, attach.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    why = attach(table)
    if why is not None:
        raise BinaryMismatchError(f"prerast cannot use {binding}: {why.decode()}.\n{reinstall_fix()}")


def _load_plugin(info, fix, verified=False):
    """Check, then load, the binding and the CPU kernels and, where they fit, the CUDA part with the CUDA kernels
    of torch's major. BinaryMismatchError when a library is not the file its build stamped (nothing is loaded
    then); OSError when the binding or the CPU kernels do not load. CUDA kernels that do not load leave the CPU
    ops working; status()["cuda"] says why."""
    skip = cuda_skip_reason(info)
    libs = [info["path"], info["kernel_path"]] + ([info["cuda_kernel_path"], info["cuda_path"]] if skip is None else [])
    if not verified:
        for path, why in build_info.integrity_problems(info, libs)[:1]:
            raise BinaryMismatchError(compat.damaged_message(path, why, fix))
    table = _kernel_table(info["kernel_path"])
    _announce(info["path"])
    torch.ops.load_library(info["path"])
    _attach(info["path"], table)
    if skip is None:
        try:
            cuda_table = _kernel_table(info["cuda_kernel_path"])
        except OSError as e:
            skip = f"its CUDA kernel library {info['cuda_kernel_path']} did not load: {e}"
        else:
            _announce(info["cuda_path"])
            torch.ops.load_library(info["cuda_path"])
            _attach(info["cuda_path"], cuda_table)
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
    with _load_lock:
        return _state["info"] if _state["info"] is not None else _load(directory, build)


def _load(directory, build):
    info, why = build_info.read(directory)
    cause = damaged = None
    if info is None:
        message = (
            f"prerast cannot run: {why}.\n  running: {compat.describe_running(running())}\n"
            f"Install a prebuilt wheel:\n    {fix_command()}"
        )
        # A plugin is there but its metadata is not (or is garbled): a damaged package, not a source checkout.
        damaged = bool(build_info.libraries_in(directory)) or os.path.exists(
            os.path.join(directory, build_info.INFO_FILE)
        )
    else:
        info, reasons = build_info.choose(info, running())
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
            f"{message}\n{_source_build.ENV_OPT_IN}=1 is set, but building a plugin that fits failed: {e}"
        ) from e
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
            mismatch_message(
                info, [f"a CUDA tensor was passed, but prerast's CUDA kernels are not loaded: {_state['cuda']}"]
            )
        )
    cap = torch.cuda.get_device_capability(index)
    if not any(compat.arch_serves(a, cap) for a in info.get("cuda_archs", [])):
        name = torch.cuda.get_device_name(index)
        raise BinaryMismatchError(
            f"prerast's plugin has no code for GPU {index} ({name}, compute capability {cap[0]}.{cap[1]}).\n"
            f"  built for: {compat.describe(info)}\n"
            f"Build a wheel that includes this GPU, in an environment with the CUDA toolkit:\n"
            f"    python -m prerast build-wheel --arch {cap[0]}.{cap[1]}"
        )
    _state["devices"].add(index)
