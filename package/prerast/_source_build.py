"""The way out when no bundled plugin fits: a build of it in the build cache, found there or, when the user opted
in with PRERAST_BUILD_ON_MISMATCH=1, made there once.

Finding a cached build only reads files and loads none of torch's build tooling; building runs setup.py in a
subprocess on a fresh copy of the sources (shipped in the wheel as prerast/_src, or the checkout), in the
environment of the running torch.
"""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import torch

from prerast_meta import build_env, build_info, build_wheel as _route, compat, platforms, sources as _sources
from prerast_meta.version import __version__

from . import _cache

ENV_OPT_IN = "PRERAST_BUILD_ON_MISMATCH"
ARCH_VARS = _route.ARCH_VARS
LOG_TAIL_LINES = 25


def opted_in():
    return os.environ.get(ENV_OPT_IN, "").strip().lower() in ("1", "true", "yes", "on")


def cache_consulted():
    """The cache is read when the user opted in to building or named a cache folder (e.g. one copied from the
    image that built it); otherwise prerast reads nothing but its own package."""
    return opted_in() or bool(os.environ.get(_cache.ENV_DIR))


def source_hash():
    root = _sources.source_root()
    return _sources.digest(root) if root else None


def entry_fix(folder):
    """How to repair a damaged cache entry."""
    return (
        f"Delete this build cache entry: {platforms.remove_folder(folder)}\n"
        f"  then copy it again from the image that built it, or let `import prerast` rebuild it with "
        f"{ENV_OPT_IN}=1."
    )


def examine(folder, run=None, sources=None):
    """(info, None) for a cache entry that fits the running torch and these sources and may be loaded; (None,
    None) for one that is for something else; (None, why) for one that fits but is refused: another user could
    have written it, its build metadata is damaged, or a library is not the file the build stamped."""
    run = run or compat.running(torch)
    root = os.path.dirname(folder)
    bad = _cache.entry_untrusted(root, folder)
    if bad is not None:
        return None, f"prerast will not load the build cache entry {folder}: {bad[0]}.\nFix: {bad[1]}"
    info, why = build_info.read(folder)
    if info is None:
        return None, f"{why}\n{entry_fix(folder)}"
    info, reasons = build_info.choose(info, run)
    if reasons:
        return None, None
    files = [build_info.INFO_FILE] + [os.path.basename(p) for p in build_info.loaded_paths(info) if p]
    bad = _cache.entry_untrusted(root, folder, files)
    if bad is not None:
        return None, f"prerast will not load the build cache entry {folder}: {bad[0]}.\nFix: {bad[1]}"
    sources = sources if sources is not None else source_hash()
    if sources is not None and info.get("source_hash") != sources:
        return None, (
            f"prerast will not load the build cache entry {folder}: it was built from other sources.\n"
            f"  expected: sources {sources} (its folder name, and the sources of this prerast)\n"
            f"  found:    sources {info.get('source_hash')} (its {build_info.INFO_FILE})\n{entry_fix(folder)}"
        )
    damaged = build_info.integrity_problems(info)
    if damaged:
        return None, compat.damaged_message(damaged[0][0], damaged[0][1], entry_fix(folder))
    return info, None


def entry_info(folder, run=None):
    """Build metadata of a cache entry if it fits the running torch and may be loaded, else None."""
    return examine(folder, run)[0]


def examine_entries(run=None):
    """([(folder, info)] of cached builds for the running torch, CUDA and these sources that may be loaded, newest
    first; [refusal] of those that fit but are refused)."""
    run = run or compat.running(torch)
    prefix = _cache.key_prefix(compat.base_version(__version__), run["torch_version"], run["cuda_version"])
    root = _cache.cache_dir()
    sources = source_hash()
    usable, refused = [], []
    for folder in _cache.entries(root, prefix, sources):
        info, why = examine(folder, run, sources)
        if info is not None:
            usable.append((folder, info))
        elif why is not None:
            refused.append(why)
    if os.path.isdir(root) and not usable:
        bad = _cache.untrusted(root, folder_of_entries=True)
        if bad is not None:  # nothing in it is loaded, nor built into it
            refused = [f"prerast will not use the build cache {root}: {bad[0]}.\nFix: {bad[1]}"]
    return usable, refused


def fitting_entries(run=None):
    """Cached builds for the running torch, CUDA and these sources that may be loaded, newest first, as
    (folder, info)."""
    return examine_entries(run)[0]


class Refused(Exception):
    """Builds for this environment are in the cache, but none may be loaded (why: the message)."""


def compiler():
    """The C++ compiler torch's BuildExtension would run (CXX, default c++), looked up on PATH, or None."""
    default = "cl" if platforms.current().key == "win32" else "c++"  # what torch's BuildExtension runs there
    words = shlex.split(os.environ.get("CXX") or default) or [default]
    program = words[1] if len(words) > 1 and words[0] in ("ccache", "sccache") else words[0]
    return shutil.which(program), program


def toolchain_problems(with_cuda, cuda_home):
    """What a build here lacks, each with how to get it."""
    missing = []
    path, program = compiler()
    if not path:
        how = (
            "install Visual Studio's C++ build tools and run from their Developer Command Prompt"
            if platforms.current().key == "win32"
            else "install g++, or set CXX"
        )
        missing.append(f"a C++ compiler ({program} is not on PATH): {how}")
    if importlib.util.find_spec("setuptools") is None:
        missing.append("setuptools: pip install 'setuptools>=64' wheel")
    if with_cuda and not cuda_home:
        missing.append(
            f"the CUDA toolkit (nvcc) for CUDA {torch.version.cuda}, which the running torch uses: "
            "install it, or set CUDA_HOME to it"
        )
    return missing


VISIBLE_CAPABILITIES = (
    "import torch; print(' '.join('%d.%d' % torch.cuda.get_device_capability(i) "
    "for i in range(torch.cuda.device_count())) if torch.cuda.is_available() else '')"
)


def default_archs(build_env, cuda_home):
    """PRERAST_CUDA_ARCH_LIST / TORCH_CUDA_ARCH_LIST, else the visible GPUs (plus PTX of the newest, so that
    newer GPUs can JIT it), else the build's default list. Unlike a wheel build, a first-use build runs where
    the plugin will run, so probing the GPUs is right here; it happens in a subprocess so that the importing
    process does not initialise CUDA (which would break fork-based workers)."""
    if torch.version.cuda is None:
        return []
    if not any(os.environ.get(v) for v in ARCH_VARS):
        out = subprocess.run(
            [sys.executable, "-c", VISIBLE_CAPABILITIES], capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        caps = sorted(set(out.stdout.split()), key=lambda c: tuple(int(x) for x in c.split(".")))
        if out.returncode == 0 and caps:
            return caps[:-1] + [caps[-1] + "+PTX"]
    return build_env.arch_list(torch, cuda_home)


class BuildFailed(Exception):
    pass


def _log(msg):
    print(f"prerast: {msg}", file=sys.stderr, flush=True)


def build_into(folder, root, archs, cuda_home, failed_log, log=_log):
    """Compile the plugin from a copy of root into folder (plugin, _build_info.json, build.log). A failed
    build's log is kept as failed_log."""
    # The build tree lives in the (temporary) entry folder, so that a killed build leaves nothing elsewhere.
    work = tempfile.mkdtemp(prefix=".work-", dir=folder)
    log_path = os.path.join(folder, "build.log")
    try:
        tree = _sources.materialize(os.path.join(work, "src"), root)
        out = os.path.join(work, "lib")
        # The arch list fixed to what the cache key says, the commit of the sources, and (when ccache is in use)
        # builds from different temporary folders sharing its entries: the one build route's environment.
        spec = _route.BuildSpec(
            source=tree,
            out_dir=out,
            kind="library",
            cuda_home=cuda_home,
            archs=archs,
            commit=_sources.source_commit(root),
            log_path=log_path,
        )
        log(
            f"building the plugin for torch {torch.__version__}"
            + (f", GPU archs {' '.join(archs)}" if archs else "")
            + f" into {os.path.dirname(folder)} (log: {log_path})"
        )
        # Minutes of compiling: say what is compiled, and that it still runs while the compiler is quiet.
        try:
            took = _route.run_build(spec, log=log)
        except _route.BuildFailed as e:
            shutil.copyfile(log_path, failed_log)
            with open(log_path) as f:
                tail = "".join(f.readlines()[-LOG_TAIL_LINES:])
            raise BuildFailed(
                f"the build failed (exit code {e.returncode}); full log in {failed_log}, its end:\n{tail}"
            ) from e
        built = os.path.join(out, "prerast")
        for name in os.listdir(built):
            shutil.move(os.path.join(built, name), os.path.join(folder, name))
        log(f"built in {took:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def find_or_build(allow_build=True, log=_log):
    """(info, how) of a build that fits, how being 'cache' or 'built'; (None, why not) when there is none and
    none may be built. Raises BuildFailed when a build was attempted and failed."""
    if not cache_consulted():
        return None, f"{ENV_OPT_IN} is not set"
    found, refused = examine_entries()
    if found:
        return found[0][1], "cache"
    root_bad = os.path.isdir(_cache.cache_dir()) and _cache.untrusted(_cache.cache_dir(), folder_of_entries=True)
    if refused and (not opted_in() or not allow_build or root_bad):
        raise Refused("\n".join(refused))
    if not opted_in():
        return None, f"{_cache.cache_dir()} has no build for this environment and {ENV_OPT_IN} is not set"
    if not allow_build:
        return None, f"{ENV_OPT_IN}=1 is set: `import prerast` builds one into {_cache.cache_dir()}"
    root = _sources.source_root()
    if root is None:
        raise BuildFailed(
            "this prerast carries no sources to build from (prerast/_src is missing); reinstall "
            "it from a wheel or sdist, or use a clone"
        )
    with_cuda = torch.version.cuda is not None
    cuda_home = build_env.find_cuda_home() if with_cuda else None
    missing = toolchain_problems(with_cuda, cuda_home)
    if missing:
        raise BuildFailed("building here needs " + "; ".join(missing))
    archs = default_archs(build_env, cuda_home)
    key = _cache.make_key(
        compat.base_version(__version__), torch.__version__, torch.version.cuda, archs, _sources.digest(root)
    )
    root_dir = _cache.cache_dir()
    failed_log = os.path.join(root_dir, key + ".failed.log")

    def waiting(pid):
        log(f"waiting for the build in process {pid or '?'} (lock {os.path.join(root_dir, key)}.lock)")

    try:
        folder, built = _cache.build_once(
            root_dir,
            key,
            lambda d: build_into(d, root, archs, cuda_home, failed_log, log),
            lambda folder: entry_info(folder) is not None,
            on_wait=waiting,
            explain=lambda folder: examine(folder)[1],
        )
    except (OSError, RuntimeError) as e:  # e.g. a full disk, or a folder of another user's in the way
        raise BuildFailed(f"building into {root_dir} failed: {e}") from e
    info, why = examine(folder)
    if info is None:
        raise BuildFailed(why or f"the build in {folder} does not fit this torch")
    return info, "built" if built else "cache"
