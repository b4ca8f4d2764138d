"""CUDA 12.4 from Debian trixie's non-free packages, as a CUDA_HOME of NVIDIA's layout, with no system install.
Standard library only.

    python -m ci toolkit --cuda 12.4                  # into ~/.cache/prerast/toolkits/cuda-12.4; prints that path
    python -m ci toolkit --cuda 12.4 --dest DIR [--mirror URL]

apt-get reads a sources file of our own (trixie main contrib non-free, on the Debian mirror this machine's apt
uses) with its lists and cache in a private folder, downloads the toolkit's packages (about 1 GB, no root needed)
and each is unpacked with dpkg-deb, never installed. Debian scatters the toolkit (/usr/bin, /usr/include,
/usr/lib/nvidia-cuda-toolkit, /usr/lib/<multiarch>) and its nvcc.profile is a link to /etc/nvcc.profile, so the
pieces are copied into NVIDIA's layout (bin/, nvvm/, include/, lib64/) with an nvcc.profile of its own. nvcc 12.4
accepts GCC up to 13: where the PATH's gcc is newer, ccbin/ holds gcc and g++ links to the newest accepted
gcc-N/g++-N and bin/nvcc is a script that puts ccbin/ first on PATH. The toolkit is built in DIR.partial-<pid>,
checked (an object for sm_80 that includes CUB, a shared library linked against cudart), marked complete with
prerast-toolkit.json, then renamed into place: a second run finds the marker and returns at once.

Debian carries one CUDA: other versions come from NVIDIA (ci/manylinux_setup.sh, python -m ci toolkit-redist).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

# CUDA version -> (the Debian suite whose non-free component carries it, the newest GCC major its nvcc accepts).
SUITES = {"12.4": ("trixie", 13)}
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MARKER = "prerast-toolkit.json"  # written last, after the self-check: a complete toolkit has it
TOOL = "nvidia-cuda-toolkit"  # the package whose version is the toolkit's
PACKAGES = (TOOL, "nvidia-cuda-dev", "libnvvm4", "libcudart12", "libcub-dev", "libthrust-dev", "libcu++-dev")
# nvidia-cuda-dev unpacks to 2.5 GB (every CUDA library, static and shared); a toolkit that builds kernels needs
# these 20 MB of it. The others unpack whole.
MEMBERS = {
    "nvidia-cuda-dev": (
        "./usr/include/*",
        "./usr/lib/*/libcudart*",
        "./usr/lib/*/libcudadevrt.a",
        "./usr/lib/*/libculibos.a",
        "./usr/lib/*/libnvvm.so",
        "./usr/lib/*/stubs/*",
        "./usr/share/doc/*",
    )
}
TOOLS = ("ptxas", "nvlink", "fatbinary", "cudafe++", "bin2c", "cuobjdump", "nvdisasm", "nvprune", "cu++filt")
# NVIDIA's nvcc.profile, less the targets/<triple> level that Debian's flat include/ and lib64/ do not have.
# Relative to the nvcc binary (_HERE_), so the folder may move.
PROFILE = """\
# CUDA {cuda} from Debian {suite} (python -m ci toolkit): paths relative to this folder, as NVIDIA's own.
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""
# bin/nvcc where the PATH's gcc is too new for nvcc. nvcc.profile's PATH does not reach nvcc's first probe of the
# host compiler (nvcc fails with "Failed to preprocess host compiler properties"), so, as Debian's /usr/bin/nvcc
# does, a script puts the links of ccbin/ first on PATH and runs the real nvcc, which finds its profile beside it.
WRAPPER = """\
#!/bin/sh
# nvcc {cuda} accepts GCC up to {newest}, and this machine's gcc is newer: ccbin/ links gcc and g++ to GCC {n}.
# nvcc calls gcc and g++ from PATH; nvcc -ccbin still picks another host compiler.
here=$(dirname "$(readlink -f "$0")")
PATH="$here/../ccbin:$PATH" exec "$here/nvcc.bin" "$@"
"""
# The self-check's source: CUB's block reduction, and a host function the shared library exports.
CHECK_SOURCE = """\
#include <cub/cub.cuh>
__global__ void block_sum(const int *in, int *out) {
  using Reduce = cub::BlockReduce<int, 128>;
  __shared__ typename Reduce::TempStorage scratch;
  int sum = Reduce(scratch).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = sum;
}
extern "C" int launch_block_sum(const int *in, int *out) {
  block_sum<<<1, 128>>>(in, out);
  return (int)cudaGetLastError();
}
"""


class ToolkitError(RuntimeError):
    """A missing program, a failed download or unpack, or a toolkit that fails its self-check."""

    exit_code = 1


def default_dest(cuda):
    """$XDG_CACHE_HOME/prerast/toolkits/cuda-<cuda> (~/.cache/prerast/...): beside prerast's build cache."""
    from prerast_meta import platforms

    return os.path.join(platforms.default_cache_dir("linux"), "toolkits", f"cuda-{cuda}")


def apt_entries(etc="/etc/apt"):
    """(type, uri) of every enabled entry of apt's sources: one-line .list files and deb822 .sources files."""
    entries = []
    for path in [os.path.join(etc, "sources.list")] + sorted(glob.glob(os.path.join(etc, "sources.list.d", "*"))):
        if not os.path.isfile(path) or not path.endswith((".list", ".sources")):
            continue  # apt reads no other names (.disabled, .save, ...)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if path.endswith(".list"):
            for line in text.splitlines():
                words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 2:
                    entries.append((words[0], words[1]))
            continue
        for paragraph in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", paragraph, re.M))
            if fields.get("Enabled", "yes").lower() == "no":
                continue
            for kind in fields.get("Types", "").split():
                entries += [(kind, uri) for uri in fields.get("URIs", "").split()]
    return entries


def debian_mirror(etc="/etc/apt"):
    """The Debian archive mirror this machine's apt uses (the first deb URI whose path ends in /debian, as
    deb.debian.org/debian and every mirror's does; not debian-security, a snapshot or another vendor's), else
    deb.debian.org."""
    for kind, uri in apt_entries(etc):
        if kind == "deb" and urllib.parse.urlparse(uri).path.rstrip("/").endswith("/debian"):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def sources_line(mirror, suite, keyring=KEYRING):
    """The one line of our sources file: the suite's three components, checked against Debian's keyring."""
    return f"deb [signed-by={keyring}] {mirror} {suite} main contrib non-free\n"


def apt_options(state):
    """apt-get's -o options that confine it to `state`: our sources file only, its own lists and cache, and no
    pin of the machine's (a preferences file pinning bookworm must not hide trixie's packages)."""
    options = {
        "Dir::Etc::SourceList": os.path.join(state, "sources.list"),
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": "/dev/null",
        "Dir::State::Lists": os.path.join(state, "lists"),
        "Dir::Cache": os.path.join(state, "cache"),
    }
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # As root apt downloads as the user _apt, who cannot write our folders: it would warn and do it as root.
        options["APT::Sandbox::User"] = "root"
    return [arg for name, value in options.items() for arg in ("-o", f"{name}={value}")]


def _run(argv, step, cwd=None, env=None):
    """Run argv; its output, or a ToolkitError naming the step and the end of what it printed."""
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    except OSError as e:
        raise ToolkitError(f"{step}: cannot run {argv[0]}: {e}") from e
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise ToolkitError(f"{step} failed (exit {out.returncode}): {' '.join(argv)}\n{tail}")
    return out.stdout + out.stderr


def require_programs():
    missing = [p for p in ("apt-get", "dpkg-deb", "tar") if not shutil.which(p)]
    if missing:
        raise ToolkitError(f"{', '.join(missing)} not found: this command needs a Debian or Ubuntu machine's apt")
    if not os.path.exists(KEYRING):
        raise ToolkitError(f"{KEYRING} not found: install the debian-archive-keyring package")


def download(state, folder, suite, mirror):
    """apt-get update with our sources, then apt-get download of PACKAGES into `folder`: their .deb paths."""
    for sub in ("lists/partial", "cache/archives/partial", folder):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    with open(os.path.join(state, "sources.list"), "w") as f:
        f.write(sources_line(mirror, suite))
    # apt-get update exits 0 when it cannot reach the mirror; its warnings explain a download that then fails.
    said = _run(["apt-get", *apt_options(state), "update"], f"apt-get update ({mirror} {suite})")
    warnings = "\n".join(line for line in said.splitlines() if line.startswith(("W:", "E:", "Err:")))
    try:
        _run(["apt-get", *apt_options(state), "download", *PACKAGES], "apt-get download", cwd=folder)
    except ToolkitError as e:
        if not warnings:
            raise
        raise ToolkitError(f"apt-get update could not read {mirror} {suite} (no network?):\n{warnings}\n{e}") from None
    debs = {}
    for path in glob.glob(os.path.join(folder, "*.deb")):
        debs[os.path.basename(path).split("_", 1)[0]] = path
    missing = [p for p in PACKAGES if p not in debs]
    if missing:
        raise ToolkitError(f"apt-get download left no .deb of {', '.join(missing)} in {folder}")
    return [debs[p] for p in PACKAGES]


def deb_field(deb, field):
    return _run(["dpkg-deb", "-f", deb, field], f"reading {os.path.basename(deb)}").strip()


def extract(deb, root):
    """Unpack a .deb into `root`: dpkg -x's work, as dpkg-deb piped into tar, so that MEMBERS picks parts."""
    members = MEMBERS.get(deb_field(deb, "Package"), ())
    tar = ["tar", "-x", "-C", root] + (["--wildcards", *members] if members else [])
    step = f"unpacking {os.path.basename(deb)}"
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE) as feed:
        out = subprocess.run(tar, stdin=feed.stdout, capture_output=True, text=True)
        feed.stdout.close()
    if feed.returncode or out.returncode:
        raise ToolkitError(f"{step} failed (dpkg-deb exit {feed.returncode}, tar exit {out.returncode}): {out.stderr}")


def gcc_major(program):
    """The major version of a gcc on PATH (`gcc`, `gcc-13`), None where there is none."""
    try:
        out = subprocess.run([program, "-dumpversion"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    m = re.match(r"(\d+)", out.stdout.strip())
    return int(m.group(1)) if out.returncode == 0 and m else None


def host_compiler(newest, which=shutil.which, major=gcc_major):
    """None where the PATH's gcc and g++ are ones nvcc accepts (it compiles with gcc and links with g++ from its
    PATH); else N of the newest gcc-N/g++-N pair on PATH with N <= newest, for pin_host_compiler."""
    default = {name: major(name) for name in ("gcc", "g++")}
    if all(v is not None and v <= newest for v in default.values()):
        return None
    for n in range(newest, 5, -1):
        if which(f"gcc-{n}") and which(f"g++-{n}"):
            return n
    have = ", ".join(f"{name} {v}" if v else f"no {name}" for name, v in default.items())
    raise ToolkitError(
        f"nvcc needs a host GCC of version {newest} or older; the PATH has {have} and no gcc-N/g++-N pair with "
        f"N <= {newest}: install one (apt-get install g++-{newest}, or g++-12)"
    )


def _copy(src, dst):
    """Copy a file (a link stays a link: libcudart.so -> libcudart.so.12) or a folder into dst's folder."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.isdir(src) and not os.path.islink(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def assemble(root, home, cuda, suite):
    """NVIDIA's layout in `home` from the packages unpacked in `root`. Every binary is copied: nvcc finds its
    nvcc.profile, and the profile its tools, beside its own path, which a link would send back into `root`."""
    usr = os.path.join(root, "usr")
    libs = glob.glob(os.path.join(usr, "lib", "*-linux-gnu", "libcudart.so"))
    if not libs:
        raise ToolkitError(f"the packages unpacked in {root} hold no usr/lib/<multiarch>/libcudart.so")
    multiarch = os.path.dirname(libs[0])
    debian = os.path.join(usr, "lib", "nvidia-cuda-toolkit")
    pieces = [
        (os.path.join(debian, "bin", "nvcc"), "bin/nvcc"),  # usr/bin/nvcc is Debian's wrapper script
        (os.path.join(debian, "bin", "crt"), "bin/crt"),  # link.stub, prelink.stub: nvcc -dlink's
        (os.path.join(debian, "bin", "cicc"), "nvvm/bin/cicc"),
        (os.path.join(debian, "libdevice"), "nvvm/libdevice"),
        (os.path.join(usr, "include", "nvvm.h"), "nvvm/include/nvvm.h"),
        (os.path.join(usr, "include"), "include"),  # CUDA's headers and CCCL's: cub, thrust, cuda/std, nv
        (os.path.join(multiarch, "stubs"), "lib64/stubs"),
    ]
    pieces += [(os.path.join(usr, "bin", tool), f"bin/{tool}") for tool in TOOLS]
    for pattern, sub in (("libnvvm.so*", "nvvm/lib64"), ("libcudart*", "lib64")):
        pieces += [(p, f"{sub}/{os.path.basename(p)}") for p in glob.glob(os.path.join(multiarch, pattern))]
    pieces += [(os.path.join(multiarch, lib), f"lib64/{lib}") for lib in ("libcudadevrt.a", "libculibos.a")]
    # NVIDIA's licence and Debian's copyright notes travel with the binaries.
    for notice in glob.glob(os.path.join(usr, "share", "doc", "*", "copyright")):
        pieces.append((notice, os.path.relpath(notice, usr)))
    for src, rel in pieces:
        if not os.path.lexists(src):
            raise ToolkitError(f"the packages unpacked in {root} lack {os.path.relpath(src, root)}")
        _copy(src, os.path.join(home, rel))
    os.remove(os.path.join(home, "include", "nvvm.h"))  # nvvm/include's, as NVIDIA lays it out
    with open(os.path.join(home, "bin", "nvcc.profile"), "w") as f:
        f.write(PROFILE.format(cuda=cuda, suite=suite))


def pin_host_compiler(home, cuda, n):
    """Make nvcc use gcc-N and g++-N: links in ccbin/ (not bin/, where a gcc would shadow the system's for
    whoever puts bin/ on PATH), the real nvcc moved to bin/nvcc.bin and bin/nvcc the WRAPPER script."""
    links = os.path.join(home, "ccbin")
    os.makedirs(links, exist_ok=True)
    for name in ("gcc", "g++"):
        link = os.path.join(links, name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(shutil.which(f"{name}-{n}"), link)
    nvcc = os.path.join(home, "bin", "nvcc")
    if not os.path.exists(nvcc + ".bin"):
        os.rename(nvcc, nvcc + ".bin")
    with open(nvcc, "w") as f:
        f.write(WRAPPER.format(cuda=cuda, newest=SUITES[cuda][1], n=n))
    os.chmod(nvcc, 0o755)


def check(home, work, cuda):
    """The self-check: nvcc's version, an object for sm_80 that includes CUB, a shared library linked against
    cudart. Returns nvcc's version line; a ToolkitError names the step that failed."""
    nvcc = os.path.join(home, "bin", "nvcc")
    # The caller's extra nvcc flags (a -ccbin, a -gencode) would check their choice, not the toolkit.
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")}
    version = _run([nvcc, "--version"], "self-check: nvcc --version", env=env)
    line = next((x for x in version.splitlines() if "release" in x), version.strip())
    if f"release {cuda}," not in line:
        raise ToolkitError(f"self-check: {nvcc} says {line!r}, not CUDA {cuda}")
    os.makedirs(work, exist_ok=True)
    source = os.path.join(work, "check.cu")
    with open(source, "w") as f:
        f.write(CHECK_SOURCE)
    obj, lib = os.path.join(work, "check.o"), os.path.join(work, "libcheck.so")
    _run([nvcc, "-c", "-arch=sm_80", source, "-o", obj], "self-check: compiling CUB for sm_80", work, env)
    link = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-arch=sm_80", "--cudart", "shared", source, "-o", lib]
    _run(link, "self-check: linking a shared library against cudart", work, env)
    return line.strip()


def host_compiler_text(home, ccbin):
    gcc = os.path.join(home, "ccbin", "gcc") if ccbin else shutil.which("gcc")
    out = subprocess.run([gcc, "--version"], capture_output=True, text=True)
    return f"{out.stdout.splitlines()[0] if out.stdout else '?'} ({os.path.realpath(gcc)})"


def complete(dest, cuda):
    """The marker's record where dest holds a complete toolkit of `cuda`, else None."""
    try:
        with open(os.path.join(dest, MARKER)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    ok = record.get("cuda") == cuda and os.path.isfile(os.path.join(dest, "bin", "nvcc"))
    return record if ok else None


def _remove_dead_partials(dest):
    """DIR.partial-<pid> folders of runs that died (no process of that pid is left)."""
    for path in glob.glob(glob.escape(dest) + ".partial-*"):
        pid = path.rsplit("-", 1)[1]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, OSError):
            pass


def install(cuda, dest, mirror=None, log=print):
    """The toolkit of `cuda` in dest, made unless complete already: the marker's record."""
    record = complete(dest, cuda)
    if record:
        log(f"CUDA {cuda} from Debian {record['suite']} is complete in {dest}")
        return record
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise ToolkitError(f"{dest} exists and holds no complete toolkit ({MARKER}): remove it or give another --dest")
    require_programs()
    suite, newest_gcc = SUITES[cuda]
    ccbin = host_compiler(newest_gcc)
    mirror = mirror or debian_mirror()
    _remove_dead_partials(dest)
    partial = f"{dest}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    work = os.path.join(partial, ".work")
    started = time.monotonic()
    try:
        log(f"downloading {' '.join(PACKAGES)} from {mirror} {suite}")
        debs = download(os.path.join(work, "apt"), os.path.join(work, "debs"), suite, mirror)
        size = sum(os.path.getsize(d) for d in debs)
        versions = {deb_field(d, "Package"): deb_field(d, "Version") for d in debs}
        if not versions[TOOL].startswith(cuda + "."):
            raise ToolkitError(f"Debian {suite}'s {TOOL} is {versions[TOOL]}, not CUDA {cuda}")
        log(f"downloaded {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s; unpacking")
        root = os.path.join(work, "root")
        os.makedirs(root)
        for deb in debs:
            extract(deb, root)
        log(f"unpacked in {time.monotonic() - started:.0f} s; assembling and checking")
        assemble(root, partial, cuda, suite)
        if ccbin:
            pin_host_compiler(partial, cuda, ccbin)
        nvcc = check(partial, os.path.join(work, "check"), cuda)
        record = {
            "cuda": cuda,
            "suite": suite,
            "mirror": mirror,
            "packages": versions,
            "download_bytes": size,
            "nvcc": nvcc,
            "host_compiler": host_compiler_text(partial, ccbin),
        }
        shutil.rmtree(work)
        with open(os.path.join(partial, MARKER), "w") as f:
            json.dump(record, f, indent=2, sort_keys=True)
        # The whole toolkit appears at once. A run beside this one may have finished first: its toolkit stays.
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.rename(partial, dest)  # over an empty folder, as rename(2) allows
        except OSError as e:
            if not complete(dest, cuda):
                raise ToolkitError(f"cannot move the toolkit from {partial} to {dest}: {e}") from e
            shutil.rmtree(partial)
            record = complete(dest, cuda)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    elapsed = time.monotonic() - started
    log(f"CUDA {cuda} ({nvcc}) in {dest} after {elapsed:.0f} s; host compiler {record['host_compiler']}")
    return record


def ensure(cuda, dest=None, log=print):
    """CUDA_HOME of the toolkit of `cuda` (made at dest, default default_dest, unless complete there already)."""
    dest = dest or default_dest(cuda)
    install(cuda, dest, log=log)
    return dest


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci toolkit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cuda", required=True, help=f"the CUDA version: {', '.join(SUITES)}")
    p.add_argument("--dest", help="the toolkit folder, CUDA_HOME (default: ~/.cache/prerast/toolkits/cuda-<cuda>)")
    p.add_argument("--mirror", help="the Debian mirror (default: the one this machine's apt uses, else deb.debian.org)")
    a = p.parse_args(argv)
    if a.cuda not in SUITES:
        carried = ", ".join(f"CUDA {c} (Debian {s})" for c, (s, _) in SUITES.items())
        print(
            f"toolkit: Debian carries {carried}, not CUDA {a.cuda}; CI installs NVIDIA's own toolkits "
            "(ci/manylinux_setup.sh from NVIDIA's RHEL repository, python -m ci toolkit-redist from its "
            "redistributable archives)",
            file=sys.stderr,
        )
        return 2
    dest = os.path.abspath(os.path.expanduser(a.dest or default_dest(a.cuda)))
    try:
        install(a.cuda, dest, a.mirror, log=lambda text: print(text, file=sys.stderr))
    except ToolkitError as e:
        print(f"toolkit: {e}", file=sys.stderr)
        return ToolkitError.exit_code
    print(dest)  # the only line on stdout: CUDA_HOME=$(python -m ci toolkit --cuda 12.4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
