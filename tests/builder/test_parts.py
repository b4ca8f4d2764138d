"""The parts of each target's one wheel (ci/matrix/parts.py), checked against the cells they serve, ci/matrix.toml's
toolkit and arch tables, and the names ci/builder/merge.py gives the wheels merged of them."""

import dataclasses
import os
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.builder import merge  # noqa: E402
from ci.matrix import parts  # noqa: E402
from prerast_meta import compat  # noqa: E402
from test_matrix import to_toml  # noqa: E402

CELLS = matrix.load()
PARTS = parts.load()
RAW = tomllib.load(open(matrix.MATRIX_FILE, "rb"))


def of(target, selection=PARTS):
    return {p.name: p for p in selection if p.target.name == target}


def test_ids_are_unique_and_name_their_target_unless_it_is_the_default():
    assert len({p.id for p in PARTS}) == len(PARTS)
    for p in PARTS:
        assert p.id.endswith(f"-{p.target.name}") != p.default_target
        assert parts.find(p.id, PARTS) is p
    assert {"kernels-cu12-linux-aarch64", "binding-stable-windows-amd64", "binding-pt24"} <= {p.id for p in PARTS}
    with pytest.raises(matrix.MatrixError, match="no part 'kernels-cu11'"):
        parts.find("kernels-cu11", PARTS)


def test_kernels_are_the_cpu_ones_and_one_per_cuda_major_of_the_published_cells():
    """The CPU library, plus one per CUDA major of the cuXXX platforms of the target's published cells: no CUDA 11
    library (the cu118 cells are not published), none on macOS."""
    for target in matrix.targets().values():
        published = [c for c in CELLS if c.target == target and c.published]
        majors = {compat.cuda_major(c.cuda) for c in published if c.cuda}
        kernels = [p for p in parts.select(PARTS, published=True) if p.target == target and p.kind == "kernels"]
        assert [k.compute for k in kernels] == ["cpu"] + [f"cu{m}" for m in sorted(majors, key=int)], target.name
    assert {k.compute for k in PARTS if k.kind == "kernels"} == {"cpu", "cu12", "cu13"}
    assert [p.name for p in PARTS if p.target.name == "macos-arm64"] == ["kernels-cpu", "binding-stable"]


def test_nvcc_runs_once_per_target_and_cuda_major():
    """Only kernels parts compile CUDA code, each (target, CUDA major) by exactly one of them, with the toolkit of
    that major: never a second job compiling the same major for the same target (a part per torch release would)."""
    compiling = [(p.target.name, compat.cuda_major(p.toolkit)) for p in PARTS if p.nvcc]
    assert len(compiling) == len(set(compiling))
    assert all(p.kind == "kernels" and p.compute == f"cu{compat.cuda_major(p.toolkit)}" for p in PARTS if p.nvcc)
    assert not [p for p in PARTS if p.kind == "binding" and p.nvcc]
    # A Windows binding of a CUDA torch gets a toolkit for its headers only (no nvcc, no archs).
    windows = parts.find("binding-stable-windows-amd64", PARTS)
    assert windows.cuda == "13.0" and not windows.nvcc and not windows.archs


def test_kernel_toolkits_and_archs_come_from_the_kernels_and_cuda_tables():
    default = RAW["kernels"]["cuda"]
    for p in (p for p in PARTS if p.nvcc):
        version = dict(p.target.kernels).get(p.compute[2:], default[p.compute[2:]])
        assert p.toolkit == version
        assert list(p.archs) == list(dict(p.target.archs).get(version, RAW["cuda"][version]["archs"]))
        assert p.host_gcc == RAW["cuda"][version]["host_gcc"]
    x86, arm = of("linux-x86_64"), of("linux-aarch64")
    assert (x86["kernels-cu12"].toolkit, x86["kernels-cu13"].toolkit) == ("12.8", "13.0")
    assert "10.0" in x86["kernels-cu12"].archs and "12.0+PTX" in x86["kernels-cu12"].archs  # Blackwell from 12.8
    # aarch64's CUDA 12 is JetPack 6's 12.6, with the Orin (sm_87) and GH200 archs of the target's own table.
    assert arm["kernels-cu12"].toolkit == "12.6" and arm["kernels-cu12"].archs == ("8.7", "9.0+PTX")
    assert arm["kernels-cu13"].archs == ("9.0", "10.0", "11.0", "12.1+PTX")


def test_the_stable_binding_is_built_with_the_newest_stable_torch_a_cuda_build_where_there_is_one():
    for target in matrix.targets().values():
        binding = of(target.name)["binding-stable"]
        newest = max(matrix._vkey(c.torch) for c in CELLS if c.target == target and c.kind == "stable" and c.published)
        assert matrix._vkey(binding.cell.torch) == newest and binding.abi == "stable"
        assert binding.cell.platform == ("cu130" if target.has_cuda else "cpu"), target.name
        assert binding.local_tag == "binding.stable"


def test_one_classic_binding_per_minor_below_the_floor_on_the_default_target():
    classic = [p for p in PARTS if p.abi == "classic"]
    minors = sorted({matrix.minor(c.torch) for c in CELLS if c.kind == "classic" and c.published}, key=matrix._vkey)
    assert [p.name for p in classic] == [f"binding-pt{m.replace('.', '')}" for m in minors]
    assert minors[0] == "2.4" and minors[-1] == "2.9"
    for p in classic:
        assert p.default_target and p.cell.on_pypi and p.cell.torch == p.cell.torch.split("+")[0]
        assert compat.cuda_major(p.cell.cuda) == "12"  # PyPI's torch of every classic release is a CUDA 12 build
        assert p.cell.torch_requirement() == (f"torch==={p.cell.torch}", [])
        assert p.local_tag == f"binding.pt{matrix.minor(p.cell.torch).replace('.', '')}"
    assert parts.find("binding-pt24", PARTS).cell.torch_build == "2.4.0+cu121"


def test_a_part_is_published_or_pr_when_a_cell_that_needs_it_is():
    pr = {p.id for p in parts.select(PARTS, pr=True)}
    assert pr == {
        "kernels-cpu",
        "kernels-cu12",  # 2.14.1+cu126 and 2.4.0+cu124
        "kernels-cu13",
        "binding-stable",
        "binding-pt24",  # 2.4.0+cu124
        "kernels-cpu-linux-aarch64",
        "kernels-cu13-linux-aarch64",
        "binding-stable-linux-aarch64",
        "kernels-cpu-windows-amd64",
        "kernels-cu13-windows-amd64",
        "binding-stable-windows-amd64",
        "kernels-cpu-macos-arm64",
        "binding-stable-macos-arm64",
    }
    assert all(p.published for p in PARTS)  # no part only unpublished cells need


def test_published_cuda_11_needs_a_toolkit_of_its_own(tmp_path):
    """A published cu118 cell asks for CUDA 11 kernels, which no toolkit of [kernels] builds: refused by name."""
    data = tomllib.load(open(matrix.MATRIX_FILE, "rb"))
    data["torch"][0]["publish"].append("cu118")
    path = tmp_path / "matrix.toml"
    path.write_text(to_toml(data))
    with pytest.raises(matrix.MatrixError, match='CUDA 11, but no toolkit builds its CUDA 11 kernels: add "11"'):
        parts.load(str(path))
    data["kernels"]["cuda"]["11"] = "11.8"
    path.write_text(to_toml(data))
    cu11 = parts.find("kernels-cu11", parts.load(str(path)))
    assert cu11.toolkit == "11.8" and cu11.archs[-1] == "9.0+PTX"
    data["kernels"]["cuda"]["11"] = "12.8"
    path.write_text(to_toml(data))
    with pytest.raises(matrix.MatrixError, match="a CUDA 11.x version"):
        parts.load(str(path))


def slim_tag_of(m):
    """ci/builder/merge.py's name for the slim wheel of m's parts, from the metadata their builds write."""
    (binding,) = [p for p in m.parts if p.kind == "binding"]
    info = {"abi": binding.abi, "torch_version": binding.cell.torch_build, "cuda_version": binding.cell.cuda}
    return merge.slim_tag(info, {k.compute: {} for k in m.parts if k.kind == "kernels"})


def test_each_target_merges_one_wheel_and_the_slim_ones_the_pages_serve():
    published = parts.by_target(parts.select(PARTS, published=True))
    tags = {t: [m.local_tag for m in parts.merges(ps)] for t, ps in published.items()}
    assert tags["linux-x86_64"][:4] == ["", "cpu", "cu12", "cu13"]
    assert tags["linux-x86_64"][4:6] == ["pt24cu121", "pt24cpu"] and tags["linux-x86_64"][-1] == "pt29cpu"
    assert len(tags["linux-x86_64"]) == 4 + 2 * 6
    assert tags["linux-aarch64"] == tags["windows-amd64"] == ["", "cpu", "cu12", "cu13"]
    assert tags["macos-arm64"] == [""]  # no CUDA: a slim wheel would be the one wheel renamed
    for ps in published.values():
        one, *slim = parts.merges(ps)
        assert not one.slim and one.parts == tuple(ps) and one.local_tag == ""
        for m in slim:
            assert m.slim and m.local_tag == slim_tag_of(m), m  # the name merge --slim gives it
            assert [p.kind for p in m.parts][0] == "binding" and m.parts[1].compute == "cpu"
    # Can fail: the same binding with the CUDA 12 kernels too is another wheel to merge, pt24cu121.
    (pt24cpu,) = [m for m in parts.merges(published["linux-x86_64"]) if m.local_tag == "pt24cpu"]
    with_cuda = dataclasses.replace(pt24cpu, parts=pt24cpu.parts + (of("linux-x86_64")["kernels-cu12"],))
    assert slim_tag_of(with_cuda) == "pt24cu121" != pt24cpu.local_tag


def test_wheel_names_of_a_run():
    names = parts.target_wheels(parts.select(PARTS, pr=True), "0.2.0")
    assert names["macos-arm64"] == ["prerast-0.2.0-py3-none-macosx_11_0_arm64.whl"]
    assert names["linux-x86_64"][0] == "prerast-0.2.0-py3-none-manylinux_2_28_x86_64.whl"
    assert "prerast-0.2.0+pt24cu121-py3-none-manylinux_2_28_x86_64.whl" in names["linux-x86_64"]
    assert not [n for n in names["linux-x86_64"] if "+pt25" in n]  # the pr run builds the 2.4 binding only
    part = parts.find("kernels-cu12-linux-aarch64", PARTS)
    assert part.wheel_name("0.2.0") == "prerast-0.2.0+kernels.cu12-py3-none-manylinux_2_28_aarch64.whl"


def test_the_matrix_command_lists_the_parts_and_what_each_target_merges():
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "ci", "matrix", "--published"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    listed = out.split("parts (", 1)[1]
    for p in parts.select(PARTS, published=True):
        assert f"\n{p.id} " in listed, p.id
    assert (
        "kernels-cu12-linux-aarch64   linux-aarch64  CUDA 12 kernels: nvcc 12.6 (gcc 13), archs 8.7;9.0+PTX" in listed
    )
    assert "macos-arm64: prerast-<version>-py3-none-macosx_11_0_arm64.whl of 2 parts; slim wheels: none" in listed
    assert "2.14.1+cu130 " in out.split("parts (", 1)[0]  # the cells still come first
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "ci", "matrix", "--pr", "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert [p["id"] for p in data["parts"]] == [p.id for p in PARTS if p.pr]
    assert [c["id"] for c in data["cells"]] == [c.id for c in CELLS if c.pr]
    assert all(p["torch"] is None for p in data["parts"] if p["kind"] == "kernels" and p["target"] != "macos-arm64")
