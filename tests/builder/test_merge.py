"""python -m ci merge on parts cut from the build under test (its binding and its CPU kernel library, each made a
part wheel of its own as setup.py's PRERAST_PARTS builds would), with no build: what it refuses, what it records,
and that the merged wheel, unpacked, imports and renders in another process. The parts of a real build, merged
and installed into other torch releases, are tests/builder/test_one_wheel.py."""

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest

import prerast
from prerast import _loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import merge as _merge  # noqa: E402
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


def merge_in_child(parts, out, tz, umask, epoch=None):
    """`python -m ci merge` in a process of its own with that TZ, umask and $SOURCE_DATE_EPOCH; the wheel's bytes."""
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    env.update(TZ=tz, **({"SOURCE_DATE_EPOCH": str(epoch)} if epoch is not None else {}))
    script = f"umask {umask} && exec {sys.executable} -m ci merge --out {out} " + " ".join(parts)
    done = subprocess.run(["sh", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (path,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    with open(path, "rb") as f:
        return f.read()


def test_the_same_parts_merge_into_the_same_bytes_at_any_time_tz_and_umask(parts, tmp_path):
    order = [parts["kernels"], parts["binding"]]
    first = merge_in_child(order, tmp_path / "a", "UTC", "022")
    time.sleep(2.1)  # past zip's 2-second date resolution: a merge that read the clock would differ
    second = merge_in_child(order[::-1], tmp_path / "b", "Asia/Kolkata", "077")
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    # The dates are the parts' newest; the modes 0755 for what the parts had executable, 0644 for the rest.
    with zipfile.ZipFile(parts["kernels"]) as k, zipfile.ZipFile(parts["binding"]) as b:
        inputs = k.infolist() + b.infolist()
    newest = max(i.date_time for i in inputs)
    executable = {i.filename for i in inputs if (i.external_attr >> 16) & 0o111}
    assert executable, "the part wheels carry no executable library to check the modes with"
    with zipfile.ZipFile(tmp_path / "a" / os.listdir(tmp_path / "a")[0]) as z:
        for item in z.infolist():
            assert item.date_time == newest, item.filename
            mode = 0o755 if item.filename in executable else 0o644
            assert (item.external_attr >> 16) & 0o7777 == mode, item.filename


def test_source_date_epoch_dates_every_member(parts, tmp_path):
    epoch = 1767225600  # 2026-01-01 00:00:00 UTC, whatever TZ the merge runs under
    data = merge_in_child([parts["kernels"], parts["binding"]], tmp_path / "a", "America/New_York", "022", epoch)
    other = merge_in_child([parts["kernels"], parts["binding"]], tmp_path / "b", "Asia/Tokyo", "002", epoch)
    assert data == other
    with zipfile.ZipFile(tmp_path / "a" / os.listdir(tmp_path / "a")[0]) as z:
        assert {i.date_time for i in z.infolist()} == {(2026, 1, 1, 0, 0, 0)}
    with pytest.raises(_merge.MergeRefused, match="SOURCE_DATE_EPOCH"):
        _merge.member_date([], {"SOURCE_DATE_EPOCH": "yesterday"})


def test_a_part_carrying_a_library_its_build_did_not_stamp_is_refused(parts, tmp_path):
    """A part is one build: a library another part's build left in the source tree (and that rode along in this
    part's wheel) would make the part's bytes depend on what was built before it."""
    stray = str(tmp_path / "stray" / os.path.basename(parts["binding"]))
    os.makedirs(os.path.dirname(stray))
    with zipfile.ZipFile(parts["binding"]) as src, zipfile.ZipFile(stray, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
        dst.writestr("prerast/_kernels_cu13.abi3.so", b"left over")
    with pytest.raises(_merge.MergeRefused, match=r"carries prerast/_kernels_cu13\.abi3\.so, which its build did not"):
        _merge.merge([parts["kernels"], stray], str(tmp_path / "out"))
    _merge.merge([parts["kernels"], parts["binding"]], str(tmp_path / "ok"))  # the part as built merges
