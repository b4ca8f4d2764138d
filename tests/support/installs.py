"""Copies of the installed prerast with edited metadata, and subprocesses that import them: the states a user's
install can be in (working, mismatched, missing its plugin), without building anything."""

import json
import os
import shutil
import subprocess
import sys

import torch

import prerast
from prerast import _cache, _loader
from prerast_meta import build_info, integrity as _integrity, sources as _sources

# Variables of the test environment that would change what a subprocess loads or builds.
PRERAST_VARS = ("PRERAST_BUILD_ON_MISMATCH", "PRERAST_CACHE_DIR", "PRERAST_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST")


def overridden(info, overrides):
    """info with the fields of overrides replaced. A binding's field replaced makes it a package of that one
    binding: the one wheel's other bindings would serve the running torch instead."""
    info.update(overrides)
    if any(k in build_info.BINDING_KEYS for k in overrides) and "bindings" not in overrides:
        info["bindings"] = []
    return info


def copy_package(dest, **overrides):
    """A copy of the installed prerast (both its packages) under dest/prerast and dest/prerast_meta, carrying its
    sources as an installed wheel does, with _build_info.json fields replaced by overrides. Returns dest (for
    PYTHONPATH)."""
    src = os.path.dirname(prerast.__file__)
    pkg = os.path.join(dest, "prerast")
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(_sources.META_DIR, os.path.join(dest, "prerast_meta"), ignore=shutil.ignore_patterns("__pycache__"))
    if not os.path.isdir(os.path.join(pkg, "_src")):  # an in-place build of a checkout
        _sources.copy_sources(_sources.source_root(), os.path.join(pkg, "_src"))
    info_path = os.path.join(pkg, "_build_info.json")
    with open(info_path) as f:
        info = json.load(f)
    overridden(info, overrides)
    with open(info_path, "w") as f:
        json.dump(info, f)
    return str(dest)


# Imports prerast (under the umask TEST_UMASK, default 022) and prints how that went as JSON: the exception's type
# and message, or where the plugin came from; and which libraries under argv[1] the process has mapped.
IMPORT_REPORT = """
import json, os, sys
os.umask(int(os.environ.get("TEST_UMASK", "022"), 8))
result = {"error": None}
try:
    import prerast
    from prerast import _loader
    result.update(source=_loader.status()["source"], path=_loader.status()["path"])
except Exception as e:
    result["error"], result["message"] = type(e).__name__, str(e)
with open("/proc/self/maps") as f:
    result["mapped"] = sorted({line.split()[-1] for line in f if sys.argv[1] in line and ".so" in line})
print(json.dumps(result))
"""


def remove_plugin(path):
    pkg = os.path.join(path, "prerast")
    for name in os.listdir(pkg):
        if name.startswith("_C") and name.endswith(".so") or name == "_build_info.json":
            os.remove(os.path.join(pkg, name))


def env_for(path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in PRERAST_VARS}
    env.update(PYTHONPATH=str(path), PYTHONDONTWRITEBYTECODE="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(args, path, cwd=None, **extra):
    """sys.executable with args, importing prerast from path."""
    return subprocess.run(
        [sys.executable] + list(args),
        capture_output=True,
        text=True,
        env=env_for(path, **extra),
        cwd=str(cwd or path),
        stdin=subprocess.DEVNULL,
    )


def doctor(path, *flags, **extra):
    out = run_python(["-m", "prerast", "doctor"] + list(flags), path, **extra)
    report = json.loads(out.stdout) if "--json" in flags and out.stdout.strip() else None
    return out, report


def prerast_base():
    return prerast.__version__.split("+")[0]


def mismatched_copy_with_cache(tmp_path):
    """A copy of the installed prerast whose own plugin is refused (built for another torch), and a build cache
    with an entry for this torch holding the real plugin (what a first-use build would have produced).
    Returns (PYTHONPATH, cache folder, entry folder)."""
    path = copy_package(tmp_path / "site", abi="classic", torch_version="2.4.1+cu124")
    info = _loader.require()
    src_hash = _sources.digest(os.path.join(path, "prerast", "_src"))
    key = _cache.make_key(prerast_base(), torch.__version__, torch.version.cuda, info.get("cuda_archs") or [], src_hash)
    entry = tmp_path / "cache" / key
    entry.mkdir(parents=True)
    for name in info["libraries"]:  # the binding's parts and the kernel libraries
        shutil.copy(os.path.join(os.path.dirname(info["path"]), name), entry)
    shutil.copy(os.path.join(os.path.dirname(info["path"]), "_build_info.json"), entry)
    return path, str(tmp_path / "cache"), str(entry)


def libraries(folder):
    """The libraries that _build_info.json in folder stamps, as paths."""
    with open(os.path.join(folder, "_build_info.json")) as f:
        return [os.path.join(folder, name) for name in sorted(json.load(f)["libraries"])]


def restamp(folder):
    """Record the libraries of folder as they are now in its _build_info.json (as the build would have)."""
    info_path = os.path.join(folder, "_build_info.json")
    with open(info_path) as f:
        info = json.load(f)
    info["libraries"] = _integrity.stamp(folder, sorted(info["libraries"]))
    with open(info_path, "w") as f:
        json.dump(info, f)
