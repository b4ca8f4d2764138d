"""python -m ci merge-target (the workflow's merge job) on stand-in part wheels of the matrix's parts: the wheels it
writes are the ones the matrix names (ci/matrix/parts.py merges), and a target with a part missing, doubled or a
CUDA torch's binding without its CUDA part merges nothing. The libraries are bytes, not programs: merge checks
their stamps and never loads them (tests/builder/test_merge.py merges real ones)."""

import json
import os
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import merge_target  # noqa: E402
from ci.matrix import parts  # noqa: E402
from prerast_meta import compat, integrity  # noqa: E402

PR = parts.by_target(parts.select(parts.load(), pr=True))
VERSION = "0.2.0"


def stand_in(folder, part, version=VERSION, cuda_part=True):
    """The wheel a part's job uploads, with stand-in libraries stamped as its build stamps them."""
    base = {"source_hash": "0123456789abcdef", "prerast_version": f"{version}+{part.local_tag}", "bindings": []}
    if part.kind == "kernels":
        name = f"_kernels_{part.compute}.abi3.so"
        kernel = {"library": name, "cuda_version": part.toolkit or None, "nvcc_version": None, "interface": 1}
        info = dict(base, abi=None, library=None, cuda_library=None, kernels={part.compute: kernel})
        info["kernels"][part.compute]["cuda_archs"] = list(part.archs)
        libs = [name]
    else:
        cuda = bool(part.cell.cuda) and cuda_part
        libs = ["_C.abi3.so"] + (["_C_cuda.abi3.so"] if cuda else [])
        info = dict(
            base,
            abi=part.abi,
            torch_floor=compat.floor_text() if part.abi == "stable" else None,
            torch_version=part.cell.torch_build,
            cuda_version=part.cell.cuda,
            cxx11_abi=True,
            library=libs[0],
            cuda_library=libs[1] if cuda else None,
            kernels={},
        )
    data = {lib: f"{part.id} {lib}".encode() * 64 for lib in libs}
    info["libraries"] = {lib: integrity.stamp_bytes(d) for lib, d in data.items()}
    path = os.path.join(folder, part.wheel_name(version))
    dist = f"prerast-{version}+{part.local_tag}.dist-info"
    os.makedirs(folder, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/__init__.py", "")
        for lib, d in data.items():
            z.writestr(f"prerast/{lib}", d)
        z.writestr("prerast/_build_info.json", json.dumps(info))
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: prerast\nVersion: {version}+{part.local_tag}\n")
        z.writestr(f"{dist}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-{part.target.plat}\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def info_of(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("prerast/_build_info.json"))


@pytest.fixture
def x86(tmp_path):
    """The part wheels of a pull request's Linux x86-64 parts, with an aarch64 part next to them."""
    folder = tmp_path / "parts"
    for part in PR["linux-x86_64"]:
        stand_in(str(folder), part)
    stand_in(str(folder), PR["linux-aarch64"][0])  # another target's part: not this merge's
    return folder


def test_the_one_wheel_and_the_slim_ones_are_the_matrixs(x86, tmp_path, capsys):
    assert merge_target.main(["linux-x86_64", "--pr", "--parts", str(x86), "--out", str(tmp_path / "out")]) == 0
    written = sorted(os.listdir(tmp_path / "out"))
    assert written == sorted(parts.target_wheels(parts.select(parts.load(), pr=True), VERSION)["linux-x86_64"])
    one = info_of(tmp_path / "out" / f"prerast-{VERSION}-py3-none-manylinux_2_28_x86_64.whl")
    assert sorted(one["kernels"]) == ["cpu", "cu12", "cu13"]
    assert one["abi"] == "stable" and [b["torch_version"] for b in one["bindings"]] == ["2.4.0+cu121"]
    assert len(one["parts"]) == len(PR["linux-x86_64"])  # the aarch64 part was left where it was
    slim = info_of(tmp_path / "out" / f"prerast-{VERSION}+pt24cu121-py3-none-manylinux_2_28_x86_64.whl")
    assert slim["abi"] == "classic" and sorted(slim["kernels"]) == ["cpu", "cu12"] and slim["bindings"] == []
    assert "binding   torch 2.4.x, built with torch 2.4.0+cu121 + CUDA part" in capsys.readouterr().out


def test_a_target_with_a_missing_part_merges_nothing(x86, tmp_path, capsys):
    os.remove(x86 / parts.find("binding-pt24").wheel_name(VERSION))
    out = tmp_path / "out"
    assert merge_target.main(["linux-x86_64", "--pr", "--parts", str(x86), "--out", str(out)]) == 1
    assert "linux-x86_64: parts missing under" in capsys.readouterr().err
    assert not out.exists()  # nothing merged, so nothing for the smoke job to pass on
    # The published selection asks for more parts still: every classic binding.
    assert merge_target.main(["linux-x86_64", "--published", "--parts", str(x86), "--out", str(out)]) == 1
    assert (
        "binding-pt24, binding-pt25, binding-pt26, binding-pt27, binding-pt28, binding-pt29" in capsys.readouterr().err
    )


def test_a_part_twice_or_a_cuda_binding_without_its_cuda_part_is_refused(x86, tmp_path, capsys):
    again = tmp_path / "again"
    stand_in(str(again), parts.find("kernels-cu12"))
    assert merge_target.main(["linux-x86_64", "--pr", "--parts", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "parts found twice: kernels-cu12" in capsys.readouterr().err
    os.remove(again / parts.find("kernels-cu12").wheel_name(VERSION))
    stand_in(str(x86), parts.find("binding-stable"), cuda_part=False)  # built where no CUDA headers were found
    assert merge_target.main(["linux-x86_64", "--pr", "--parts", str(x86), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "binding was built with torch 2.14.1+cu130 but has no CUDA part" in err and "binding-stable" in err


def test_a_target_without_cuda_merges_its_one_wheel_only(tmp_path):
    for part in PR["macos-arm64"]:
        stand_in(str(tmp_path / "parts"), part)
    written = merge_target.merge_target(PR["macos-arm64"], str(tmp_path / "parts"), str(tmp_path / "out"))
    assert [os.path.basename(p) for p in written] == [f"prerast-{VERSION}-py3-none-macosx_11_0_arm64.whl"]
    assert merge_target.main(["linux-riscv64", "--pr", "--parts", str(tmp_path), "--out", str(tmp_path)]) == 2
