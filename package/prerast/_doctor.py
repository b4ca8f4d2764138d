"""`python -m prerast doctor`: what is installed, what is running, whether they fit, and the command that fixes
what does not. Reads only: it builds nothing, writes nothing, and never imports torch's build tooling.

Exit codes: 0 prerast can run here; 1 no plugin that fits could be loaded; 2 the plugin loaded but has no code
for a visible GPU.
"""
import json
import platform
import re
import shutil
import sys

import torch

from . import _cache, _loader, _source_build, _sources
from ._version import __version__

OK, CANNOT_RUN, GPU_NOT_SERVED = 0, 1, 2
# Local version suffixes of the torch builds that the published prerast wheels follow; anything else (e.g. a
# vendor container's 2.5.0a0+nv24.10) is a custom build that needs a wheel built for it.
PUBLISHED_TORCH_LOCAL = re.compile(r"cpu|cu\d+|rocm[\d.]+|xpu")


def published_torch(version):
    return "+" not in version or bool(PUBLISHED_TORCH_LOCAL.fullmatch(version.split("+", 1)[1]))


def gpus(info):
    """Visible GPUs with their compute capability and whether the loaded plugin has code for them."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return []
    archs = (info or {}).get("cuda_archs") or []
    no_kernels = info is not None and _loader._state["cuda"] is not None  # e.g. a CUDA 12 plugin in CUDA 13 torch
    found = []
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        found.append({
            "index": i,
            "name": torch.cuda.get_device_name(i),
            "capability": f"{cap[0]}.{cap[1]}",
            "served": None if info is None else (not no_kernels and any(_loader.arch_serves(a, cap) for a in archs)),
        })
    return found


def toolchain():
    """What a build here (build-wheel, or the opt-in first-use build) would find."""
    root = _sources.source_root()
    cuda_home = None
    if root and torch.version.cuda:
        try:
            cuda_home = _sources.load_build_env(root).find_cuda_home()
        except (OSError, ImportError, SyntaxError):
            cuda_home = None
    return {
        "sources": root,
        "source_hash": _sources.digest(root) if root else None,
        "compiler": _source_build.compiler()[0],
        "cuda_home": cuda_home,
        "ninja": shutil.which("ninja"),
        "missing": _source_build.toolchain_problems(torch.version.cuda is not None, cuda_home),
    }


def fixes(report):
    """Commands that make prerast run here, best first."""
    run = report["running"]
    found = []
    if not report["plugin"]["loaded"]:
        if published_torch(run["torch_version"]):
            found.append(_loader.fix_command(run))
        found.append("python -m prerast build-wheel --out dist && pip install dist/prerast-*.whl"
                     "   # where a compiler (and for CUDA torch the CUDA toolkit) is installed")
        found.append(f"export {_source_build.ENV_OPT_IN}=1   # build at first import, cached in "
                     f"{report['source_build']['cache_dir']}")
    unserved = [g["capability"] for g in report["gpus"] if g["served"] is False]
    kernels = report["plugin"].get("cuda_kernels") or ""
    if unserved and kernels.startswith("not loaded"):
        found.append(_loader.fix_command(run))  # a wheel whose CUDA kernels fit this torch
    elif unserved:
        found.append(f"python -m prerast build-wheel --arch {','.join(sorted(set(unserved)))} --out dist "
                     "&& pip install dist/prerast-*.whl")
    return found


def collect():
    state = _loader._state
    info = state["info"]
    bundled, why_none = _loader.read_info(_loader.PACKAGE_DIR)
    run = _loader.running()
    report = {
        "prerast": {"version": __version__, "package": _loader.PACKAGE_DIR},
        "plugin": {
            "loaded": info is not None,
            "source": state["source"],
            "path": state["path"],
            "build_info": {k: v for k, v in (info or {}).items() if k not in ("path", "cuda_path")} or None,
            "kind": info.get("abi", "classic") if info else None,
            "fits": _loader.why_fits(info, run) if info else None,
            "cuda_kernels": None if info is None else ("loaded" if state["cuda"] is None else
                                                       f"not loaded: {state['cuda']}"),
            "error": None if info is not None else str(state["error"] or "not loaded"),
        },
        "bundled": {
            "path": bundled["path"] if bundled else None,
            "problems": _loader.problems(bundled, run) if bundled else [why_none],
        },
        "running": dict(run, platform=f"{platform.system()} {platform.machine()}", python_executable=sys.executable),
        "gpus": gpus(info),
        "source_build": {
            "opted_in": _source_build.opted_in(),
            "cache_dir": _cache.cache_dir(),
            "cache_consulted": _source_build.cache_consulted(),
            "fitting_cache_entries": [folder for folder, _ in _source_build.fitting_entries(run)]
            if _source_build.cache_consulted() else [],
            **toolchain(),
        },
    }
    if info is None:
        code = CANNOT_RUN
    elif any(g["served"] is False for g in report["gpus"]):
        code = GPU_NOT_SERVED
    else:
        code = OK
    report["exit_code"] = code
    report["ok"] = code == OK
    report["fixes"] = fixes(report)
    return report


def _describe_build(b):
    cuda = f"CUDA {b['cuda_version']}, nvcc {b.get('nvcc_version')}, GPU archs {' '.join(b.get('cuda_archs') or [])}" \
        if b.get("cuda_version") else "CPU only"
    return (f"prerast {b.get('prerast_version')}, {b.get('abi', 'classic')} ABI, built with torch "
            f"{b.get('torch_version')} ({cuda}), "
            f"C++11 ABI {int(bool(b.get('cxx11_abi')))}, {b.get('python_tag')}, "
            f"commit {(b.get('git_commit') or '?')[:12]}, sources {b.get('source_hash') or '?'}, "
            f"built {b.get('built_at')}")


def format_text(r):
    run, plugin, sb = r["running"], r["plugin"], r["source_build"]
    where = {"bundled": "the package", "cache": "the build cache", "built": "the build cache (built just now)"}
    lines = [f"prerast {r['prerast']['version']} at {r['prerast']['package']}"]
    if plugin["loaded"]:
        lines += [f"plugin:   loaded from {where[plugin['source']]}: {plugin['path']}",
                  f"          {_describe_build(plugin['build_info'])}",
                  f"          {plugin['fits']}",
                  f"          CUDA kernels {plugin['cuda_kernels']}"]
        if plugin["source"] != "bundled":
            lines.append("          the package's own plugin does not fit: " + "; ".join(r["bundled"]["problems"]))
    else:
        lines.append("plugin:   none loaded")
        lines += ["          " + line for line in plugin["error"].splitlines()]
    lines.append(f"running:  Python {run['python']}, torch {run['torch_version']} "
                 f"({'CUDA ' + run['cuda_version'] if run['cuda_version'] else 'CPU build'}), "
                 f"C++11 ABI {int(run['cxx11_abi'])}, {run['platform']}")
    if not r["gpus"]:
        lines.append("GPUs:     none visible" + (" (torch is a CPU build)" if not run["cuda_version"] else ""))
    for g in r["gpus"]:
        served = {True: "the plugin has code for it", False: "NO CODE FOR IT in the plugin", None: "-"}[g["served"]]
        lines.append(f"GPU {g['index']}:    {g['name']}, compute capability {g['capability']}: {served}")
    lines.append(f"source build: {_source_build.ENV_OPT_IN} {'on' if sb['opted_in'] else 'off'}; cache "
                 f"{sb['cache_dir']} ({'read' if sb['cache_consulted'] else 'not read'}"
                 + (f", {len(sb['fitting_cache_entries'])} fitting build(s)" if sb["cache_consulted"] else "") + ")")
    lines.append(f"          sources {sb['sources'] or 'not available'}"
                 + (f" (hash {sb['source_hash']})" if sb["source_hash"] else "")
                 + f"; compiler {sb['compiler'] or 'none'}; CUDA toolkit {sb['cuda_home'] or 'none'}; "
                 f"ninja {sb['ninja'] or 'none'}")
    status = {OK: "OK: prerast can run here.", CANNOT_RUN: "prerast cannot run here.",
              GPU_NOT_SERVED: "prerast runs here, but its plugin has no code for a visible GPU."}[r["exit_code"]]
    lines.append(f"status:   {status}")
    for i, cmd in enumerate(r["fixes"]):
        lines.append(("fix:      " if i == 0 else "   or:    ") + cmd)
    return "\n".join(lines)


def main(as_json=False, out=None):
    out = out or sys.stdout
    report = collect()
    if as_json:
        json.dump(report, out, indent=2)
        out.write("\n")
    else:
        out.write(format_text(report) + "\n")
    return report["exit_code"]
