"""python -m ci merge on parts cut from the build under test (its binding and its CPU kernel library, each made a
part wheel of its own as setup.py's PRERAST_PARTS builds would), with no build: what it refuses, what it records,
and that the merged wheel, unpacked, imports and renders in another process. The parts of a real build, merged
and installed into other torch releases, are tests/builder/test_one_wheel.py."""

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

import prerast
from prerast import _loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.build import merge as _merge  # noqa: E402
from prerast_meta import build_info, compat  # noqa: E402

VERSION = compat.base_version(prerast.__version__)
TAGS = "py3-none-manylinux_2_28_x86_64"
BINDING_KEYS = ("library", "cuda_library")


def part_wheel(folder, local, info, files, tags=TAGS, version=VERSION):
    """A part wheel in folder: the Python files of both packages a real part carries (setup.py's `packages`:
    prerast and prerast_meta, which prerast imports), the given libraries, info as its _build_info.json."""
    package = os.path.dirname(prerast.__file__)
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, f"prerast-{version}+{local}-{tags}.whl")
    dist = f"prerast-{version}+{local}.dist-info"
    with zipfile.ZipFile(name, "w") as z:
        for top, source in (("prerast", package), ("prerast_meta", os.path.join(ROOT, "prerast_meta"))):
            for py in sorted(os.listdir(source)):
                if py.endswith(".py"):
                    z.write(os.path.join(source, py), f"{top}/{py}")
        for lib in files:
            z.write(os.path.join(package, lib), f"prerast/{lib}")
        z.writestr("prerast/_build_info.json", json.dumps(info))
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: prerast\nVersion: {version}+{local}\n")
        z.writestr(f"{dist}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tags}\n")
        z.writestr(f"{dist}/RECORD", "")
    return name


@pytest.fixture
def parts(tmp_path):
    """{"binding": wheel, "kernels": wheel}: the build under test's binding (CPU part) and CPU kernels, apart."""
    info = dict(_loader.require())
    base = {k: v for k, v in info.items() if k in build_info.KEYS}
    stamps = info["libraries"]
    binding = dict(base, cuda_library=None, kernels={}, libraries={info["library"]: stamps[info["library"]]})
    cpu = info["kernels"]["cpu"]
    kernels = dict(
        base, library=None, cuda_library=None, kernels={"cpu": cpu}, libraries={cpu["library"]: stamps[cpu["library"]]}
    )
    return {
        "binding": part_wheel(str(tmp_path), "binding.stable", binding, [info["library"]]),
        "kernels": part_wheel(str(tmp_path), "kernels.cpu", kernels, [cpu["library"]]),
    }


def test_merged_parts_import_and_render_elsewhere(parts, tmp_path):
    merged = _merge.merge([parts["kernels"], parts["binding"]], str(tmp_path / "out"))
    assert os.path.basename(merged) == f"prerast-{VERSION}-{TAGS}.whl"
    with zipfile.ZipFile(merged) as z:
        info = json.loads(z.read("prerast/_build_info.json"))
        record = z.read(f"prerast-{VERSION}.dist-info/RECORD").decode()
        z.extractall(tmp_path / "site")
    # Every part recorded with its wheel's digest; every member of the wheel in RECORD.
    for record_of in info["parts"]:
        with open(parts["binding" if record_of["kind"] == "binding" else "kernels"], "rb") as f:
            assert record_of["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert sorted(p["kind"] for p in info["parts"]) == ["binding", "kernels"]
    assert all(f"prerast/{lib}," in record for lib in info["libraries"])
    code = (
        "import json, torch, prerast; from prerast import _loader\n"
        "pos = torch.tensor([[[-0.8, -0.8, 0, 1], [0.8, -0.8, 0, 1], [0, 0.8, 0, 1]]])\n"
        "rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos, torch.tensor([[0, 1, 2]], dtype=torch.int32),"
        " (8, 8))\n"
        "import prerast_meta\n"
        "print(json.dumps({'covered': int((rast[..., 3] > 0).sum()), 'path': _loader.status()['path'],"
        " 'meta': prerast_meta.__file__}))"
    )
    # -s, and the unpacked wheel as the only PYTHONPATH: prerast and prerast_meta come from the wheel, never from
    # the source tree or a wheel installed into this Python (a fresh clone has none).
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-s", "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["path"].startswith(str(tmp_path / "site")) and report["covered"] > 0
    assert report["meta"].startswith(str(tmp_path / "site"))


def test_parts_that_make_no_plugin_are_refused(parts, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(_merge.MergeRefused, match="no part carries a binding"):
        _merge.merge([parts["kernels"]], out)
    with pytest.raises(_merge.MergeRefused, match="no part carries the CPU kernel library"):
        _merge.merge([parts["binding"]], out)
    with pytest.raises(_merge.MergeRefused, match="both carry the stable binding"):
        _merge.merge([parts["binding"], parts["binding"], parts["kernels"]], out)
    with pytest.raises(_merge.MergeRefused, match="no parts given"):
        _merge.merge([], out)


def test_parts_of_another_build_are_refused(parts, tmp_path):
    out = str(tmp_path / "out")
    with zipfile.ZipFile(parts["kernels"]) as z:
        info = json.loads(z.read("prerast/_build_info.json"))
    lib = info["kernels"]["cpu"]["library"]
    foreign = {
        "version": part_wheel(str(tmp_path / "v"), "kernels.cpu", info, [lib], version="9.9.9"),
        "platform tag": part_wheel(str(tmp_path / "t"), "kernels.cpu", info, [lib], tags="py3-none-win_amd64"),
        "source tree": part_wheel(str(tmp_path / "s"), "kernels.cpu", dict(info, source_hash="0" * 16), [lib]),
    }
    for what, wheel in foreign.items():
        with pytest.raises(_merge.MergeRefused, match=f"parts of one {what} only"):
            _merge.merge([parts["binding"], wheel], out)
    # A part of the old cp310-abi3 tags would shut the merged wheel out of the free-threaded Pythons.
    abi3 = part_wheel(str(tmp_path / "a"), "kernels.cpu", info, [lib], tags="cp310-abi3-manylinux_2_28_x86_64")
    with pytest.raises(_merge.MergeRefused, match="tagged cp310-abi3-manylinux_2_28_x86_64: a part is py3-none-"):
        _merge.merge([parts["binding"], abi3], out)
    damaged = dict(info, libraries={lib: dict(info["libraries"][lib], sha256="f" * 64)})
    with pytest.raises(_merge.MergeRefused, match="damaged part is not merged"):
        _merge.merge([parts["binding"], part_wheel(str(tmp_path / "d"), "kernels.cpu", damaged, [lib])], out)


def test_slim_wheel_of_one_binding(parts, tmp_path):
    slim = _merge.merge([parts["binding"], parts["kernels"]], str(tmp_path), slim=True)
    # The stable binding with the CPU kernels alone: the CPU wheel of the index pages (untagged on macOS only).
    assert os.path.basename(slim) == f"prerast-{VERSION}+cpu-{TAGS}.whl"
    assert _merge.slim_tag({"abi": "stable", "torch_version": "2.14.1"}, {"cpu": {}, "cu12": {}}) == "cu12"
    assert _merge.slim_tag(
        {"abi": "classic", "torch_version": "2.4.0", "cuda_version": "12.1"}, {"cpu": {}, "cu12": {}}
    )
    assert (
        _merge.slim_tag({"abi": "classic", "torch_version": "2.4.0", "cuda_version": "12.1"}, {"cpu": {}}) == "pt24cpu"
    )


def test_merged_tags_take_the_newest_manylinux():
    make = lambda tags: _merge.Part("p.whl", VERSION, tags, {}, {})  # noqa: E731
    assert _merge.tag_family("py3-none-manylinux_2_17_x86_64") == "py3-none-manylinux_*_x86_64"
    tags = ["py3-none-manylinux_2_17_x86_64", "py3-none-manylinux_2_34_x86_64", "py3-none-manylinux_2_28_x86_64"]
    assert _merge.merged_tags([make(t) for t in tags]) == "py3-none-manylinux_2_34_x86_64"
    assert _merge.tag_family("py3-none-win_amd64") == "py3-none-win_amd64"
