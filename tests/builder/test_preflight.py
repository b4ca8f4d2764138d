"""`python -m ci preflight` against fake indexes (local folders of empty wheel files named as the real indexes name
them): pip reads only the names, so the real `pip index versions` answers without the network."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix
from ci.matrix import preflight  # noqa: E402
from prerast_meta import compat  # noqa: E402

CELLS = matrix.load()
FLOOR = compat.STABLE_FLOOR


def fake_index(folder, *wheels):
    folder.mkdir(parents=True, exist_ok=True)
    for name in wheels:
        (folder / name).write_bytes(b"")
    return str(folder)


def torch_wheel(version, python, plat="manylinux_2_28_x86_64", abi=None):
    tag = "cp" + python.replace(".", "")
    return f"torch-{version}-{tag}-{abi or tag}-{plat}.whl"


# How the two indexes name torch's Linux x86_64 wheels, as their file lists show, e.g.
#   download.pytorch.org/whl/cu124: torch-2.4.0+cu124-cp312-cp312-linux_x86_64.whl     (2.4, 2.5, 2.6 but cu126)
#   download.pytorch.org/whl/cu126: torch-2.6.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl   (and all from 2.7)
#   pypi.org/simple/torch:          torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl      (up to 2.6)
#                                   torch-2.7.0-cp312-cp312-manylinux_2_28_x86_64.whl  (from 2.7)
def pytorch_index_tag(release, platform):
    old = matrix._vkey(release)[:2] < (2, 6) or (matrix._vkey(release)[:2] == (2, 6) and platform != "cu126")
    return "linux_x86_64" if old else "manylinux_2_28_x86_64"


def pypi_tag(release):
    return "manylinux1_x86_64" if matrix._vkey(release)[:2] < (2, 7) else "manylinux_2_28_x86_64"


def published_indexes(root):
    """A fake PyPI (root/pypi) and PyTorch index (root/whl/<platform>) holding every build ci/published_builds.toml
    lists, for every patch release and Python of the matrix, with the real file names; next to them the files a
    real index also has and a cell must not take: free-threaded, aarch64 and Windows builds."""
    releases = matrix.releases()
    pythons = {matrix.minor(r["version"]): r["pythons"] for r in matrix._load_toml(matrix.MATRIX_FILE)["torch"]}
    for minor, platforms in matrix.published_builds().items():
        for release in releases[minor]["patches"]:
            for platform in platforms:
                tag = pytorch_index_tag(release, platform)
                names = [torch_wheel(f"{release}+{platform}", p, tag) for p in pythons[minor]]
                names += [
                    f"torch-{release}+{platform}-cp313-cp313t-{tag}.whl",
                    torch_wheel(f"{release}+{platform}", "3.12", "manylinux_2_28_aarch64"),
                    torch_wheel(f"{release}+{platform}", "3.12", "win_amd64"),
                ]
                fake_index(root / "whl" / platform, *names)
            names = [torch_wheel(release, p, pypi_tag(release)) for p in pythons[minor]]
            fake_index(root / "pypi", *names, torch_wheel(release, "3.12", "manylinux_2_28_aarch64"))
            add_other_targets(root, release, platforms, pythons[minor])
    return str(root / "pypi"), str(root / "whl" / "{platform}")


# The other targets' files, from the floor on, as the indexes name them: PyPI serves each target's `pypi` build as
# plain torch==X (torch-2.14.1-cp312-cp312-win_amd64.whl, torch-2.14.1-cp312-none-macosx_11_0_arm64.whl), PyTorch's
# index the others (torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_aarch64.whl). Next to them, builds for machines
# no target is: Windows on arm64, macOS on x86-64.
def add_other_targets(root, release, platforms, pythons, skip=()):
    if matrix._vkey(release)[:2] < FLOOR:
        return
    default = matrix.default_target()
    for target in matrix.targets().values():
        if target == default or target.name in skip:
            continue
        for platform in set(platforms) & set(target.platforms):
            if platform == target.pypi:
                abi = "none" if target.os == "macos" else None
                fake_index(root / "pypi", *[torch_wheel(release, p, target.plat, abi) for p in pythons])
            else:
                fake_index(
                    root / "whl" / platform, *[torch_wheel(f"{release}+{platform}", p, target.plat) for p in pythons]
                )
    fake_index(
        root / "pypi", torch_wheel(release, "3.12", "win_arm64"), torch_wheel(release, "3.12", "macosx_10_15_x86_64")
    )


@pytest.mark.slow
def test_a_target_without_its_builds_is_reported(tmp_path):
    """Each target asks for its own platform tags: with only the other machines' files (Windows on arm64, macOS on
    x86-64, Linux x86-64 and aarch64), the Windows and macOS cells are the ones missing."""
    pypi, torch_index = published_indexes(tmp_path)
    for folder in (tmp_path / "pypi", *(tmp_path / "whl").iterdir()):
        for f in folder.iterdir():
            if f.name.endswith(("-win_amd64.whl", "-macosx_11_0_arm64.whl")):
                f.unlink()
    # The stable cells of every target (each target's tags are asked once per index and Python).
    asked = [c for c in matrix.select(CELLS, published=True) if c.kind == "stable"]
    out = run_preflight("--pypi", pypi, "--torch-index", torch_index, *[a for c in asked for a in ("--cell", c.id)])
    assert out.returncode == 1
    missing = set(re.findall(r"^preflight: (\S+) \(Python", out.stdout, re.M))
    assert missing == {c.id for c in asked if c.target.os in ("windows", "macos")}
    assert {c.target.os for c in asked} == {"linux", "windows", "macos"}


def run_preflight(*args):
    return subprocess.run(
        [sys.executable, "-m", "ci", "preflight", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_published_cells_all_found_on_indexes_named_as_the_real_ones(tmp_path):
    pypi, torch_index = published_indexes(tmp_path)
    published = matrix.select(CELLS, published=True)
    pairs = sum(len(c.pythons) for c in published)
    out = run_preflight("--published", "--pypi", pypi, "--torch-index", torch_index)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"all {pairs} torch builds of {len(published)} cells exist" in out.stdout
    # Both naming schemes are in play: the 2.4-2.6 classic cells come from linux_x86_64 files.
    assert any(pytorch_index_tag(c.torch, c.platform) == "linux_x86_64" and not c.on_pypi for c in published)
    assert any(pytorch_index_tag(c.torch, c.platform) != "linux_x86_64" and not c.on_pypi for c in published)


@pytest.mark.slow
def test_without_the_linux_tag_the_older_builds_are_missing(tmp_path, monkeypatch, capsys):
    """The check above can fail: with the manylinux tags alone (what preflight asked before), every cell of torch
    2.4-2.6 from PyTorch's index (but 2.6's cu126) is reported missing, and nothing else."""
    pypi, torch_index = published_indexes(tmp_path)
    full = preflight.target_platforms
    monkeypatch.setattr(preflight, "target_platforms", lambda target: [t for t in full(target) if t.startswith("many")])
    assert preflight.main(["--published", "--pypi", pypi, "--torch-index", torch_index]) == 1
    captured = capsys.readouterr()
    missing = {line.split()[1] for line in captured.out.splitlines() if line.startswith("preflight: ")}
    expected = {
        c.id
        for c in matrix.select(CELLS, published=True)
        if not c.on_pypi and pytorch_index_tag(c.torch, c.platform) == "linux_x86_64"
    }
    assert missing == expected and len(expected) >= 5


def test_torch_index_option_needs_its_platform_placeholder(capsys):
    with pytest.raises(SystemExit):
        preflight.main(["--pr", "--torch-index", "/srv/whl"])
    assert "needs {platform}" in capsys.readouterr().err


def test_every_python_of_a_cell_is_asked_and_the_missing_one_named(tmp_path):
    cell = matrix.find("2.14.1+cu126")
    present = [p for p in cell.pythons if p != "3.13"]
    index = fake_index(
        tmp_path / "idx", *(torch_wheel(cell.id, p) for p in present), torch_wheel("2.14.1+cu130", "3.13")
    )  # another build of the same release does not count
    problems = preflight.check([cell], index_for=lambda c: index)
    assert [(c, p) for c, p, _ in problems] == [("2.14.1+cu126", "3.13")]
    assert "has no torch 2.14.1+cu126 for Python 3.13 on manylinux_2_28_x86_64" in problems[0][2]


def test_the_pypi_build_is_the_plain_version(tmp_path):
    cell = matrix.find("2.14.1+cu130")
    assert cell.on_pypi and preflight.index_of(cell) == preflight.PYPI_SIMPLE
    index = fake_index(tmp_path / "idx", *(torch_wheel("2.14.1", p) for p in cell.pythons))
    assert preflight.check([cell], index_for=lambda c: index) == []
    assert preflight.index_of(matrix.find("2.14.1+cu126")) == "https://download.pytorch.org/whl/cu126"


def test_older_manylinux_tags_count_and_newer_ones_do_not(tmp_path):
    old = matrix.find("2.4+cpu")
    new = matrix.find("2.13.0+cpu")
    index = fake_index(
        tmp_path / "idx",
        *(torch_wheel(old.id, p, "manylinux1_x86_64") for p in old.pythons),
        *(torch_wheel(new.id, p, "manylinux_2_34_x86_64") for p in new.pythons),
    )
    problems = preflight.check([old, new], index_for=lambda c: index)
    assert {c for c, _, _ in problems} == {"2.13.0+cpu"}  # glibc 2.34 wheels do not install in the 2.28 image
    assert len(problems) == len(new.pythons)


def test_the_plain_linux_tag_counts(tmp_path):
    cell = matrix.find("2.4.0+cu124")
    index = fake_index(tmp_path / "idx", *(torch_wheel(cell.id, p, "linux_x86_64") for p in cell.pythons))
    assert preflight.check([cell], index_for=lambda c: index) == []


def test_pip_configuration_is_not_consulted(tmp_path, monkeypatch):
    # A find-links folder from the environment would answer for an index that lacks the build.
    cell = matrix.find("2.14.1+cu126")
    elsewhere = fake_index(tmp_path / "elsewhere", *(torch_wheel(cell.id, p) for p in cell.pythons))
    monkeypatch.setenv("PIP_FIND_LINKS", elsewhere)
    empty = fake_index(tmp_path / "empty", torch_wheel("2.13.0+cpu", "3.12"))
    assert len(preflight.check([cell], index_for=lambda c: empty)) == len(cell.pythons)


def test_one_question_per_index_and_python_and_errors_fail_the_cell():
    asked = []

    def ask(index, python, platforms):
        asked.append((index, python))
        return (None, "HTTP 503") if index.endswith("cu126") else ({"2.9.0+cpu", "2.13.0+cpu"}, None)

    cells = [matrix.find(n) for n in ("2.13.0+cpu", "2.9.0+cpu", "2.14.1+cu126")]
    problems = preflight.check(cells, ask=ask)
    assert sorted(asked) == sorted({(preflight.index_of(c), p) for c in cells for p in c.pythons})
    assert {c for c, _, _ in problems} == {"2.14.1+cu126"}
    assert all("could not ask https://download.pytorch.org/whl/cu126: HTTP 503" in why for _, _, why in problems)


def test_command_names_missing_cells_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(preflight, "available_versions", lambda index, python, platforms: ({"2.9.0+cpu"}, None))
    assert preflight.main(["--cell", "2.9.0+cpu"]) == 0
    assert "all 4 torch builds of 1 cells exist" in capsys.readouterr().out
    assert preflight.main(["--pr"]) == 1
    captured = capsys.readouterr()
    assert "2.14.1+cu126 (Python 3.10): " in captured.out
    assert all(c in captured.err for c in ("2.4.0+cu124", "2.14.1+cu126", "2.14.1+cu130", "2.13.0+cpu"))
    # The pull request's 2.4 binding is built with PyPI's 2.4.0 (cu121), a cell the pr flag does not name.
    assert "2.4.0+cu121" in captured.err and not matrix.find("2.4.0+cu121").pr


# packaging.tags (pip's own copy) on each target's install machine, faked in a child process: importing pip makes
# setuptools' distutils shim give way to the stdlib's for the rest of the process, which breaks the C++ builds of
# torch.compile in the tests that follow.
REFERENCE_TAGS = {
    "linux": (
        "from pip._vendor.packaging import _manylinux, _musllinux, tags\n"
        "_manylinux._get_glibc_version = lambda: (2, 28)\n"
        "_musllinux._get_musl_version = lambda executable: None\n"
        "tags.sysconfig.get_platform = lambda: 'linux-{machine}'\n"
        "found = list(tags._linux_platforms(is_32bit=False))\n"
    ),
    "macos": (
        "from pip._vendor.packaging import tags\n"
        "found = [t for t in tags.mac_platforms(version=({runner}, 0), arch='{machine}') if t.endswith('_{machine}')]\n"
    ),
    "windows": "found = ['win_' + '{machine}'.lower()]\n",
}


def reference_tags(target):
    runner = (target.runner.split("-") + ["0"])[1]
    code = (
        REFERENCE_TAGS[target.os].format(machine=target.machine, runner=runner)
        + "import json\nprint(json.dumps(found))\n"
    )
    return json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    )


@pytest.mark.parametrize("name", sorted(matrix.targets()))
def test_target_platforms_are_what_pip_there_accepts(name):
    """Each target's tag list holds exactly the tags packaging.tags yields where its wheel job installs torch (the
    manylinux image's glibc 2.28, the macOS runner's release), each once. Compared as sets: preflight passes them
    all to `pip index versions`, for which their order does not matter, and the order pip lists them in is
    pip's own (it has changed between releases)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the Linux reference fakes glibc and the platform of a Linux interpreter")
    target = matrix.targets()[name]
    runner = (target.runner.split("-") + ["0"])[1]
    expected = reference_tags(target)
    got = preflight.target_platforms(target)
    assert set(got) == set(expected) and len(got) == len(set(got))
    assert all(t.endswith(target.machine.lower()) for t in got) and target.plat in got
    if target.os == "linux":
        assert f"linux_{target.machine}" in got and f"manylinux_2_34_{target.machine}" not in got
        # Elsewhere than x86, manylinux starts at glibc 2.17.
        oldest = {"x86_64": {"manylinux_2_5_x86_64", "manylinux1_x86_64"}}.get(
            target.machine, {f"manylinux_2_17_{target.machine}", f"manylinux2014_{target.machine}"}
        )
        assert oldest <= set(got)
        older = {"x86_64": "manylinux_2_4_x86_64"}.get(target.machine, f"manylinux_2_16_{target.machine}")
        assert older not in got
    if target.os == "macos":  # the runner's release down to 11.0, the first macOS on arm64
        assert {f"macosx_{runner}_0_arm64", "macosx_11_0_arm64"} <= set(got)
        assert "macosx_10_16_arm64" not in got


def test_the_comparison_ignores_order_and_catches_a_missing_tag():
    if not sys.platform.startswith("linux"):
        pytest.skip("the Linux reference fakes glibc and the platform of a Linux interpreter")
    target = matrix.targets()["linux-x86_64"]
    expected, got = reference_tags(target), preflight.target_platforms(target)
    assert set(got[::-1]) == set(expected)  # pip's order or any other
    # Can fail: without the plain linux tag (PyTorch's index names its 2.4-2.6 builds so) the sets differ.
    assert {t for t in got if t != "linux_x86_64"} != set(expected)


def test_an_unreachable_index_is_an_error_not_a_missing_build():
    # pip's answer when the host does not resolve: retries, then the same words as for a missing build.
    stderr = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
        "connection broken by 'NewConnectionError(...: Name or service not known')': /whl/cu126/torch/\n"
        "ERROR: No matching distribution found for torch\n"
    )
    versions, error = preflight.parse_answer(1, "", stderr)
    assert (versions, error) == (None, "index not reached (Name or service not known)")
    assert preflight.parse_answer(1, "", "ERROR: No matching distribution found for torch\n") == (set(), None)
    found = preflight.parse_answer(0, "torch (2.14.1)\nAvailable versions: 2.14.1, 2.14.0\n", "")
    assert found == ({"2.14.1", "2.14.0"}, None)
