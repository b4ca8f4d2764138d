"""The build environment, as setup.py, the wheel builder and the first-use build see it: where the CUDA toolkit
is, which GPU archs to compile for, and where the headers a partial toolkit lacks come from.

Standard library only (torch is passed in where its arch list is needed), so it also runs where torch is absent.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

MIN_ARCH = (7, 5)  # the oldest GPU current torch CUDA builds support


def find_cuda_home():
    """The toolkit root: $CUDA_HOME / $CUDA_PATH, /usr/local/cuda, or the real location of nvcc on PATH."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    if os.path.exists("/usr/local/cuda/bin/nvcc"):
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    real = os.path.realpath(nvcc)
    home = os.path.dirname(os.path.dirname(real))
    if os.path.exists(os.path.join(home, "include", "cuda_runtime.h")):
        return home
    # nvcc may be a wrapper script; its dry run names the toolkit it belongs to.
    try:
        out = subprocess.run([nvcc, "--dryrun", "--version"], capture_output=True, text=True, timeout=60)
        m = re.search(r"TOP=(\S+)", out.stdout + out.stderr)
        if m:
            return os.path.normpath(os.path.join(m.group(1), ".."))
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def nvcc_version(cuda_home):
    if not cuda_home:
        return None
    try:
        out = subprocess.run(
            [os.path.join(cuda_home, "bin", "nvcc"), "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return m.group(2) if m else None


def toolkit_version(cuda_home):
    """'12.4' for a toolkit whose nvcc is V12.4.131; None without one."""
    v = nvcc_version(cuda_home)
    return ".".join(v.split(".")[:2]) if v else None


def nvcc_archs(cuda_home):
    """Real archs this nvcc can compile for, as (major, minor) pairs."""
    try:
        out = subprocess.run(
            [os.path.join(cuda_home, "bin", "nvcc"), "--list-gpu-arch"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = set()
    for m in re.finditer(r"compute_(\d+)(\d)\b", out):
        found.add((int(m.group(1)), int(m.group(2))))
    return found or None


def parse_arch_list(text):
    """'7.5;8.0 9.0+PTX' -> ['7.5', '8.0', '9.0+PTX']."""
    items = [a for a in re.split(r"[;\s,]+", text.strip()) if a]
    for a in items:
        if not re.fullmatch(r"\d+\.\d+a?(\+PTX)?", a):
            raise ValueError(f"bad GPU arch {a!r} in arch list {text!r}: expected entries like 8.0, 9.0a or 9.0+PTX")
    return items


def arch_pair(entry):
    """'9.0a+PTX' -> (9, 0)."""
    major, minor = entry.replace("+PTX", "").rstrip("a").split(".")
    return int(major), int(minor)


def environment_arch_list(cuda_home):
    """The archs the environment asks for, or None. PRERAST_CUDA_ARCH_LIST, set for prerast alone, is taken as
    it is, and an arch the toolkit cannot compile is refused (ValueError naming the variable and what the toolkit
    supports): a wheel must not lack an arch it was asked for. TORCH_CUDA_ARCH_LIST, which images set for every
    torch extension (often with archs a newer toolkit dropped: 5.x-7.0 for CUDA 13), is filtered as the default
    list is: archs below 7.5 and those the toolkit cannot compile are left out, and the build says which."""
    supported = nvcc_archs(cuda_home) if cuda_home else None
    for var in ("PRERAST_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"):
        text = os.environ.get(var, "").strip()
        if not text:
            continue
        archs = parse_arch_list(text)
        keep = [a for a in archs if supported is None or arch_pair(a) in supported]
        if var == "TORCH_CUDA_ARCH_LIST":
            keep = [a for a in keep if arch_pair(a) >= MIN_ARCH]
        can = ", ".join(f"{a[0]}.{a[1]}" for a in sorted(supported or ()))
        version = toolkit_version(cuda_home) if cuda_home else None
        if var == "PRERAST_CUDA_ARCH_LIST" and keep != archs:
            raise ValueError(
                f"{var}={text!r} asks for {', '.join(a for a in archs if a not in keep)}, which nvcc {version} "
                f"cannot compile; it compiles {can}"
            )
        if not keep:
            raise ValueError(
                f"{var}={text!r} leaves no arch to compile: prerast needs {MIN_ARCH[0]}.{MIN_ARCH[1]} or newer, "
                f"nvcc {version} compiles {can}; set PRERAST_CUDA_ARCH_LIST to the archs to build"
            )
        if keep != archs:
            print(
                f"prerast: {var} lists {', '.join(a for a in archs if a not in keep)}, left out (below "
                f"{MIN_ARCH[0]}.{MIN_ARCH[1]} or not compiled by nvcc {version}); building {';'.join(keep)}",
                file=sys.stderr,
            )
        return keep
    return None


def arch_list(torch, cuda_home):
    """Archs to compile: the environment's choice (environment_arch_list), else every arch >= 7.5 that torch
    (None: a build without torch) ships SASS for and nvcc supports, with PTX of the newest so that future GPUs can
    JIT it."""
    chosen = environment_arch_list(cuda_home)
    if chosen is not None:
        return chosen
    flags = torch._C._cuda_getArchFlags() if torch is not None and hasattr(torch._C, "_cuda_getArchFlags") else ""
    archs = sorted({(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"sm_(\d+)(\d)\b", flags)})
    if not archs:
        archs = [(7, 5), (8, 0), (8, 6), (9, 0)]
    supported = nvcc_archs(cuda_home) if cuda_home else None
    archs = [a for a in archs if a >= MIN_ARCH and (supported is None or a in supported)]
    out = [f"{a[0]}.{a[1]}" for a in archs]
    out[-1] += "+PTX"
    return out


def gencode_flags(archs):
    flags = []
    for a in archs:
        num = a.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if a.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def cuda_include_dir(cuda_home, from_wheels=False):
    """The folder with cuda_runtime_api.h: the toolkit's include/ where cuda_home is given, else, with
    from_wheels, that of an nvidia-* wheel next to torch (nvidia/cuda_runtime/include, nvidia/cu13/include); None
    where there is none."""
    if cuda_home:
        candidates = [os.path.join(cuda_home, "include")]
    else:
        candidates = nvidia_pip_include_dirs() if from_wheels else []
    return next((d for d in candidates if os.path.isfile(os.path.join(d, "cuda_runtime_api.h"))), None)


def nvidia_pip_include_dirs():
    """Include folders of the nvidia-* wheels installed next to torch (nvidia/cu13/include, nvidia/cublas/include...)."""
    dirs = []
    for site in sys.path:
        root = os.path.join(site, "nvidia")
        if os.path.isdir(root):
            dirs += sorted(d for d in glob.glob(os.path.join(root, "*", "include")) if os.path.isdir(d))
    return dirs
