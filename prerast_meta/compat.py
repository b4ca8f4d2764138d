"""Which prerast binary serves which torch, and how its wheel is named: the rules the build (setup.py, ci/), the
matrix and the loader share, each stated once here.

Pure functions of plain values. `run` is what a binary has to fit, as the loader reports it:
{"python": "3.11.9", "torch_version": "2.14.1+cu130", "cuda_version": "13.0" or None, "cxx11_abi": True}.
`info` is a binary's build metadata (prerast_meta.build_info).
"""

import itertools
import os
import sys

from . import platforms
from .version import __version__

# The oldest torch the stable-ABI plugin serves: it is compiled with TORCH_TARGET_VERSION set to this release,
# which packs major, minor, patch in the top bytes (2.10 = 0x020a...).
STABLE_FLOOR = (2, 10)
STABLE_TARGET_VERSION = "0x%02x%02x000000000000" % STABLE_FLOOR
# The CUDA major of the stable wheel that carries no local version tag (the one on PyPI): PyPI's torch is a
# CUDA 13 build from 2.11 on.
PYPI_CUDA_MAJOR = "13"
ABIS = ("stable", "classic")
# The oldest CPython prerast serves: Requires-Python (pyproject's requires-python agrees, tests/runtime/test_facts.py
# checks). No library of a wheel uses Python's C API (python -m ci symbols keeps it so): the loader opens them with
# torch.ops.load_library and ctypes, never imports them, so one binary serves every CPython, free-threaded ones
# included, and every wheel is tagged py3-none-<platform> (setup.py's bdist_wheel). An abi3 tag would shut out the
# free-threaded interpreters (3.13t, 3.14t), which take no abi3 wheel.
PYTHON_FLOOR = (3, 10)
WHEEL_TAG = "py3-none"
# The GitHub repository prerast is released from (owner/name). Its GitHub Pages site serves the documentation at
# its root and the wheel index under whl/: the index the loader's fix-it commands name. The pages job checks that
# the repository it deploys from has this Pages URL (python -m ci pages-url-check), so that no fork or renamed
# repository publishes an index the loader does not point to.
REPOSITORY = "prerast/prerast"


def pages_url(repository=REPOSITORY):
    """The GitHub Pages URL of a repository, with a trailing slash: a project site lives under /<name>/ of its
    owner's github.io host (lower-cased), except the repository named <owner>.github.io, served at the root."""
    owner, name = repository.split("/")
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if name.lower() == host else f"https://{host}/{name}/"


PAGES_URL = pages_url()
DEFAULT_INDEX_URL = PAGES_URL + "whl"


def running(torch):
    """What a binary has to fit in a process that runs `torch` (the module), as plain values."""
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def index_url():
    """The find-links index the fix-it commands name (PRERAST_INDEX_URL moves it)."""
    return os.environ.get("PRERAST_INDEX_URL", DEFAULT_INDEX_URL).rstrip("/")


def base_version(v):
    return v.split("+")[0]


def release(torch_version):
    """'2.14.1+cu130' -> (2, 14, 1); '2.5.0a0+nv24.10' -> (2, 5, 0)."""
    parts = []
    for x in base_version(torch_version).split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, x))
        parts.append(int(digits or 0))
    return tuple(parts)


def minor(torch_version):
    return ".".join(str(x) for x in release(torch_version)[:2])


def cuda_major(cuda_version):
    return cuda_version.split(".")[0] if cuda_version else None


def python_floor_text():
    return "%d.%d" % PYTHON_FLOOR


def tags_for(plat):
    """'manylinux_2_28_x86_64' -> 'py3-none-manylinux_2_28_x86_64': a wheel's tags after its version."""
    return f"{WHEEL_TAG}-{plat}"


def floor_text():
    return "%d.%d" % STABLE_FLOOR


def compute_platform(cuda_version):
    """torch's name for a compute platform: 'cpu', or 'cu130' for CUDA 13.0."""
    return "cu" + cuda_version.replace(".", "") if cuda_version else "cpu"


def abi_kind(torch_version, requested=""):
    """'stable' or 'classic' for a build with this torch: `requested` (PRERAST_ABI) when given, else stable for
    torch >= the floor (one binary for every later torch) and classic below (one binary per torch minor)."""
    above = release(torch_version)[:2] >= STABLE_FLOOR
    if not requested:
        return "stable" if above else "classic"
    if requested not in ABIS:
        raise ValueError(f"PRERAST_ABI={requested!r}: expected one of {', '.join(ABIS)}")
    if requested == "stable" and not above:
        raise ValueError(
            f"PRERAST_ABI=stable needs torch >= {floor_text()} in the build environment (found "
            f"{torch_version}); torch's stable ABI does not cover older releases"
        )
    return requested


# What one build makes (setup.py's PRERAST_PARTS): the binding, the kernel library, or both.
PARTS = ("binding", "kernels")


def build_parts(text):
    """PRERAST_PARTS ('binding', 'kernels', 'binding,kernels'; '' for both) as a tuple of PARTS."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip()) or PARTS
    wrong = [p for p in parts if p not in PARTS]
    if wrong:
        raise ValueError(f"PRERAST_PARTS={text!r}: expected {' and/or '.join(PARTS)}, comma-separated")
    return parts


def kernels_tag(cuda_major_=None):
    """The local version of a wheel of kernel libraries alone (a part for `python -m ci merge`): 'kernels.cpu',
    'kernels.cu12'."""
    return f"kernels.cu{cuda_major_}" if cuda_major_ else "kernels.cpu"


def binding_tag(torch_version, abi):
    """The local version of a wheel of a binding alone (a part for `python -m ci merge`): 'binding.stable',
    'binding.pt24'. Never untagged: a binding without its kernels does not run."""
    if abi == "stable":
        return "binding.stable"
    major, minor_ = release(torch_version)[:2]
    return f"binding.pt{major}{minor_}"


def local_tag(torch_version, cuda_version, abi, system=None):
    """The local version of the wheel a build makes. Classic: the torch minor and platform it was built for
    ('2.14.1+cu130', '13.0' -> 'pt214cu130'; CPU builds 'pt213cpu'). Stable: only the CUDA major ('cu12'), none
    for PyPI's CUDA major (such a wheel can go to PyPI), 'cpu' for a build without CUDA, except on an OS that torch
    ships no CUDA build for (macOS, `system` 'darwin'; None: this one), where the CPU wheel is PyPI's."""
    if abi == "stable":
        if not cuda_version:
            return "cpu" if platforms.current(system).torch_cuda else ""
        return "" if cuda_major(cuda_version) == PYPI_CUDA_MAJOR else f"cu{cuda_major(cuda_version)}"
    major, minor_ = release(torch_version)[:2]
    return f"pt{major}{minor_}{compute_platform(cuda_version)}"


def find_links_page(torch_release, platform):
    """The index page that lists every prerast wheel serving one torch build: 'torch-2.12.0+cu126.html'."""
    return f"torch-{base_version(torch_release)}+{platform}.html"


def fix_command(run):
    """The pip command that installs the prerast wheel for the running torch: the one wheel of the platform
    (untagged, as on PyPI), which carries a binding for every torch build the matrix serves there and the kernels
    of every CUDA major, from the index page of that torch build (every build a wheel serves has a page listing
    it). The slim, tagged wheels of the pages are for pinning one build by hand."""
    page = find_links_page(run["torch_version"], compute_platform(run["cuda_version"]))
    return f'pip install --force-reinstall --no-deps "prerast=={base_version(__version__)}" -f {index_url()}/{page}'


def reinstall_fix(run):
    return f"Reinstall prerast:\n    {fix_command(run)}"


def is_stable(info):
    return info.get("abi") == "stable"


def floor(info):
    """The oldest torch a stable-ABI binary serves, as 'major.minor'."""
    return info.get("torch_floor") or floor_text()


def serves(info):
    """Which torch releases a binary serves, in words: 'torch >= 2.10 (stable ABI)' or 'torch 2.4.x'."""
    if is_stable(info):
        return f"torch >= {floor(info)} (stable ABI)"
    return f"torch {minor(info.get('torch_version', '0.0'))}.x"


def describe(info):
    if is_stable(info):
        cuda = f"CUDA {cuda_major(info['cuda_version'])}.x" if info.get("cuda_version") else "CPU only"
    else:
        cuda = "CUDA " + info["cuda_version"] if info.get("cuda_version") else "CPU only"
    archs = ", GPU archs " + " ".join(info["cuda_archs"]) if info.get("cuda_archs") else ""
    return (
        f"prerast {info.get('prerast_version')} for {serves(info)}, built with torch "
        f"{info.get('torch_version')} ({cuda}{archs})"
    )


def describe_running(run):
    cuda = "CUDA " + run["cuda_version"] if run["cuda_version"] else "CPU only"
    return f"Python {run['python']}, torch {run['torch_version']} ({cuda})"


def problems(info, run):
    """Why a binary with build metadata `info` cannot run in `run`; empty if it fits."""
    found = []
    if is_stable(info):
        oldest = floor(info)
        if release(run["torch_version"])[:2] < release(oldest)[:2]:
            found.append(
                f"torch {run['torch_version']} (running) is older than {oldest}, the oldest torch this "
                "stable-ABI binary serves"
            )
    else:
        if minor(info.get("torch_version", "0.0")) != minor(run["torch_version"]):
            found.append(
                f"torch {info.get('torch_version')} (built; serves torch {minor(info['torch_version'])}.x)"
                f" != torch {run['torch_version']} (running)"
            )
        if bool(info.get("cxx11_abi")) != run["cxx11_abi"]:
            found.append(
                f"C++11 ABI {int(bool(info.get('cxx11_abi')))} (built) != {int(run['cxx11_abi'])} (running torch)"
            )
    if base_version(info.get("prerast_version", "?")) != base_version(__version__):
        found.append(f"prerast {info.get('prerast_version')} (binary) != prerast {__version__} (Python package)")
    return found


def mismatch_message(info, reasons, run):
    lines = [
        "prerast's compiled plugin does not fit this environment.",
        f"  built for: {describe(info)}",
        f"  running:   {describe_running(run)}",
    ]
    lines += [f"  mismatch:  {r}" for r in reasons]
    lines.append(f"Install the wheel built for the running torch:\n    {fix_command(run)}")
    return "\n".join(lines)


def damaged_message(path, found, fix):
    """The refusal of a library that is not the one its build stamped: which file, what was expected and found."""
    return (
        f"prerast will not load {path}: {found['what']}, so loading it could crash Python.\n"
        f"  expected: {found['expected']}\n"
        f"  found:    {found['found']}\n{fix}"
    )


def why_fits(info, run):
    """In words: what kind of binary this is and why it serves the running torch."""
    if is_stable(info):
        return (
            f"stable-ABI binary (torch's stable C ABI): serves every torch from "
            f"{floor(info)} on; torch {run['torch_version']} is one"
        )
    return (
        f"classic binary built with torch {info.get('torch_version')}: serves every torch "
        f"{minor(info.get('torch_version', '0.0'))}.x (C++11 ABI {int(bool(info.get('cxx11_abi')))}); "
        f"torch {run['torch_version']} is one"
    )


def cuda_skip_reason(info, run):
    """Why the binary's CUDA kernels are not for this torch (None when they are): the binary has none, torch is
    a CPU build, or the CUDA majors of the kernel library and of torch differ."""
    if not info.get("cuda_path"):
        return f"this prerast binary is CPU-only ({describe(info)})"
    if not run["cuda_version"]:
        return f"the running torch {run['torch_version']} is a CPU-only build"
    if cuda_major(info.get("cuda_version")) != cuda_major(run["cuda_version"]):
        return (
            f"its CUDA kernels are built for CUDA {cuda_major(info.get('cuda_version'))}.x but torch "
            f"{run['torch_version']} runs CUDA {run['cuda_version']}"
        )
    return None


def arch_serves(arch, capability):
    """Does one entry of the arch list ('8.0', '9.0a', '12.0+PTX') run on a GPU of this compute capability?"""
    major, minor_ = capability
    name = arch.replace("+PTX", "")
    exact = name.endswith("a")
    a_major, a_minor = (int(x) for x in name.rstrip("a").split("."))
    if exact:
        return (a_major, a_minor) == (major, minor_)
    if a_major == major and a_minor <= minor_:  # SASS runs on later minor revisions of its major
        return True
    return arch.endswith("+PTX") and (a_major, a_minor) <= (major, minor_)  # PTX is JIT-compiled forward
