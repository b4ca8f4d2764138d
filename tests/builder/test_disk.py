"""Each smoke job's disk need (python -m ci preflight --disk, ci/matrix/disk.py) from a fake index: a folder of
small real wheels whose METADATA lists its dependencies with markers, so that what a target installs is resolved as
the target's pip would (markers evaluated for the target, not for this machine) and its size read from the files."""

import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.matrix import cibw, disk, parts, preflight  # noqa: E402

MIB = 1024**2
TORCH = "2.14.1"
# torch's dependencies as its real METADATA gives them: CUDA wheels on Linux only, triton on Linux x86-64 only.
TORCH_REQUIRES = [
    "filelock<4",
    "nvidia-big==1.0; platform_system == 'Linux'",
    "triton==3.0; platform_system == 'Linux' and platform_machine == 'x86_64'",
    "sympy>=1; python_version >= '3.9'",
    "opt-einsum>=3.3; extra == 'opt-einsum'",
]


def fake_wheel(folder, filename, unpacked_mib, requires=()):
    """A wheel whose one payload member unpacks to `unpacked_mib` MiB of zeros (deflated: a small download)."""
    project, version = filename.split("-")[:2]
    dist = f"{project}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    path = os.path.join(folder, filename)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{project}/payload.bin", bytes(unpacked_mib * MIB))
        z.writestr(f"{dist}/METADATA", meta)
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\n")
    with zipfile.ZipFile(path) as z:
        return sum(i.file_size for i in z.infolist())


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """(folder, {filename: unpacked bytes}) of a fake PyPI for the four targets."""
    folder = str(tmp_path_factory.mktemp("pypi"))
    sizes = {}
    for plat in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "win_amd64", "macosx_14_0_arm64"):
        name = f"torch-{TORCH}-cp312-cp312-{plat}.whl"
        sizes[name] = fake_wheel(folder, name, 6, TORCH_REQUIRES)
        # An older torch and a Python 3.13-only numpy: neither is what the smoke job gets.
        sizes[f"torch-2.13.0-cp312-cp312-{plat}.whl"] = fake_wheel(folder, f"torch-2.13.0-cp312-cp312-{plat}.whl", 1)
        sizes[f"numpy-2.0-cp312-cp312-{plat}.whl"] = fake_wheel(folder, f"numpy-2.0-cp312-cp312-{plat}.whl", 2)
        sizes[f"numpy-2.1-cp313-cp313-{plat}.whl"] = fake_wheel(folder, f"numpy-2.1-cp313-cp313-{plat}.whl", 1)
    for machine in ("x86_64", "aarch64"):
        name = f"nvidia_big-1.0-py3-none-manylinux_2_27_{machine}.whl"
        sizes[name] = fake_wheel(folder, name, 20)
    sizes["triton-3.0-cp312-cp312-manylinux_2_28_x86_64.whl"] = fake_wheel(
        folder, "triton-3.0-cp312-cp312-manylinux_2_28_x86_64.whl", 4
    )
    for version in ("3.9", "3.10", "4.0"):  # torch asks for filelock<4: 3.10 (newer than 3.9, though sorted lower)
        name = f"filelock-{version}-py3-none-any.whl"
        sizes[name] = fake_wheel(folder, name, 1)
    sizes["sympy-1.0-py3-none-any.whl"] = fake_wheel(folder, "sympy-1.0-py3-none-any.whl", 3, ["mpmath>=1"])
    sizes["mpmath-1.3-py3-none-any.whl"] = fake_wheel(folder, "mpmath-1.3-py3-none-any.whl", 1)
    sizes["opt_einsum-3.3-py3-none-any.whl"] = fake_wheel(folder, "opt_einsum-3.3-py3-none-any.whl", 1)
    return folder, sizes


EXPECTED = {
    "linux-x86_64": {"torch", "numpy", "nvidia_big", "triton", "filelock-3.10", "sympy", "mpmath"},
    "linux-aarch64": {"torch", "numpy", "nvidia_big", "filelock-3.10", "sympy", "mpmath"},
    "windows-amd64": {"torch", "numpy", "filelock-3.10", "sympy", "mpmath"},
    "macos-arm64": {"torch", "numpy", "filelock-3.10", "sympy", "mpmath"},
}
ROWS = cibw.target_matrix(parts.select(parts.load(), published=True))["include"]


def test_each_target_installs_what_its_own_markers_and_tags_select(index):
    folder, sizes = index
    assert {r["target"] for r in ROWS} == set(EXPECTED) and {r["smoke_torch"] for r in ROWS} == {f"torch==={TORCH}"}
    needs = {n.job: n for n in disk.smoke_needs(ROWS, folder, preflight.target_platforms, offered={})}
    for target, expected in EXPECTED.items():
        need = needs[f"smoke {target}"]
        names = {w.filename for w in need.wheels}
        plat = preflight.target_platforms(matrix.targets()[target])
        assert {n.split("-")[0] if "filelock" not in n else "filelock-" + n.split("-")[1] for n in names} == expected
        # The newest torch asked for, the numpy of the smoke job's Python, each platform wheel the target's own.
        assert f"torch-{TORCH}-cp312-cp312-" in " ".join(names) and "numpy-2.0-cp312" in " ".join(names)
        assert all(n.endswith("-any.whl") or any(n.endswith(f"-{p}.whl") for p in plat) for n in names), names
        # The sizes: the files' own (download) and their members' (unpacked), summed independently here.
        assert sum(w.size for w in need.wheels) == sum(os.path.getsize(os.path.join(folder, n)) for n in names)
        assert sum(w.unpacked for w in need.wheels) == sum(sizes[n] for n in names)


def test_a_job_that_cannot_fit_fails_preflight_naming_it_and_the_numbers(index, capsys, monkeypatch):
    folder, _ = index
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    reserve = disk.budgets()["reserve"]
    needs = {n.job: n for n in disk.smoke_needs(ROWS, folder, preflight.target_platforms, offered={})}
    linux = needs["smoke linux-x86_64"]
    assert linux.total == pytest.approx(reserve + (linux.download + linux.unpacked))
    assert linux.unpacked * 1024 == pytest.approx(sum((6, 2, 20, 4, 1, 3, 1)), abs=0.01)  # MiB of the payloads
    # A Linux x86-64 runner offering less than the need, the others what ci/matrix.toml says.
    small = reserve + (linux.download + linux.unpacked) / 2
    assert preflight.disk_fits(True, False, folder, {"ubuntu-24.04": small}) is False
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("preflight: disk: smoke linux-x86_64")]
    assert line.endswith(f"the runner offers {small:g} GiB after making room: it cannot fit")
    assert f"needs {linux.total:.1f} GiB" in line and "nvidia_big-1.0-py3-none-manylinux_2_27_x86_64.whl" in line
    assert "::error title=preflight::disk: smoke linux-x86_64 on ubuntu-24.04" in out
    assert "smoke windows-amd64 on windows-2022: needs" in out and out.count("cannot fit") == 2  # line + annotation
    # Enough room: it passes.
    assert preflight.disk_fits(True, False, folder, {}) is True


def test_the_budgets_cover_every_runner_and_add_room_only_where_the_job_makes_it():
    table = disk.budgets()
    assert set(matrix.runners_in_use()) <= set(table["free"]) and set(table["room"]) <= set(table["free"])
    for target in matrix.targets().values():
        room = table["room"].get(target.runner, 0) if target.os == "linux" else 0
        assert disk.runner_budget(target) == table["free"][target.runner] + room
    assert any(disk.runner_budget(t) > table["free"][t.runner] for t in matrix.targets().values())


def test_an_index_without_the_build_stops_with_its_name(index, tmp_path):
    folder, _ = index
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(disk.DiskError, match=f"{empty} has no wheel of torch==={TORCH} for linux-x86_64"):
        disk.smoke_needs(ROWS[:1], str(empty), preflight.target_platforms, offered={})
    # preflight --disk says so and fails, without a traceback.
    out = subprocess.run(
        [sys.executable, "-m", "ci", "preflight", "--published", "--disk", "--cell", "2.13.0+cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--disk checks the smoke jobs of a selection" in out.stderr


def test_the_smoke_jobs_python_is_the_one_sized():
    yaml = pytest.importorskip("yaml")
    smoke = yaml.safe_load(open(os.path.join(ROOT, ".github", "workflows", "wheels.yml")))["jobs"]["smoke"]
    # The free-threaded Python's setup (Linux x86-64 only) installs the same torch release after the first venv is
    # removed (tests/builder/test_workflow.py): the job's peak is one torch, of the Python every row runs.
    (setup,) = [s for s in smoke["steps"] if s.get("uses", "").startswith("actions/setup-python@") and "if" not in s]
    assert setup["with"]["python-version"] == disk.SMOKE_PYTHON


def test_a_remote_wheel_is_sized_by_range_reads_of_its_directory(index):
    """RemoteFile against a server that answers byte ranges: the zip directory is read, not the whole file."""
    folder, sizes = index
    name = "nvidia_big-1.0-py3-none-manylinux_2_27_x86_64.whl"
    data = open(os.path.join(folder, name), "rb").read()
    asked = []

    class Answer:
        def __init__(self, start, end):
            self.status, self.body = 206, data[start : end + 1]
            self.headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}

        def read(self):
            return self.body

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def opener(request, timeout=None):
        start, _, end = request.get_header("Range").removeprefix("bytes=").partition("-")
        asked.append((int(start), int(end)))
        return Answer(int(start), int(end))

    index_ = disk.Index("https://example.invalid/simple", opener)
    assert index_.unpacked("https://example.invalid/" + name) == sizes[name]
    assert sum(e - s + 1 for s, e in asked) < len(data) / 4  # the directory, not the 20 MiB of zeros deflated
