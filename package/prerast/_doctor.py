"""`python -m prerast doctor`: what is installed, what is running, whether they fit, and the command that fixes
what does not. Reads only: it builds nothing, writes nothing, and never imports torch's build tooling.

It checks every library it finds (the package's own and fitting build-cache entries) against the size and
SHA-256 its build stamped, and loads nothing into its own process before a child process has loaded the plugin
for it: a library that crashes on load (a bad build, a broken driver) is reported with the signal it died of.

Exit codes: 0 prerast can run here; 1 no plugin that fits could be loaded; 2 the plugin loaded but has no code
for a visible GPU.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import torch

from prerast_meta import build_env, build_info, compat, integrity as _integrity, platforms, sources as _sources
from prerast_meta.version import __version__

from . import _cache, _loader, _source_build

OK, CANNOT_RUN, GPU_NOT_SERVED = 0, 1, 2
# Local version suffixes of the torch builds that the published prerast wheels follow; anything else (e.g. a
# vendor container's 2.5.0a0+nv24.10) is a custom build that needs a wheel built for it.
PUBLISHED_TORCH_LOCAL = re.compile(r"cpu|cu\d+|rocm[\d.]+|xpu")


def published_torch(version):
    return "+" not in version or bool(PUBLISHED_TORCH_LOCAL.fullmatch(version.split("+", 1)[1]))


# The child process of probe_load: imports this prerast as the command line would (loading what fits, building
# nothing) and says what it loaded.
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import prerast
from prerast import _loader
s = _loader.status()
print(json.dumps({"loaded": s["info"] is not None, "path": s["path"], "source": s["source"],
                  "error": None if s["error"] is None else str(s["error"])}))
"""
PROBE_TIMEOUT_S = 300


def probe_load(timeout=PROBE_TIMEOUT_S):
    """Load the plugin in a child process, as `import prerast` would here: {"ok", "returncode", "signal",
    "library" (the one being loaded when it died), "detail"}."""
    env = dict(os.environ, **{_loader.PROBE_ENV: "1"})
    cmd = [sys.executable, "-c", PROBE, os.path.dirname(_loader.PACKAGE_DIR)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "ok": False,
            "returncode": None,
            "signal": None,
            "library": None,
            "detail": f"loading the plugin in a child process did not finish in {timeout} s",
        }
    except OSError as e:
        return {
            "ok": False,
            "returncode": None,
            "signal": None,
            "library": None,
            "detail": f"could not start a child process to load the plugin: {e}",
        }
    loading = [line[len(_loader.PROBE_TAG) :] for line in out.stderr.splitlines() if line.startswith(_loader.PROBE_TAG)]
    found = {
        "ok": out.returncode == 0,
        "returncode": out.returncode,
        "signal": None,
        "library": loading[-1] if loading else None,
        "detail": None,
    }
    if out.returncode < 0:
        try:
            name = signal.Signals(-out.returncode).name
        except ValueError:
            name = f"signal {-out.returncode}"
        found["signal"] = name
        where = f"loading {found['library']}" if found["library"] else "importing prerast"
        found["detail"] = f"{where} killed a child process with {name}: it was not loaded into this one"
    elif out.returncode != 0:
        found["detail"] = "importing prerast in a child process failed:\n" + "\n".join(out.stderr.splitlines()[-15:])
    else:
        try:
            found["child"] = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            found["child"] = None
    return found


def load_after_probe():
    """The probe's verdict; the plugin is loaded here too when the probe survived the load."""
    if _loader.loaded_info() is not None:
        return None  # already loaded in this process (the doctor called from Python)
    probe = probe_load()
    if probe["signal"] is None and probe["returncode"] is not None:
        try:
            _loader.load_or_remember(build=False)
        except _loader.BinaryMismatchError:
            pass
    return probe


def library_report(path, stamp, role, entry=None):
    why = _integrity.problem(path, stamp)
    found = {
        "path": path,
        "role": role,
        "ok": why is None,
        "expected": why["expected"] if why else f"{stamp['size']} bytes, SHA-256 {stamp['sha256']}",
        "problem": None if why is None else f"{why['what']}; found {why['found']}",
    }
    if entry:
        found["entry"] = entry
    return found


def libraries(run):
    """The integrity of every library found: the package's own, and those of the build-cache entries for this
    torch when the cache is consulted. Nothing is loaded."""
    found = []
    bundled, why = build_info.read(_loader.PACKAGE_DIR)
    if bundled is not None:
        for name in build_info.library_names(bundled):
            lib = os.path.join(bundled["dir"], name)
            found.append(library_report(lib, build_info.stamp_of(bundled, lib), "bundled"))
    if _source_build.cache_consulted():
        prefix = _cache.key_prefix(compat.base_version(__version__), run["torch_version"], run["cuda_version"])
        root = _cache.cache_dir()
        for folder in _cache.entries(root, prefix):
            bad = _cache.entry_untrusted(root, folder)
            info, why = build_info.read(folder) if bad is None else (None, None)
            if info is None:
                found.append(
                    {
                        "path": folder,
                        "role": "cache",
                        "entry": folder,
                        "ok": False,
                        "expected": None,
                        "problem": bad[0] if bad else why,
                    }
                )
                continue
            for name in build_info.library_names(info):
                lib = os.path.join(folder, name)
                found.append(library_report(lib, build_info.stamp_of(info, lib), "cache", folder))
    return found


def gpus(info):
    """Visible GPUs with their compute capability and whether the loaded plugin has code for them."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return []
    archs = (info or {}).get("cuda_archs") or []
    no_kernels = info is not None and _loader.status()["cuda"] is not None  # e.g. a CUDA 12 plugin in CUDA 13 torch
    found = []
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        found.append(
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "capability": f"{cap[0]}.{cap[1]}",
                "served": None if info is None else (not no_kernels and any(compat.arch_serves(a, cap) for a in archs)),
            }
        )
    return found


def toolchain():
    """What a build here (build-wheel, or the opt-in first-use build) would find."""
    root = _sources.source_root()
    cuda_home = None
    if root and torch.version.cuda:
        try:
            cuda_home = build_env.find_cuda_home()
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
    probe = report.get("load_probe") or {}
    damaged = [lib for lib in report.get("libraries", []) if not lib["ok"]]
    if probe.get("signal"):
        found.append('python -X faulthandler -c "import prerast"   # where the load crashes (a stack per thread)')
        crashed = probe.get("library") or ""
        if crashed.startswith(report["source_build"]["cache_dir"] + os.sep):
            found.append(
                f"{platforms.remove_folder(os.path.dirname(crashed))}   # the cache entry whose library crashed"
            )
    if any(lib["role"] == "bundled" for lib in damaged) or probe.get("signal"):
        if published_torch(run["torch_version"]):
            found.append(_loader.fix_command(run))
    for entry in sorted({lib["entry"] for lib in damaged if lib["role"] == "cache"}):
        found.append(f"{platforms.remove_folder(entry)}   # a damaged build-cache entry")
    if not report["plugin"]["loaded"]:
        if published_torch(run["torch_version"]) and _loader.fix_command(run) not in found:
            found.append(_loader.fix_command(run))
        found.append(
            "python -m prerast build-wheel --out dist && pip install dist/prerast-*.whl"
            "   # where a compiler (and for CUDA torch the CUDA toolkit) is installed"
        )
        found.append(
            f"{platforms.set_env(_source_build.ENV_OPT_IN)}   # build at first import, cached in "
            f"{report['source_build']['cache_dir']}"
        )
    unserved = [g["capability"] for g in report["gpus"] if g["served"] is False]
    kernels = report["plugin"].get("cuda_kernels") or ""
    if unserved and kernels.startswith("not loaded"):
        found.append(_loader.fix_command(run))  # a wheel whose CUDA kernels fit this torch
    elif unserved:
        found.append(
            f"python -m prerast build-wheel --arch {','.join(sorted(set(unserved)))} --out dist "
            "&& pip install dist/prerast-*.whl"
        )
    return found


def collect(probe=None):
    state = _loader.status()
    info = state["info"]
    bundled, why_none = build_info.read(_loader.PACKAGE_DIR)
    run = _loader.running()
    usable, refused = _source_build.examine_entries(run) if _source_build.cache_consulted() else ([], [])
    report = {
        "prerast": {"version": __version__, "package": _loader.PACKAGE_DIR},
        "plugin": {
            "loaded": info is not None,
            "source": state["source"],
            "path": state["path"],
            "build_info": {k: v for k, v in (info or {}).items() if not k.endswith("path") and k != "dir"} or None,
            "kind": info.get("abi", "classic") if info else None,
            "fits": _loader.why_fits(info, run) if info else None,
            "cuda_kernels": None
            if info is None
            else ("loaded" if state["cuda"] is None else f"not loaded: {state['cuda']}"),
            "error": None if info is not None else str(state["error"] or (probe or {}).get("detail") or "not loaded"),
        },
        "load_probe": probe,
        "libraries": libraries(run),
        "bundled": {
            "path": bundled["path"] if bundled else None,
            "problems": build_info.choose(bundled, run)[1] if bundled else [why_none],
        },
        "running": dict(run, platform=platforms.describe_running(), python_executable=sys.executable),
        "gpus": gpus(info),
        "source_build": {
            "opted_in": _source_build.opted_in(),
            "cache_dir": _cache.cache_dir(),
            "cache_consulted": _source_build.cache_consulted(),
            "fitting_cache_entries": [folder for folder, _ in usable],
            "refused_cache_entries": refused,
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
    cuda = (
        f"CUDA {b['cuda_version']}, nvcc {b.get('nvcc_version')}, GPU archs {' '.join(b.get('cuda_archs') or [])}"
        if b.get("cuda_version")
        else "CPU only"
    )
    return (
        f"prerast {b.get('prerast_version')}, {b.get('abi', 'classic')} ABI, built with torch "
        f"{b.get('torch_version')} ({cuda}), "
        f"C++11 ABI {int(bool(b.get('cxx11_abi')))}, {b.get('python_tag')}, "
        f"commit {(b.get('git_commit') or '?')[:12]}, sources {b.get('source_hash') or '?'}, "
        f"built {b.get('built_at')}"
    )


def _describe_parts(b):
    """What a merged wheel was made of (python -m ci merge records each part), one line per part."""
    lines = []
    for p in b.get("parts") or []:
        if p.get("kind") == "binding":
            what = f"binding for {p['torch']}, built with torch {p['torch_version']}"
        else:
            what = "kernels " + ", ".join(
                k + (f" (CUDA {v['cuda_version']}, archs {' '.join(v['cuda_archs'])})" if v["cuda_version"] else "")
                for k, v in sorted(p.get("kernels", {}).items())
            )
        lines.append(f"part:     {what}: {p['wheel']}, SHA-256 {p['sha256'][:16]}..., {p['size']} bytes")
    return lines


def format_text(r):
    run, plugin, sb = r["running"], r["plugin"], r["source_build"]
    where = {"bundled": "the package", "cache": "the build cache", "built": "the build cache (built just now)"}
    lines = [f"prerast {r['prerast']['version']} at {r['prerast']['package']}"]
    if plugin["loaded"]:
        lines += [
            f"plugin:   loaded from {where[plugin['source']]}: {plugin['path']}",
            f"          {_describe_build(plugin['build_info'])}",
            f"          {plugin['fits']}",
            f"          CUDA kernels {plugin['cuda_kernels']}",
        ]
        lines += [f"          {line}" for line in _describe_parts(plugin["build_info"])]
        if plugin["source"] != "bundled":
            lines.append("          the package's own plugin does not fit: " + "; ".join(r["bundled"]["problems"]))
    else:
        lines.append("plugin:   none loaded")
        lines += ["          " + line for line in plugin["error"].splitlines()]
    lines.append(
        f"running:  Python {run['python']}, torch {run['torch_version']} "
        f"({'CUDA ' + run['cuda_version'] if run['cuda_version'] else 'CPU build'}), "
        f"C++11 ABI {int(run['cxx11_abi'])}, {run['platform']}"
    )
    if not r["gpus"]:
        lines.append("GPUs:     none visible" + (" (torch is a CPU build)" if not run["cuda_version"] else ""))
    for g in r["gpus"]:
        served = {True: "the plugin has code for it", False: "NO CODE FOR IT in the plugin", None: "-"}[g["served"]]
        lines.append(f"GPU {g['index']}:    {g['name']}, compute capability {g['capability']}: {served}")
    lines.append(
        f"source build: {_source_build.ENV_OPT_IN} {'on' if sb['opted_in'] else 'off'}; cache "
        f"{sb['cache_dir']} ({'read' if sb['cache_consulted'] else 'not read'}"
        + (f", {len(sb['fitting_cache_entries'])} fitting build(s)" if sb["cache_consulted"] else "")
        + ")"
    )
    lines.append(
        f"          sources {sb['sources'] or 'not available'}"
        + (f" (hash {sb['source_hash']})" if sb["source_hash"] else "")
        + f"; compiler {sb['compiler'] or 'none'}; CUDA toolkit {sb['cuda_home'] or 'none'}; "
        f"ninja {sb['ninja'] or 'none'}"
    )
    probe = r.get("load_probe")
    if probe is not None:
        child = probe.get("child") or {}
        if probe["ok"]:
            said = (
                f"a child process loaded {child.get('path')}"
                if child.get("loaded")
                else "a child process loaded no plugin (why: below), and did not crash"
            )
        else:
            said = probe["detail"] or f"a child process exited with code {probe['returncode']}"
        lines.append("load:     " + said)
    for lib in r["libraries"]:
        state = "OK" if lib["ok"] else "DAMAGED: " + lib["problem"]
        lines.append(f"library:  {lib['path']} ({lib['role']}): {state}")
        if not lib["ok"] and lib["expected"]:
            lines.append(f"          expected {lib['expected']}")
    for why in sb.get("refused_cache_entries") or []:
        lines += ["refused:  " + why.splitlines()[0]] + ["          " + line for line in why.splitlines()[1:]]
    status = {
        OK: "OK: prerast can run here.",
        CANNOT_RUN: "prerast cannot run here.",
        GPU_NOT_SERVED: "prerast runs here, but its plugin has no code for a visible GPU.",
    }[r["exit_code"]]
    lines.append(f"status:   {status}")
    for i, cmd in enumerate(r["fixes"]):
        lines.append(("fix:      " if i == 0 else "   or:    ") + cmd)
    return "\n".join(lines)


def main(as_json=False, out=None):
    out = out or sys.stdout
    report = collect(load_after_probe())
    if as_json:
        json.dump(report, out, indent=2)
        out.write("\n")
    else:
        out.write(format_text(report) + "\n")
    return report["exit_code"]
