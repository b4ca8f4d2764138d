"""ci/matrix.toml expanded into cells, checked against the parts of the project that name wheels independently:
setup.py's local tag (prerast_meta.compat), the loader's fix-it command, nvcc's arch list, and the built wheel."""

import datetime
import os
import re
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.matrix import cibw, parts
from prerast_meta import build_env, compat  # noqa: E402

CELLS = matrix.load()
PARTS = parts.load()
RAW = tomllib.load(open(matrix.MATRIX_FILE, "rb"))


CLASSIC = [c for c in CELLS if c.kind == "classic"]
STABLE = [c for c in CELLS if c.kind == "stable"]
FLOOR = compat.STABLE_FLOOR


def test_every_build_below_the_floor_is_one_classic_cell():
    declared = {(t["version"], p) for t in RAW["torch"] for p in t["platforms"] if matrix._vkey(t["version"]) < FLOOR}
    assert {(c.torch, c.platform) for c in CLASSIC} == declared
    assert len({c.id for c in CELLS}) == len(CELLS)


def test_stable_floor_is_stated_once():
    """The floor and PyPI's CUDA major live in prerast_meta.compat alone: the matrix file does not repeat them
    (its cells follow them: the oldest release a stable cell serves is the floor)."""
    assert not {"floor", "pypi_cuda_major"} & set(RAW.get("stable", {}))
    # torch's TORCH_VERSION encoding: major and minor in the top two bytes (2.10 is 0x020a..., not 0x0210...).
    assert int(compat.STABLE_TARGET_VERSION, 16) == FLOOR[0] << 56 | FLOOR[1] << 48
    oldest = min((matrix._vkey(r)[:2] for c in STABLE for r, _ in c.serves))
    assert oldest == FLOOR
    # One untagged (PyPI) wheel per target: PyPI's CUDA major where torch has CUDA builds, else the CPU one.
    for target in matrix.targets().values():
        untagged = [c for c in STABLE if c.local_tag == "" and c.target == target]
        assert [(c.cuda or "cpu").split(".")[0] for c in untagged] == [
            compat.PYPI_CUDA_MAJOR if target.has_cuda else "cpu"
        ], target.name


def test_every_torch_build_is_served_by_exactly_one_published_wheel():
    """Each (release, platform) torch publishes, every patch release included, has one published wheel: a stable
    one from the floor on (by CUDA major), the classic cell of its minor below."""
    published = [c for c in CELLS if c.published]
    default = matrix.default_target()
    for target in matrix.targets().values():
        here = [c for c in published if c.target == target]
        for t in RAW["torch"]:
            for patch in t["patches"]:
                for platform in t["platforms"]:
                    serving = [c.id for c in here if (patch, platform) in c.serves]
                    if matrix._vkey(t["version"]) >= FLOOR:
                        assert len(serving) == (platform in target.platforms), (target.name, patch, platform, serving)
                    elif target != default:  # classic wheels are Linux x86-64 only
                        assert serving == [], (target.name, patch, platform, serving)
                    elif (t["version"], platform) in {(c.torch, c.platform) for c in CLASSIC if c.published}:
                        assert serving == [f"{t['version']}+{platform}"], (patch, platform, serving)


def test_stable_cells_serve_their_cuda_major():
    cu13, cu12 = matrix.find("2.14.1+cu130"), matrix.find("2.14.1+cu126")
    assert cu13.kind == cu12.kind == "stable" and cu13.local_tag == "" and cu12.local_tag == "cu12"
    assert ("2.10.0", "cpu") in cu13.serves and ("2.15.0", "cu132") in cu13.serves
    assert ("2.12.0", "cu126") in cu12.serves and ("2.10.0", "cu128") in cu12.serves
    assert not {p for _, p in cu12.serves} & {"cpu", "cu130", "cu132"}
    assert "2.10:" in cu13.serves_text().replace(" ", "")


def test_classic_cells_serve_every_patch_of_their_minor():
    cell = matrix.find("2.4.0+cu121")
    assert cell.serves == (("2.4.0", "cu121"), ("2.4.1", "cu121")) and cell.local_tag == "pt24cu121"
    assert cell.pages == ["torch-2.4.0+cu121.html", "torch-2.4.1+cu121.html"]
    with pytest.raises(matrix.MatrixError, match="served by the wheel of cell 2.14.1\\+cu130"):
        matrix.find("2.12.1+cu130")


def test_covers_torch_2_4_to_2_15_and_python_3_10_to_3_13():
    minors = {tuple(int(x) for x in r.split(".")[:2]) for c in CELLS for r, _ in c.serves}
    assert {(2, m) for m in range(4, 16)} <= minors
    pythons = {p for c in CELLS for p in c.pythons}
    assert pythons == {"3.10", "3.11", "3.12", "3.13"}
    assert all(c.cuda is None or c.archs for c in CELLS)
    for release in RAW["torch"]:
        if matrix._vkey(release["version"]) >= FLOOR:
            continue
        cells = [c for c in CELLS if c.torch == release["version"]]
        assert "cpu" in {c.platform for c in cells}, f"torch {release['version']} has no CPU cell"
        assert sum(c.on_pypi for c in cells) == 1


def test_every_cell_is_a_torch_build_pytorch_publishes():
    published = matrix.published_builds()
    for release in RAW["torch"]:
        known = published.get(matrix.minor(release["version"]))
        assert known, f"torch {release['version']}: add its builds to ci/published_builds.toml first"
        missing = set(release["platforms"]) - known
        assert not missing, f"torch {release['version']}: PyTorch publishes no {sorted(missing)} build"


def test_every_pull_request_cell_is_a_published_build():
    published = matrix.published_builds()
    pr = [c for c in CELLS if c.pr]
    assert pr and all(c.platform in published[matrix.minor(c.torch)] for c in pr)


def test_cuda_tables_are_the_ones_the_cells_and_the_kernel_parts_use():
    used = {c.cuda for c in CELLS if c.cuda} | {p.toolkit for p in PARTS if p.toolkit}
    assert used == set(RAW["cuda"]), "a [cuda] table no cell or kernels part uses, or the reverse"


def test_releases_below_2_10_are_built_at_their_lowest_patch():
    # A wheel built with the oldest headers of a minor is the one that can serve all its patch releases.
    for release in RAW["torch"]:
        assert release["version"] in release["patches"]
        if matrix._vkey(release["version"]) < FLOOR:
            assert release["version"] == min(release["patches"], key=matrix._vkey), release["version"]


def expected_local_tag(cell):
    """The local tag of a cell's wheel by the wheel spec (ci/matrix.toml's header), from the cell's declared torch
    build alone: classic 'pt<major><minor><platform>'; stable none for PyPI's CUDA major, 'cu<major>' for another
    CUDA major, 'cpu' for the CPU build where torch has CUDA builds (none where it has not: macOS)."""
    if cell.kind == "classic":
        major, minor = cell.torch.split(".")[:2]
        return f"pt{major}{minor}{cell.platform}"
    if cell.platform == "cpu":
        return "cpu" if cell.target.has_cuda else ""
    cuda_major = cell.platform[len("cu") : -1]  # cu126 -> 12
    return "" if cuda_major == compat.PYPI_CUDA_MAJOR else f"cu{cuda_major}"


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_local_tag_is_the_one_setup_py_stamps(cell):
    """setup.py stamps compat.local_tag (which the cell's local_tag calls too): checked here against the wheel
    spec applied to the cell's torch build, not against that same function."""
    assert cell.local_tag == expected_local_tag(cell)
    assert cell.kind == ("stable" if matrix._vkey(cell.torch)[:2] >= FLOOR else "classic")


def test_wheel_name_follows_the_wheel_spec():
    assert matrix.find("2.14.1+cu130").wheel_name("0.1.0") == "prerast-0.1.0-py3-none-manylinux_2_28_x86_64.whl"
    assert matrix.find("2.14.1+cu126").wheel_name("0.1.0") == "prerast-0.1.0+cu12-py3-none-manylinux_2_28_x86_64.whl"
    assert matrix.find("2.4+cu121").wheel_name("0.1.0") == "prerast-0.1.0+pt24cu121-py3-none-manylinux_2_28_x86_64.whl"
    for cell in CELLS:
        parts = cell.wheel_name("1.2.3")[: -len(".whl")].split("-")
        version = "1.2.3" + (f"+{cell.local_tag}" if cell.local_tag else "")
        assert parts == ["prerast", version, "py3", "none", cell.target.plat]
    assert matrix.find("2.14.1+cu130-windows-amd64").wheel_name("0.1.0") == "prerast-0.1.0-py3-none-win_amd64.whl"
    assert matrix.find("2.14.1+cpu-macos-arm64").wheel_name("0.1.0") == "prerast-0.1.0-py3-none-macosx_11_0_arm64.whl"
    assert (
        matrix.find("2.14.1+cu126-linux-aarch64").wheel_name("0.1.0")
        == "prerast-0.1.0+cu12-py3-none-manylinux_2_28_aarch64.whl"
    )


def test_every_target_gets_the_platforms_the_issue_names():
    """Linux aarch64: cpu, CUDA 12 (Orin sm_87, GH200 sm_90) and CUDA 13 (sm_90, sm_100, sm_110, sm_121 + PTX);
    Windows x86-64: cpu, CUDA 12, CUDA 13; macOS arm64: cpu. Classic cells stay on Linux x86-64."""
    by_target = {}
    for c in STABLE:
        by_target.setdefault(c.target.name, {})[c.cuda.split(".")[0] if c.cuda else "cpu"] = c
    assert {"linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64"} <= set(by_target)
    arm = by_target["linux-aarch64"]
    assert set(arm) == {"cpu", "12", "13"}
    assert {"8.7", "9.0+PTX"} == set(arm["12"].archs)
    assert [a.rstrip("+PTX") for a in arm["13"].archs] == ["9.0", "10.0", "11.0", "12.1"] and arm["13"].archs[
        -1
    ].endswith("+PTX")
    assert set(by_target["windows-amd64"]) >= {"12", "13"}
    assert set(by_target["macos-arm64"]) == {"cpu"}
    assert all(c.target == matrix.default_target() for c in CLASSIC)


def test_cell_ids_name_their_target_unless_it_is_the_default():
    for c in CELLS:
        assert matrix.find(c.id, CELLS) is c
        assert c.id.endswith(f"-{c.target.name}") != c.default_target
    assert matrix.find("2.14+cu130-linux-aarch64").target.machine == "aarch64"
    with pytest.raises(matrix.MatrixError, match="no cell"):
        matrix.find("2.14.1+cu130-linux-riscv64")


@pytest.mark.parametrize(
    "tag, target",
    [
        ("manylinux_2_28_x86_64", "linux-x86_64"),
        ("linux_x86_64", "linux-x86_64"),
        ("manylinux_2_17_x86_64.manylinux2014_x86_64", "linux-x86_64"),
        ("manylinux_2_34_aarch64", "linux-aarch64"),
        ("win_amd64", "windows-amd64"),
        ("macosx_11_0_arm64", "macos-arm64"),
        ("macosx_14_0_arm64", "macos-arm64"),
        ("macosx_11_0_x86_64", None),
        ("win32", None),
        ("manylinux_2_28_ppc64le", None),
    ],
)
def test_platform_tags_map_to_their_target(tag, target):
    found = matrix.target_of_tag(tag)
    assert (found.name if found else None) == target


def test_broken_targets_are_refused(tmp_path):
    text = open(matrix.MATRIX_FILE).read()
    broken = {
        "no \\[target.windows-arm64\\] table": text.replace(
            'target = "windows-amd64"\npr = true', 'target = "windows-arm64"\npr = true'
        ),
        "not one of machine": text.replace('plat = "win_amd64"', 'plat = "win_arm64"'),
        "pypi": re.sub(r'pypi = "cu130"( +# PyPI\'s aarch64)', r'pypi = "cu999"\1', text),
        "runner 'macos-16' is not a label of \\[runners\\]": text.replace('runner = "macos-15"', 'runner = "macos-16"'),
        "tool_runner: runner 'ubuntu-26.04'": text.replace(
            'tool_runner = "ubuntu-24.04"', 'tool_runner = "ubuntu-26.04"'
        ),
        "expected its retirement date": text.replace('"macos-14" = 2026-11-02', '"macos-14" = "2026-11-02"'),
        "has no cu126 build for macos-arm64": text.replace(
            'platform = "cpu"           # the only torch build for macOS', 'platform = "cu126"  #'
        ),
    }
    for why, edited in broken.items():
        assert edited != text, why
        path = tmp_path / "matrix.toml"
        path.write_text(edited)
        with pytest.raises(matrix.MatrixError, match=why):
            matrix.load(str(path))


def test_every_runner_is_a_known_label_not_retired_today():
    """Each target's runner and the [policy] tool_runner are labels of [runners] that GitHub has not retired as of
    today (a job on a retired label is never picked up); the facts of the issue: macOS on macos-15 (PyPI's torch
    2.12+ is macosx_14_0_arm64), macos-14 retired 2026-11-02, Windows on windows-2022 (CUDA 12's nvcc)."""
    today = datetime.date.today()
    known, used = matrix.runners(), matrix.runners_in_use()
    assert set(used) == {t.runner for t in matrix.targets().values()} | {matrix.policy()["tool_runner"]}
    for label in used:
        assert label in known and (known[label] is None or known[label] > today), (label, known.get(label))
    assert matrix.retired_runners(used) == []
    assert known["macos-14"] == datetime.date(2026, 11, 2)
    assert matrix.targets()["macos-arm64"].runner == "macos-15"
    assert matrix.targets()["windows-amd64"].runner == "windows-2022"
    assert all(v is None or isinstance(v, datetime.date) for v in known.values())


def test_each_targets_pypi_build_is_what_pypi_serves_there():
    """PyPI's torch is a CUDA 13 build on Linux x86-64 and (from 2.11 on) aarch64, a CPU build on Windows and
    macOS: the stable cell of that build installs plain torch===X from PyPI, the others come from torch's index."""
    assert {n: t.pypi for n, t in matrix.targets().items()} == {
        "linux-x86_64": "cu130",
        "linux-aarch64": "cu130",
        "windows-amd64": "cpu",
        "macos-arm64": "cpu",
    }
    arm = matrix.find("2.14.1+cu130-linux-aarch64")
    assert arm.on_pypi and arm.torch_requirement() == ("torch===2.14.1", [])
    windows = matrix.find("2.14.1+cu130-windows-amd64")
    assert not windows.on_pypi and windows.torch_requirement()[0] == "torch==2.14.1+cu130"
    assert not matrix.find("2.13.0+cpu-linux-aarch64").on_pypi  # a +cpu build from torch's cpu index


def test_a_retired_or_unknown_runner_is_named(tmp_path, monkeypatch, capsys):
    # The check above can fail: macOS back on macos-14, asked on the day it was retired and the day before.
    path = tmp_path / "matrix.toml"
    path.write_text(open(matrix.MATRIX_FILE).read().replace('runner = "macos-15"', 'runner = "macos-14"'))
    used = matrix.runners_in_use(str(path))
    assert used["macos-14"] == ["[target.macos-arm64]"]
    assert matrix.retired_runners(used, datetime.date(2026, 11, 1), str(path)) == []
    (problem,) = matrix.retired_runners(used, datetime.date(2026, 11, 2), str(path))
    assert problem.startswith("[target.macos-arm64]: runner 'macos-14' was retired on 2026-11-02")
    assert matrix.retired_runners({"macos-26": ["a job"]}) == [
        "a job: runner 'macos-26' is not in ci/matrix.toml's [runners] table"
    ]
    # gh-matrix, the workflow's first use of the matrix, refuses to plan jobs on it (today is past 2026-11-02).
    from ci import __main__ as cli

    monkeypatch.setattr(matrix, "runners_in_use", lambda: used)
    assert cli.main(["gh-matrix", "--pr"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "runner 'macos-14' was retired on 2026-11-02" in err


def test_wheel_name_matches_the_wheel_the_tests_run_on():
    path = os.environ.get("PRERAST_TEST_WHEEL")
    if not path:
        pytest.skip("no PRERAST_TEST_WHEEL (ci/test.sh sets it)")
    from ci.builder import wheel

    info = wheel.inspect(path)["build_info"]
    cell = matrix.cell_for_build(info)
    version = info["prerast_version"].split("+")[0]
    plat = ".".join(wheel.wheel_tags(path)[2])
    assert os.path.basename(path) == cell.wheel_name(version, plat)


def test_arch_lists_parse_and_end_with_ptx():
    for cell in CELLS:
        if cell.cuda:
            assert build_env.parse_arch_list(cell.arch_list()) == list(cell.archs)
            assert cell.archs[-1].endswith("+PTX") and not any(a.endswith("+PTX") for a in cell.archs[:-1])
            assert min(tuple(map(int, a.replace("+PTX", "").split("."))) for a in cell.archs) >= build_env.MIN_ARCH


def test_archs_of_the_local_cuda_version_are_ones_nvcc_compiles():
    home = build_env.find_cuda_home()
    version = build_env.nvcc_version(home)
    if not version:
        pytest.skip("no nvcc here")
    supported = build_env.nvcc_archs(home)
    cv = ".".join(version.split(".")[:2])
    cells = [c for c in CELLS if c.cuda == cv]
    if not cells:
        pytest.skip(f"no cell uses CUDA {cv}")
    for a in cells[0].archs:
        major, minor = a.replace("+PTX", "").split(".")
        assert (int(major), int(minor)) in supported, f"nvcc {version} cannot compile arch {a}"


def test_find_resolves_full_and_minor_release_names():
    assert matrix.find("2.9+cu130").id == "2.9.0+cu130"
    assert matrix.find("2.13.0+cpu").id == "2.13.0+cpu"
    with pytest.raises(matrix.MatrixError, match="no cell '2.14.1\\+cu999'.*2.14.1\\+cu130"):
        matrix.find("2.14.1+cu999")
    with pytest.raises(matrix.MatrixError, match="bad cell name"):
        matrix.find("torch-2.14")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t["torch"][0].update(pypi="cu999"), "pypi platform 'cu999' is not among"),
        (lambda t: t["torch"][0].update(publish=["cu777"]), "publish names \\['cu777'\\]"),
        (lambda t: t["torch"][0].update(pythons=["3.9", "3.10"]), "below the Python floor"),
        (lambda t: t["torch"][0]["platforms"].append("cu999"), 'needs a \\[cuda."99.9"\\] table'),
        (lambda t: t["torch"].append(dict(t["torch"][0])), "listed twice"),
        (lambda t: t["torch"][0].update(version="2.4.1"), "lowest patch release of its minor"),
        (lambda t: t["torch"][-1].update(pr=["cpu"]), "served by the \\[\\[stable.cell\\]\\] wheels"),
        (lambda t: t["stable"]["cell"][0].update(torch="2.9.0"), "build with a torch release >= 2.10"),
        (lambda t: t["target"]["linux-aarch64"].update(plat="manylinux_2_28_aarch64"), "manylinux policy only"),
        (lambda t: t["target"]["linux-aarch64"].update(manylinux="2_28"), "is not a policy such as"),
    ],
)
def test_inconsistent_matrix_is_refused(tmp_path, change, message):
    data = tomllib.load(open(matrix.MATRIX_FILE, "rb"))
    change(data)
    path = tmp_path / "matrix.toml"
    path.write_text(to_toml(data))
    with pytest.raises(matrix.MatrixError, match=message):
        matrix.load(str(path))


def test_a_linux_targets_image_and_tag_follow_its_one_manylinux_value(tmp_path):
    """Raising the manylinux policy in one place moves the image the build runs in, the tag the repair gives and
    the platform the cross build downloads for."""
    data = tomllib.load(open(matrix.MATRIX_FILE, "rb"))
    for t in data["target"].values():
        if t["os"] == "linux":
            t["manylinux"] = "manylinux_2_34"
    path = tmp_path / "matrix.toml"
    path.write_text(to_toml(data))
    linux = {n: t for n, t in matrix.targets(str(path)).items() if t.os == "linux"}
    assert {n: (t.image, t.plat) for n, t in linux.items()} == {
        "linux-x86_64": ("manylinux_2_34", "manylinux_2_34_x86_64"),
        "linux-aarch64": ("manylinux_2_34", "manylinux_2_34_aarch64"),
    }
    from ci.builder import cross

    assert cross.PLATFORM == matrix.targets()["linux-aarch64"].plat


def to_toml(data):
    """Just enough TOML writing for the matrix's shapes (tables of scalars/lists, arrays of tables)."""

    def value(v):
        if isinstance(v, str):
            return '"' + v + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    def quoted(key):  # runner labels have dots: a bare key with a dot is a dotted key
        return f'"{key}"' if "." in key else key

    lines = []
    for key, table in data.items():
        if key == "torch":
            for rel in table:
                lines.append("[[torch]]")
                lines += [f"{k} = {value(v)}" for k, v in rel.items()]
        elif key == "cuda":
            for cv, t in table.items():
                lines.append(f'[cuda."{cv}"]')
                lines += [f"{k} = {value(v)}" for k, v in t.items()]
        elif key == "target":
            for name, t in table.items():
                lines.append(f"[target.{name}]")
                lines += [f"{k} = {value(v)}" for k, v in t.items() if not isinstance(v, dict)]
                for sub, rows in t.items():
                    if isinstance(rows, dict):
                        lines.append(f"[target.{name}.{sub}]")
                        lines += [f'"{k}" = {value(v)}' for k, v in rows.items()]
        else:
            lines.append(f"[{key}]")
            lines += [
                f"{quoted(k)} = {value(v)}"
                for k, v in table.items()
                if not isinstance(v, dict) and (not isinstance(v, list) or not v or not isinstance(v[0], dict))
            ]
            for sub, rows in table.items():  # [kernels] cuda = {"12" = "12.8"}: written as [kernels.cuda]
                if isinstance(rows, dict):
                    lines.append(f"[{key}.{sub}]")
                    lines += [f'"{k}" = {value(v)}' for k, v in rows.items()]
            for sub, rows in table.items():
                if isinstance(rows, list) and rows and isinstance(rows[0], dict):
                    for row in rows:
                        lines.append(f"[[{key}.{sub}]]")
                        lines += [f"{k} = {value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


def inner_env(part, workspace="/w"):
    return dict(re.findall(r'(\w+)="([^"]*)"', cibw.environment(part, workspace=workspace)["CIBW_ENVIRONMENT"]))


def test_cibuildwheel_environment_of_a_part():
    for part in PARTS:
        env, inner = cibw.environment(part, workspace="/w"), inner_env(part)
        # Built with its own Python, tested under it, the newest and a free-threaded one (one build: py3-none).
        built, *others = env["CIBW_BUILD"].split()
        assert built == part.target.identifier(part.python) and others[-1] == part.target.identifier("3.14t")
        newest = part.cell.pythons[-1] if part.cell else "3.13"
        assert part.target.identifier(newest) in others and len(others) == 2
        # A part does not run alone: its test is the part check, without torch; the merged wheel is smoke-tested.
        assert env["CIBW_TEST_COMMAND"].endswith("part-check") and "CIBW_TEST_SKIP" not in env
        assert env["CIBW_TEST_ENVIRONMENT"] == 'PIP_NO_DEPS="1"'
        assert inner["PRERAST_PART"] == part.id and inner["PRERAST_PARTS"] == part.kind
        assert inner.get("PRERAST_ABI") == (part.abi or None)
        if part.cell:
            requirement, extra = part.cell.torch_requirement()
            assert inner["PRERAST_TORCH_REQUIREMENT"] == requirement and "CIBW_BEFORE_BUILD" not in env
            assert inner.get("PIP_EXTRA_INDEX_URL") == (extra[1] if extra else None)
        else:
            assert not {"PRERAST_TORCH_REQUIREMENT", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL"} & set(inner)
            assert env["CIBW_BEFORE_BUILD"].split()[-1].endswith("requirements-cell.txt")  # and no torch after it
        assert (inner.get("PRERAST_CUDA_ARCH_LIST") or None) == (part.arch_list() or None)
        assert ("PRERAST_FORCE_CPU" in inner) == (part.kind == "kernels" and not part.nvcc)
        if part.target.os == "linux":
            assert ("CUDA_HOME" in inner) is part.nvcc  # a binding's CUDA headers: its torch's nvidia-* wheels
        if part.nvcc and part.target.os == "linux":
            assert (
                inner["CUDA_HOME"] == f"/usr/local/cuda-{part.toolkit}"
                and f"gcc-toolset-{part.host_gcc}" in inner["CXX"]
            )
            assert f"cuda-nvcc-{part.toolkit.replace('.', '-')}" in inner["PRERAST_TOOLKIT_PACKAGES"].split()


def test_a_kernels_part_pins_no_torch():
    """A kernels part compiles no torch code: no torch in its build environment (pip would download a CUDA torch of
    GBs for nothing), except macOS's, where delocate wants torch's lib folder for every wheel it repairs
    (prerast_meta/repair.py, tool_env): the small CPU torch, for the repair only."""
    for part in (p for p in PARTS if p.kind == "kernels"):
        inner = inner_env(part)
        if part.target.repair != "delocate":
            assert part.cell is None and "PRERAST_TORCH_REQUIREMENT" not in inner, part.id
        else:
            assert part.torch_for_repair and part.cell.platform == "cpu" and part.cell.target == part.target
    # Can fail: the environment of a binding pins its torch.
    assert "PRERAST_TORCH_REQUIREMENT" in inner_env(parts.find("binding-pt24", PARTS))


def test_github_matrix_lists_the_selected_parts_and_targets():
    import json

    def gh_matrix(*args):
        return json.loads(
            subprocess.run(
                [sys.executable, "-m", "ci", "gh-matrix", *args], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        )["include"]

    jobs = gh_matrix("--pr")
    assert [j["part"] for j in jobs] == [p.id for p in PARTS if p.pr]
    assert all(
        set(j) == {"part", "kind", "target", "os", "runner", "cuda", "ccache", "timeout", "artifact"} for j in jobs
    )
    targets = gh_matrix("--published", "--jobs", "targets")
    assert [r["target"] for r in targets] == list(matrix.targets())
    for row in targets:
        assert row["parts"].split() == [p.id for p in PARTS if p.published and p.target.name == row["target"]]
        assert row["runner"] == matrix.targets()[row["target"]].runner
        assert row["smoke_torch"] == "torch===2.14.1"  # PyPI's build of the stable binding's torch


def test_toolkit_installs_only_what_the_plugin_compiles_and_links():
    packages = matrix.toolkit()["packages"]
    assert {"cuda-nvcc", "cuda-cudart-devel", "cuda-cccl"} <= set(packages)
    assert not [p for p in packages if p.startswith(("libcublas", "libcusparse", "libcusolver", "libcurand"))]


def test_headers_of_the_nvidia_wheels_next_to_torch_are_found(tmp_path, monkeypatch):
    # Where the toolkit lacks cuBLAS/cuSPARSE headers, setup.py adds these folders (CUDA 12 wheels: one folder per
    # library; CUDA 13 wheels: one nvidia/cu13 folder).
    for folder in ("nvidia/cublas/include", "nvidia/cusparse/include", "nvidia/cu13/include"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path)])
    found = [os.path.relpath(d, tmp_path) for d in build_env.nvidia_pip_include_dirs()]
    assert found == ["nvidia/cu13/include", "nvidia/cublas/include", "nvidia/cusparse/include"]


def test_timeouts_leave_room_for_every_part():
    for part in PARTS:
        minutes = cibw.timeout_minutes(part)
        assert 2 * cibw.expected_minutes(part) <= minutes <= 360 and minutes % 5 == 0
    # The old fixed timeout fitted no CUDA build; more archs and a CUDA torch to fetch take longer.
    assert max(cibw.timeout_minutes(p) for p in PARTS) > 30
    cu13, cpu = parts.find("kernels-cu13", PARTS), parts.find("kernels-cpu", PARTS)
    assert cibw.expected_minutes(cu13) > cibw.expected_minutes(parts.find("kernels-cu12-linux-aarch64", PARTS))
    assert cibw.expected_minutes(cpu) < cibw.expected_minutes(parts.find("binding-stable", PARTS))


def _table_rows(path, heading):
    text = open(os.path.join(ROOT, path)).read()
    section = text.split(heading, 1)[1]
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ][1:]


def test_readme_platform_table_names_every_targets_one_wheel():
    """The README's table has one row for each target: its OS and machine, and the one wheel PyPI gets there (the
    parts of every cell of the target, merged)."""
    rows = _table_rows("README.md", "### Platforms")
    for target in matrix.targets().values():
        os_name, machine = target.describe().split(" ", 1)
        wheel = f"prerast-<v>-py3-none-{target.plat}.whl"
        matching = [r for r in rows if r[0].lower().startswith(f"{os_name} {machine}".lower()) and f"`{wheel}`" in r[3]]
        assert len(matching) == 1, (target.name, wheel)
        # Which Pythons it serves: every CPython from the floor on, the free-threaded builds too (py3-none).
        assert matching[0][4].startswith(f"CPython ≥ {compat.python_floor_text()}, free-threaded"), matching[0][4]


def test_installing_guide_names_every_published_stable_wheel():
    """The Installing guide's table of one release's wheels is made from the matrix (docs/_ext/prerast_wheels.py):
    one row per target, holding each of its published stable wheels exactly once, PyPI's in the PyPI column."""
    sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
    import prerast_wheels

    text = open(os.path.join(ROOT, "docs", "installing.md")).read()
    assert "```{prerast-wheel-table}" in text.split("The wheels of one release", 1)[1].split("\n## ", 1)[0]
    rows = prerast_wheels.rows(CELLS)
    assert [r[0].split(" (")[0] for r in rows] == [t.describe() for t in matrix.targets().values()]
    names = [c for r in rows for c in r[1:]]
    for cell in [c for c in STABLE if c.published]:
        wheel = f"`{cell.wheel_name('<v>')}`"
        assert names.count(wheel) == 1, cell.id
        row = next(r for r in rows if wheel in r)
        assert (row[1] == wheel) == (cell.local_tag == ""), cell.id
