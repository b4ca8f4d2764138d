"""`python -m ci toolkit --cuda 12.4`: CUDA 12.4 from Debian trixie's packages into a private CUDA_HOME.

The unmarked tests need no network and no toolkit: the sources file, apt's options (checked by apt-config where
there is one), the mirror read from apt's sources, the host compiler's choice, the unpacking of a small .deb made
here, the version refusal, the marker's short cut. The slow ones download the toolkit for real (about 1 GB, once:
into the default folder, ~/.cache/prerast/toolkits/cuda-12.4, which later runs find complete) and build with it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import __main__ as ci_main
from ci.toolkit import debian  # noqa: E402

CUDA = "12.4"


def write(path, text, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if mode:
        os.chmod(path, mode)
    return path


def test_sources_line_names_trixie_non_free_signed_by_debians_keyring():
    line = debian.sources_line("http://ftp.de.debian.org/debian", "trixie")
    assert line == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://ftp.de.debian.org/debian trixie main contrib non-free\n"
    )
    assert debian.SUITES[CUDA][0] == "trixie"


def test_apt_options_confine_apt_to_its_own_folder(tmp_path):
    state = str(tmp_path / "apt")
    options = debian.apt_options(state)
    assert options[::2] == ["-o"] * (len(options) // 2)
    given = dict(o.split("=", 1) for o in options[1::2])
    assert given["Dir::Etc::SourceList"] == os.path.join(state, "sources.list")
    assert given["Dir::State::Lists"] == os.path.join(state, "lists")
    assert given["Dir::Cache"] == os.path.join(state, "cache")
    # Nothing of the machine's own sources or pins.
    for name in ("Dir::Etc::SourceParts", "Dir::Etc::Preferences", "Dir::Etc::PreferencesParts"):
        assert given[name] == "/dev/null"
    assert ("APT::Sandbox::User" in given) is (os.geteuid() == 0)
    if shutil.which("apt-config"):  # apt itself reads them so
        dump = subprocess.run(["apt-config", *options, "dump"], capture_output=True, text=True, check=True).stdout
        lines = dump.lower().splitlines()  # apt's names are case-blind; it dumps some in lower case
        for name, value in given.items():
            assert f'{name} "{value}";'.lower() in lines, name


def test_mirror_is_the_debian_archive_of_apts_sources(tmp_path):
    etc = tmp_path / "apt"
    write(str(etc / "sources.list"), "# deb http://old.example/debian bookworm main\n")
    write(
        str(etc / "sources.list.d" / "a-vendor.list"),
        "deb [arch=amd64 signed-by=/k.gpg] https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n",
    )
    write(str(etc / "sources.list.d" / "b.list.disabled"), "deb http://disabled.example/debian bookworm main\n")
    write(
        str(etc / "sources.list.d" / "debian.sources"),
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\nComponents: main\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://ftp.fr.debian.org/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n",
    )
    assert debian.debian_mirror(str(etc)) == "http://ftp.fr.debian.org/debian"
    os.remove(etc / "sources.list.d" / "debian.sources")
    assert debian.debian_mirror(str(etc)) == debian.DEFAULT_MIRROR  # no Debian archive: Debian's own redirector


def test_host_compiler_is_the_paths_gcc_where_nvcc_accepts_it():
    which = lambda name: f"/usr/bin/{name}" if name in ("gcc-11", "g++-11", "gcc-13", "g++-13", "gcc-12") else None
    assert debian.host_compiler(13, which, major=lambda name: 12) is None
    # Too new: the newest gcc-N with its g++-N that nvcc accepts.
    assert debian.host_compiler(13, which, major=lambda name: 14) == 13
    assert debian.host_compiler(12, which, major=lambda name: 14) == 11  # gcc-12 has no g++-12 here
    # A gcc without a g++ is no host compiler: nvcc links with g++.
    assert debian.host_compiler(13, which, major=lambda name: 12 if name == "gcc" else None) == 13
    with pytest.raises(debian.ToolkitError, match=r"GCC of version 13 or older.*gcc 15, g\+\+ 15.*g\+\+-13"):
        debian.host_compiler(13, lambda name: None, major=lambda name: 15)


def test_pinned_host_compiler_comes_first_on_nvccs_path(tmp_path, monkeypatch):
    """Where the PATH's gcc is too new, bin/nvcc is a script that puts ccbin/ (gcc-N, g++-N) first on PATH and
    runs the real nvcc, moved to bin/nvcc.bin beside nvcc.profile. A stand-in nvcc.bin prints what it got."""
    tools = tmp_path / "tools"
    for name in ("gcc-13", "g++-13"):
        write(str(tools / name), "#!/bin/sh\necho 13\n", 0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "cuda"
    write(str(home / "bin" / "nvcc"), '#!/bin/sh\necho "$PATH"\necho "$@"\n', 0o755)
    debian.pin_host_compiler(str(home), CUDA, 13)
    debian.pin_host_compiler(str(home), CUDA, 13)  # again: the real nvcc stays where the first moved it
    assert os.readlink(home / "ccbin" / "gcc") == str(tools / "gcc-13")
    assert os.readlink(home / "ccbin" / "g++") == str(tools / "g++-13")
    assert "exec" in (home / "bin" / "nvcc").read_text()
    out = subprocess.run([str(home / "bin" / "nvcc"), "-c", "x.cu"], capture_output=True, text=True, check=True)
    path, args = out.stdout.splitlines()
    assert os.path.realpath(path.split(os.pathsep)[0]) == str(home / "ccbin")
    assert args == "-c x.cu"


@pytest.mark.skipif(not shutil.which("dpkg-deb") or not shutil.which("tar"), reason="needs dpkg-deb and tar")
def test_unpacking_takes_only_the_toolkits_part_of_nvidia_cuda_dev(tmp_path):
    """A small nvidia-cuda-dev made here: the toolkit needs its headers and cudart, not the CUDA libraries."""
    tree = tmp_path / "pkg"
    control = "Package: nvidia-cuda-dev\nVersion: 12.4.0-1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n"
    write(str(tree / "DEBIAN" / "control"), control)
    wanted = [
        "usr/include/cuda_runtime.h",
        "usr/lib/x86_64-linux-gnu/libcudart_static.a",
        "usr/lib/x86_64-linux-gnu/libcudadevrt.a",
        "usr/lib/x86_64-linux-gnu/libculibos.a",
        "usr/lib/x86_64-linux-gnu/libnvvm.so",
        "usr/lib/x86_64-linux-gnu/stubs/libcuda.so",
        "usr/share/doc/nvidia-cuda-dev/copyright",
    ]
    for rel in wanted + ["usr/lib/x86_64-linux-gnu/libcublas_static.a"]:
        write(str(tree / rel), rel)
    deb = str(tmp_path / "nvidia-cuda-dev_12.4.0-1_all.deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), deb], capture_output=True, check=True)
    assert debian.deb_field(deb, "Package") == "nvidia-cuda-dev"
    root = tmp_path / "root"
    root.mkdir()
    debian.extract(deb, str(root))
    got = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)
    assert got == sorted(wanted)
    with pytest.raises(debian.ToolkitError, match="unpacking"):
        debian.extract(str(tmp_path / "missing.deb"), str(root))


def test_an_unreachable_mirror_is_named_with_apts_warnings(tmp_path, monkeypatch):
    """apt-get update exits 0 when it reads no list; the failed download then says why."""
    said = "Err:1 http://x.example/debian trixie InRelease\nW: Failed to fetch http://x.example/debian/dists/...\n"

    def run(argv, step, cwd=None, env=None):
        if "update" in argv:
            return said
        raise debian.ToolkitError("apt-get download failed (exit 100): E: Unable to locate package nvidia-cuda-dev")

    monkeypatch.setattr(debian, "_run", run)
    with pytest.raises(debian.ToolkitError) as e:
        debian.download(str(tmp_path / "apt"), str(tmp_path / "debs"), "trixie", "http://x.example/debian")
    assert str(e.value).startswith("apt-get update could not read http://x.example/debian trixie (no network?)")
    assert "W: Failed to fetch" in str(e.value) and "Unable to locate package" in str(e.value)
    assert (tmp_path / "apt" / "sources.list").read_text() == debian.sources_line("http://x.example/debian", "trixie")


@pytest.mark.parametrize(
    "fails, step",
    [("-c", "compiling CUB for sm_80"), ("-shared", "linking a shared library against cudart"), ("", "says")],
)
def test_the_self_check_names_the_step_that_failed(tmp_path, fails, step):
    """A stand-in nvcc that fails one step (or says another release)."""
    release = "12.4" if fails else "12.3"
    nvcc = f"""#!/bin/sh
[ "$1" = --version ] && {{ echo "Cuda compilation tools, release {release}, V{release}.131"; exit 0; }}
[ -n "{fails}" ] && [ "$1" = "{fails}" ] && {{ echo "nvcc fatal : it broke" >&2; exit 1; }}
exit 0
"""
    home = tmp_path / "cuda"
    write(str(home / "bin" / "nvcc"), nvcc, 0o755)
    with pytest.raises(debian.ToolkitError, match=f"self-check.*{step}") as e:
        debian.check(str(home), str(tmp_path / "work"), CUDA)
    assert ("it broke" in str(e.value)) is bool(fails)


def test_other_cuda_versions_are_refused_with_exit_2(capsys):
    assert debian.main(["--cuda", "12.6"]) == 2
    err = capsys.readouterr().err
    assert "Debian carries CUDA 12.4 (Debian trixie), not CUDA 12.6" in err
    assert "toolkit-redist" in err and "ci/manylinux_setup.sh" in err


def test_a_complete_toolkit_is_returned_at_once(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "cuda-12.4"
    write(str(dest / "bin" / "nvcc"), "", 0o755)
    write(str(dest / debian.MARKER), json.dumps({"cuda": CUDA, "suite": "trixie"}))
    monkeypatch.setattr(debian, "download", lambda *a: pytest.fail("a complete toolkit downloaded again"))
    assert ci_main.main(["toolkit", "--cuda", CUDA, "--dest", str(dest)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(dest)]  # stdout: the path alone


def test_a_folder_that_is_no_toolkit_of_ours_is_left_alone(tmp_path, capsys):
    dest = tmp_path / "mine"
    write(str(dest / "notes.txt"), "keep")
    write(str(dest / debian.MARKER), json.dumps({"cuda": "11.8"}))  # another version's marker: not complete
    assert debian.main(["--cuda", CUDA, "--dest", str(dest)]) == 1
    assert "holds no complete toolkit" in capsys.readouterr().err
    assert (dest / "notes.txt").read_text() == "keep"


def test_default_folder_is_under_the_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert debian.default_dest(CUDA) == os.path.join(str(tmp_path), "prerast", "toolkits", "cuda-12.4")
    assert ci_main.COMMANDS["toolkit"][0] == "ci.toolkit.debian:main"


# ---- for real: the download, and builds with the toolkit ----

KERNEL = """\
#include <cub/cub.cuh>
#include <thrust/device_vector.h>
#include <cuda/std/atomic>
__global__ void scale(float *x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
extern "C" void scale_all(float *x, float s, int n) { scale<<<(n + 255) / 256, 256>>>(x, s, n); }
"""
# sm_75 and sm_90 machine code, compute_90 PTX.
GENCODE = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


def _reachable(url):
    parts = urllib.parse.urlparse(url)
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), 10).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def cuda_home():
    """The toolkit in its default folder, made by the command unless a run before made it."""
    dest = debian.default_dest(CUDA)
    if not debian.complete(dest, CUDA):
        missing = [p for p in ("apt-get", "dpkg-deb", "tar") if not shutil.which(p)]
        if missing or not os.path.exists(debian.KEYRING):
            pytest.skip(f"needs a Debian machine's apt: no {', '.join(missing) or debian.KEYRING}")
        mirror = debian.debian_mirror()
        if not _reachable(mirror):
            pytest.skip(f"no network: the Debian mirror {mirror} is unreachable")
    cmd = [sys.executable, "-m", "ci", "toolkit", "--cuda", CUDA]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == dest
    started = time.monotonic()  # a second run finds the marker
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == dest, again.stderr
    assert time.monotonic() - started < 15
    return dest


def _build(cuda_home, folder, env=None):
    source = write(os.path.join(folder, "kernel.cu"), KERNEL)
    lib = os.path.join(folder, "libkernel.so")
    nvcc = [os.path.join(cuda_home, "bin", "nvcc"), "-shared", "-Xcompiler", "-fPIC", *GENCODE, "--cudart", "shared"]
    out = subprocess.run([*nvcc, source, "-o", lib], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return lib


@pytest.mark.slow
def test_toolkit_has_nvidias_layout_and_builds_the_archs(cuda_home, tmp_path):
    for rel in (
        "bin/nvcc",
        "bin/nvcc.profile",
        "bin/ptxas",
        "bin/cuobjdump",
        "nvvm/bin/cicc",
        "nvvm/libdevice/libdevice.10.bc",
        "include/cuda_runtime.h",
        "include/cub/cub.cuh",
        "include/thrust/version.h",
        "include/cuda/std/atomic",
        "lib64/libcudart.so",
        "lib64/libcudart_static.a",
        "lib64/libcudadevrt.a",
    ):
        assert os.path.exists(os.path.join(cuda_home, rel)), rel
    with open(os.path.join(cuda_home, debian.MARKER)) as f:
        record = json.load(f)
    assert record["packages"]["nvidia-cuda-toolkit"].startswith("12.4.")
    assert "release 12.4," in record["nvcc"]
    lib = _build(cuda_home, str(tmp_path))
    cuobjdump = os.path.join(cuda_home, "bin", "cuobjdump")
    elf = subprocess.run([cuobjdump, "--list-elf", lib], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", lib], capture_output=True, text=True, check=True).stdout
    assert ".sm_75.cubin" in elf and ".sm_90.cubin" in elf, elf
    assert ".sm_90.ptx" in ptx and ".sm_75.ptx" not in ptx, ptx


@pytest.mark.slow
def test_a_too_new_gcc_on_path_is_passed_over(cuda_home, tmp_path):
    """A copy of the toolkit pinned to this machine's gcc-N builds while a `gcc` that nvcc would refuse comes
    first on PATH (a stand-in that says 14 and fails when compiling)."""
    try:
        n = debian.host_compiler(debian.SUITES[CUDA][1], major=lambda name: 99)  # as if gcc were too new
    except debian.ToolkitError:
        pytest.skip("needs a gcc-N and g++-N on PATH that nvcc 12.4 accepts")
    home = str(tmp_path / "cuda")
    shutil.copytree(cuda_home, home, symlinks=True)
    debian.pin_host_compiler(home, CUDA, n)
    fake = tmp_path / "fake"
    for name in ("gcc", "g++"):
        write(str(fake / name), '#!/bin/sh\n[ "$1" = -dumpversion ] && { echo 14; exit 0; }\nexit 1\n', 0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "out").mkdir()
    _build(home, str(tmp_path / "out"), env)
    if os.path.exists(os.path.join(cuda_home, "ccbin")):
        return  # this machine's toolkit is pinned itself
    # The unpinned toolkit calls the stand-in: what the pin avoids.
    out = subprocess.run(
        [os.path.join(cuda_home, "bin", "nvcc"), "-c", "-arch=sm_80", str(tmp_path / "out" / "kernel.cu")],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    assert out.returncode != 0
