"""Facts about the build environment, shared by setup.py and the wheel builder: where the CUDA toolkit is,
which GPU archs to compile for, the wheel's local version tag, and the metadata stamped into the package.

Imports nothing outside the standard library at module level, so it also runs where torch is absent.
"""
import datetime
import glob
import os
import re
import shutil
import subprocess
import sys

MIN_ARCH = (7, 5)

# The stable-ABI plugin is compiled against the newest torch's headers but targets this release: it loads into
# every torch from here on. TORCH_TARGET_VERSION packs major, minor, patch in the top bytes (2.10 = 0x020a...).
STABLE_FLOOR = (2, 10)
STABLE_TARGET_VERSION = "0x%02x%02x000000000000" % STABLE_FLOOR
ABIS = ("stable", "classic")


def torch_release(torch_version):
    """'2.14.1+cu130' -> (2, 14, 1); '2.5.0a0+nv24.10' -> (2, 5, 0)."""
    return tuple(int(re.match(r"\d+", x).group()) for x in torch_version.split("+")[0].split(".")[:3])


def abi_kind(torch_version, requested=None):
    """'stable' or 'classic': PRERAST_ABI when set, else stable for torch >= 2.10 (one binary for every later
    torch) and classic below (one binary per torch minor release)."""
    requested = requested if requested is not None else os.environ.get("PRERAST_ABI", "")
    floor = torch_release(torch_version)[:2] >= STABLE_FLOOR
    if not requested:
        return "stable" if floor else "classic"
    if requested not in ABIS:
        raise ValueError(f"PRERAST_ABI={requested!r}: expected one of {', '.join(ABIS)}")
    if requested == "stable" and not floor:
        raise ValueError(f"PRERAST_ABI=stable needs torch >= {STABLE_FLOOR[0]}.{STABLE_FLOOR[1]} in the build "
                         f"environment (found {torch_version}); torch's stable ABI does not cover older releases")
    return requested


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
        out = subprocess.run([os.path.join(cuda_home, "bin", "nvcc"), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return m.group(2) if m else None


def nvcc_archs(cuda_home):
    """Real archs this nvcc can compile for, as (major, minor) pairs."""
    try:
        out = subprocess.run([os.path.join(cuda_home, "bin", "nvcc"), "--list-gpu-arch"], capture_output=True,
                             text=True, timeout=60).stdout
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


def arch_list(torch, cuda_home):
    """Archs to compile: the environment's choice, else every arch >= 7.5 that torch ships SASS for and nvcc
    supports, with PTX of the newest so that future GPUs can JIT it."""
    for var in ("PRERAST_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"):
        if os.environ.get(var):
            return parse_arch_list(os.environ[var])
    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
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


# The CUDA major of the stable wheel that goes to PyPI without a local tag: PyPI's torch is a CUDA 13 build.
PYPI_CUDA_MAJOR = "13"


def local_tag(torch_version, cuda_version, abi="classic"):
    """The wheel's local version. Classic: the torch minor and platform it was built for ('2.14.1+cu130',
    '13.0' -> 'pt214cu130'; CPU builds 'pt213cpu'). Stable: only the CUDA major ('cu12'), none for the CUDA
    major of PyPI's torch (such a wheel can go to PyPI), 'cpu' for a build without CUDA."""
    if abi == "stable":
        if not cuda_version:
            return "cpu"
        major = cuda_version.split(".")[0]
        return "" if major == PYPI_CUDA_MAJOR else f"cu{major}"
    major, minor = torch_version.split("+")[0].split(".")[:2]
    platform = "cpu" if not cuda_version else "cu" + cuda_version.replace(".", "")
    return f"pt{major}{minor}{platform}"


def nvidia_pip_include_dirs():
    """Include folders of the nvidia-* wheels installed next to torch (nvidia/cu13/include, nvidia/cublas/include...)."""
    dirs = []
    for site in sys.path:
        root = os.path.join(site, "nvidia")
        if os.path.isdir(root):
            dirs += sorted(d for d in glob.glob(os.path.join(root, "*", "include")) if os.path.isdir(d))
    return dirs


def git_commit(root):
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "--verify", "-q", "HEAD"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def build_info(torch, version, with_cuda, cuda_home, archs, root, abi="classic"):
    floor = "%d.%d" % STABLE_FLOOR if abi == "stable" else None
    return {
        "abi": abi,
        "torch_floor": floor,
        "prerast_version": version,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if with_cuda else None,
        "nvcc_version": nvcc_version(cuda_home) if with_cuda else None,
        "cuda_archs": archs,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python_tag": "cp310-abi3",
        "python_built_with": "%d.%d" % sys.version_info[:2],
        "git_commit": git_commit(root),
        "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
