"""The Linux aarch64 CPU wheel, cross-built on an x86-64 machine, and an aarch64 Python that runs it under qemu.

    python -m ci cross fetch                        # torch 2.10.0 + numpy for aarch64, Debian's arm64 python3.11
    python -m ci cross build --out dist/aarch64     # the repaired manylinux_*_aarch64 CPU wheel (stable ABI)
    python -m ci cross python WHEEL -- -c "..."     # the aarch64 python3.11 under qemu, WHEEL installed
    python -m ci cross cuda-probe                   # does nvcc cross-compile the CUDA library here? (the error)

How the cross build works, with no change to setup.py: the build is setup.py's usual stable-ABI build against the
build environment's torch headers (the newest torch, TORCH_TARGET_VERSION = 2.10, exactly as the x86-64 stable wheel
is built), with the environment pointing the compiler, the linker and the platform at the target:

    CC, CXX, LDSHARED       aarch64-linux-gnu-gcc / -g++ (torch's ninja build runs $CXX; setuptools links with
                            $LDSHARED)
    LDFLAGS                 -L <torch 2.10.0 aarch64>/torch/lib first, so that -ltorch_cpu finds the aarch64
                            library of the oldest torch the wheel serves; -Wl,--no-undefined makes the link fail if
                            the plugin imports anything that torch 2.10's libraries and the C runtime do not define
    _PYTHON_HOST_PLATFORM   linux-aarch64: CPython's own cross-build switch; setuptools names the wheel
                            linux_aarch64 from it (and keeps the build folder apart from the x86-64 one)

auditwheel reads the ELF machine of the libraries and repairs a foreign-architecture wheel as it does a native one
(the torch libraries are excluded by the package's policy, so it needs none of them); the tag is the one the glibc
symbol versions allow (Debian 12's cross toolchain: manylinux_2_34_aarch64; a manylinux_2_28 image gives 2_28).

Downloads and the sysroot are kept in ~/.cache/prerast-platforms/aarch64 ($PRERAST_PLATFORMS_CACHE), outside the
repository; every step is skipped when its result is there. The sysroot comes from Debian's arm64 packages with a
private apt state (no `dpkg --add-architecture` on the machine): apt-get update/download with APT_CONFIG, dpkg -x.
"""

import argparse
import contextlib
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from ci import matrix  # noqa: E402
from ci.builder.progress import log  # noqa: E402
from ci.builder.tools import ToolsMissing  # noqa: E402
from prerast_meta import build_env, build_wheel, compat  # noqa: E402

TARGET = "aarch64"
# The folder of a CUDA toolkit's own headers per build machine (targets/<folder>/include): NVIDIA names arm64
# servers "sbsa".
HOST_TOOLKIT_DIR = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}
TRIPLET = "aarch64-linux-gnu"
PLATFORM = matrix.targets()[f"linux-{TARGET}"].plat  # the platform pip downloads torch and numpy for
TORCH = "%d.%d.0" % compat.STABLE_FLOOR  # the oldest torch a stable wheel serves: link against it
NUMPY = "2.4.6"
PYTHON = "3.11"
# Debian 12's arm64 python3.11 and the libraries it, torch and numpy load (apt-cache depends --recurse, less the
# packages only maintainer scripts use: perl, dpkg, tar, mime-support).
DEBS = [
    "python3.11",
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "libgomp1",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libssl3",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "libuuid1",
    "libcrypt1",
    "libzstd1",
    "libreadline8",
    "libdb5.3",
    "libgdbm6",
    "libnsl2",
    "libtirpc3",
]
# Pure-Python packages torch imports and the tests run with, copied from this interpreter's environment (their
# compiled speed-ups, x86-64 code, are left out: markupsafe falls back to Python without its own). The test
# runner's are copied where this environment has them (a cell's build virtualenv has torch's only).
PURE = [
    "filelock",
    "typing_extensions",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "fsspec",
    "pytest",
    "_pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "py",
    "pygments",
]
PURE_FOR_TESTS = {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "pygments"}
# program -> the Debian package that provides it
TOOLS = {
    "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu",
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "qemu-aarch64-static": "qemu-user-static",
    "apt-get": "apt",
    "dpkg": "dpkg",
    "readelf": "binutils",
}


def pip_download(python, dest, *specs, **run):
    """`pip download` of the aarch64 wheels `specs` (no dependencies) into dest, for this Python; `run` goes to
    subprocess.run."""
    command = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
    command += ["--only-binary=:all:", "--platform", PLATFORM, "--python-version", PYTHON, "-d", dest, *specs]
    return subprocess.run(command, **run)


def cache_dir():
    base = os.environ.get("PRERAST_PLATFORMS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "prerast-platforms"
    )
    return os.path.join(base, TARGET)


def paths(cache=None):
    cache = cache or cache_dir()
    return {
        "cache": cache,
        "downloads": os.path.join(cache, "downloads"),
        "site": os.path.join(cache, "site"),
        "sysroot": os.path.join(cache, "sysroot"),
        "apt": os.path.join(cache, "apt"),
        "wheels": os.path.join(cache, "wheels"),
        "torch_lib": os.path.join(cache, "site", "torch", "lib"),
    }


def check_tools(programs=TOOLS):
    missing = [f"{prog}: apt-get install {pkg}" for prog, pkg in programs.items() if not shutil.which(prog)]
    if missing:
        raise ToolsMissing("the aarch64 cross build cannot start; missing:\n" + "\n".join(f"  - {m}" for m in missing))


def _done(path):
    return os.path.exists(os.path.join(path, ".complete"))


def _mark(path, what):
    with open(os.path.join(path, ".complete"), "w") as f:
        json.dump(what, f)


def fetch_wheels(p, python=sys.executable):
    """torch and numpy for aarch64 from the package index (pip download), unpacked into the target's site folder,
    with the pure-Python dependencies copied from `python`'s environment."""
    if _done(p["site"]):
        stamp = json.load(open(os.path.join(p["site"], ".complete")))
        if set(stamp.get("pure", ())) < set(PURE):  # the list grew since: copy again (the downloads are kept)
            stamp["pure"] = copy_pure(p["site"])
            _mark(p["site"], stamp)
        return
    os.makedirs(p["downloads"], exist_ok=True)
    log(f"downloading torch {TORCH} and numpy {NUMPY} for {PLATFORM} into {p['downloads']}")
    pip_download(python, p["downloads"], f"torch=={TORCH}", f"numpy=={NUMPY}", check=True)
    shutil.rmtree(p["site"], ignore_errors=True)
    os.makedirs(p["site"])
    for pattern in (f"torch-{TORCH}-*aarch64.whl", f"numpy-{NUMPY}-*aarch64*.whl"):
        (wheel,) = glob.glob(os.path.join(p["downloads"], pattern))
        log(f"unpacking {os.path.basename(wheel)}")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(p["site"])
    copied = copy_pure(p["site"])
    _mark(p["site"], {"torch": TORCH, "numpy": NUMPY, "pure": copied})


def copy_pure(site):
    """Copies PURE from this interpreter's environment into site, without compiled files; returns the names."""
    copied = []
    for name in PURE:
        spec = importlib.util.find_spec(name)
        if (spec is None or not spec.origin) and name in PURE_FOR_TESTS:
            continue
        if spec is None or not spec.origin:
            raise ToolsMissing(
                f"{name} is not installed in {sys.executable}'s environment (the aarch64 site copies "
                f"it): pip install {name}"
            )
        if spec.submodule_search_locations:
            src = list(spec.submodule_search_locations)[0]
            shutil.copytree(
                src, os.path.join(site, name), dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.so", "__pycache__")
            )
        else:
            shutil.copy2(spec.origin, site)
        copied.append(name)
    return copied


def fetch_sysroot(p):
    """Debian's arm64 python3.11 and its libraries, unpacked with dpkg -x. apt works on a private state folder
    (its own package lists, the arm64 architecture only), so the machine's apt configuration is left as it is."""
    if _done(p["sysroot"]):
        return
    apt = p["apt"]
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        os.makedirs(os.path.join(apt, sub), exist_ok=True)
    conf = os.path.join(apt, "apt.conf")
    with open(conf, "w") as f:
        f.write(
            'APT::Architecture "arm64";\nAPT::Architectures { "arm64"; };\n'
            + ('APT::Sandbox::User "root";\n' if os.geteuid() == 0 else "")
            + f'Dir::State::Lists "{apt}/lists";\nDir::State::status "{apt}/status";\nDir::Cache "{apt}/cache";\n'
        )
    open(os.path.join(apt, "status"), "a").close()
    env = dict(os.environ, APT_CONFIG=conf)
    log("apt-get update (arm64 package lists, private state in " + apt + ")")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    debs = os.path.join(apt, "debs")
    log(f"apt-get download {len(DEBS)} arm64 packages")
    subprocess.run(["apt-get", "download", "-qq"] + DEBS, check=True, env=env, cwd=debs)
    shutil.rmtree(p["sysroot"], ignore_errors=True)
    os.makedirs(p["sysroot"])
    for deb in sorted(glob.glob(os.path.join(debs, "*_arm64.deb"))):
        subprocess.run(["dpkg", "-x", deb, p["sysroot"]], check=True)
    _mark(p["sysroot"], {"debs": sorted(os.listdir(debs))})


def fetch(cache=None, python=sys.executable):
    check_tools()
    p = paths(cache)
    t0 = time.time()
    fetch_wheels(p, python)
    fetch_sysroot(p)
    log(f"aarch64 torch, numpy and sysroot ready in {p['cache']} ({time.time() - t0:.0f} s)")
    return p


def cross_vars(p):
    """The variables that make setup.py's build an aarch64 build (see the module's docstring); None removes one."""
    return {
        "CC": f"{TRIPLET}-gcc",
        "CXX": f"{TRIPLET}-g++",
        "LDSHARED": f"{TRIPLET}-g++ -shared",
        "LDFLAGS": f"-L{p['torch_lib']} -Wl,-rpath-link,{p['torch_lib']} -Wl,--no-undefined",
        "_PYTHON_HOST_PLATFORM": f"linux-{TARGET}",
        "PRERAST_FORCE_CPU": "1",  # the CPU library: nvcc's cross build is cuda-probe's question
        "CFLAGS": None,
        "CXXFLAGS": None,  # the host's flags (-march=...) are not the target's
    }


def build(out_dir, cache=None, python=sys.executable, source=ROOT):
    """pip wheel of `source` for aarch64, repaired with the package's policy into out_dir (the one build route,
    prerast_meta/build_wheel.py, with the cross compiler's variables); returns its path."""
    p = fetch(cache, python)
    os.makedirs(out_dir, exist_ok=True)
    spec = build_wheel.BuildSpec(
        source=source,
        out_dir=out_dir,
        python=python,
        env=cross_vars(p),
        log_path=os.path.join(out_dir, "build-aarch64.log"),
    )
    open(spec.log_path, "w").close()
    log(f"cross-compiling the aarch64 CPU library (log: {spec.log_path})")
    repaired = build_wheel.build(spec, log=lambda text: log("  " + text))
    if not build_wheel.platform_tag(repaired).endswith("_" + TARGET):
        raise RuntimeError(f"the cross build made {os.path.basename(repaired)}, expected a wheel for {TARGET}")
    return repaired


def install(wheel, cache=None):
    """The wheel unpacked into its own folder of the cache (what pip install puts in site-packages); returns it."""
    p = paths(cache)
    dest = os.path.join(p["wheels"], os.path.basename(wheel)[: -len(".whl")])
    stamp = os.path.join(dest, ".wheel-sha")
    digest = f"{os.path.getsize(wheel)}-{os.path.getmtime(wheel)}"
    if not (os.path.exists(stamp) and open(stamp).read() == digest):
        shutil.rmtree(dest, ignore_errors=True)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)
        with open(stamp, "w") as f:
            f.write(digest)
    return dest


def python_command(cache=None, installed=None):
    """(argv prefix, environment) that run Debian's aarch64 python3.11 under qemu with torch, numpy and (given)
    an installed wheel's folder on its path."""
    p = paths(cache)
    sysroot = p["sysroot"]
    path = [d for d in (installed, p["site"]) if d]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    for var in ("PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(var, None)
    return ["qemu-aarch64-static", "-L", sysroot, os.path.join(sysroot, "usr", "bin", f"python{PYTHON}")], env


def cuda_probe(cache=None, python=sys.executable, source="csrc/core/wide_sum_cuda.cu"):
    """How far the CUDA library's cross build gets here, step by step: nvcc -ccbin aarch64-linux-gnu-g++ on one of
    its CUDA sources, first as nvcc sets itself up for an aarch64 host compiler (the headers of the toolkit's
    cross target folder), then with the x86-64 toolkit's own headers (the CUDA headers are the same for every
    host); and whether the aarch64 libraries the link needs can be had (libcudart from PyPI's nvidia-cuda-runtime
    for aarch64, libtorch_cuda from a CUDA build of torch for aarch64). Returns {"steps": [...], "ok": bool}."""

    p = paths(cache)
    home = build_env.find_cuda_home()
    if not home:
        return {"ok": False, "steps": [{"step": "toolkit", "ok": False, "output": "no CUDA toolkit: set CUDA_HOME"}]}
    nvcc = os.path.join(home, "bin", "nvcc")
    steps = []
    base = [
        nvcc,
        "-ccbin",
        f"{TRIPLET}-g++",
        "-std=c++17",
        "-O3",
        "--fmad=false",
        "-gencode=arch=compute_90,code=sm_90",
        "-Xcompiler",
        "-fPIC",
        "-I",
        os.path.join(ROOT, "csrc", "core"),
    ]
    out = os.path.join(tempfile.mkdtemp(prefix="prerast-nvcc-aarch64-"), "probe.o")
    dry = subprocess.run(
        base + ["--dryrun", "-c", os.path.join(ROOT, source), "-o", out], capture_output=True, text=True
    ).stderr
    target = ([m for m in re.findall(r"_TARGET_DIR_=(\S+)", dry) if m] or [None])[-1]
    steps.append(
        {
            "step": "nvcc's target folder for this host compiler",
            "ok": bool(target) and os.path.isdir(os.path.join(home, target)),
            "output": f"{target} ({'present' if target and os.path.isdir(os.path.join(home, target)) else 'absent: NVIDIA ships it as cuda-cross-aarch64 / cuda-cross-sbsa'})",
        }
    )
    host = HOST_TOOLKIT_DIR.get(platform.machine().lower(), platform.machine().lower() + "-linux")
    host_inc = os.path.join(home, "targets", host, "include")
    for label, extra in (
        ("compile as nvcc sets itself up", []),
        (f"compile with the {host} toolkit's headers", ["-I", host_inc, "-isystem", os.path.join(host_inc, "cccl")]),
    ):
        cmd = base + extra + ["-c", os.path.join(ROOT, source), "-o", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        step = {
            "step": label,
            "ok": r.returncode == 0,
            "command": " ".join(cmd),
            "output": (r.stdout + r.stderr).strip(),
        }
        if r.returncode == 0:
            machine = re.search(
                r"Machine:\s+(.*)", subprocess.run(["readelf", "-h", out], capture_output=True, text=True).stdout
            )
            step["output"] += f"object: {machine.group(1).strip() if machine else '?'}"
        steps.append(step)
    version = (build_env.nvcc_version(home) or "13.0").split(".")
    spec = (
        f"nvidia-cuda-runtime=={version[0]}.{version[1]}.*"
        if int(version[0]) >= 13
        else f"nvidia-cuda-runtime-cu{version[0]}"
    )
    r = pip_download(python, os.path.join(p["downloads"], "cuda-runtime"), spec, capture_output=True, text=True)
    steps.append(
        {
            "step": f"libcudart for aarch64 (pip download {spec})",
            "ok": r.returncode == 0,
            "output": "\n".join(line for line in (r.stdout + r.stderr).splitlines() if not line.startswith("WARNING")),
        }
    )
    torch_cuda = os.path.join(p["torch_lib"], "libtorch_cuda.so")
    steps.append(
        {
            "step": "libtorch_cuda for aarch64",
            "ok": os.path.exists(torch_cuda),
            "output": f"torch {TORCH}'s aarch64 wheel on PyPI is a CPU build: "
            f"{'has' if os.path.exists(torch_cuda) else 'no'} libtorch_cuda.so (a CUDA build of torch "
            f"for aarch64 comes from download.pytorch.org/whl/cu{version[0]}0)",
        }
    )
    return {"ok": all(s["ok"] for s in steps[2:]), "steps": steps}


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ci cross", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    b = sub.add_parser("build")
    b.add_argument("--out", default=os.path.join(ROOT, "dist", TARGET))
    r = sub.add_parser("python")
    r.add_argument("wheel", help="a prerast aarch64 wheel to put on the path ('-' for none)")
    r.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("cuda-probe")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "fetch":
            print(fetch()["cache"])
        elif a.cmd == "build":
            print(build(a.out))
        elif a.cmd == "python":
            with contextlib.redirect_stdout(sys.stderr):  # stdout is the program's
                fetch()
            cmd, env = python_command(installed=None if a.wheel == "-" else install(a.wheel))
            args = a.args[1:] if a.args[:1] == ["--"] else a.args
            return subprocess.run(cmd + args, env=env).returncode
        elif a.cmd == "cuda-probe":
            res = cuda_probe()
            print(json.dumps(res, indent=2))
            return 0 if res["ok"] else 1
    except ToolsMissing as e:
        print(e, file=sys.stderr)
        return ToolsMissing.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
