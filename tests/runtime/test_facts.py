"""Facts the build, the matrix and the runtime share are stated once (prerast_meta.compat); where a file that
cannot import it has to spell one out (pyproject.toml's static metadata), it is checked here against that one
place, as is the binary that was built and installed."""

import importlib.metadata
import json
import os
import re
import sys
import tomllib

import pytest

import prerast
from prerast import _loader
from prerast_meta import build_info, compat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402


def test_requires_python_is_the_python_floor():
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    assert project["requires-python"] == f">={compat.python_floor_text()}"


def test_installed_binary_carries_the_shared_facts():
    info = _loader.require()
    assert info["python_tag"] == compat.WHEEL_TAG == "py3-none"
    if info["abi"] == "stable":
        assert info["torch_floor"] == compat.floor_text()
    tag = info["prerast_version"].partition("+")[2]
    assert tag == compat.local_tag(info["torch_version"], info["cuda_version"], info["abi"])
    wheel = os.environ.get("PRERAST_TEST_WHEEL")
    if wheel:  # the wheel ci/test.sh built: its name carries the same tags
        assert f"-{compat.WHEEL_TAG}-" in os.path.basename(wheel)
        assert os.path.basename(wheel).startswith(f"prerast-{info['prerast_version']}-")


@pytest.mark.wheel  # the metadata is an installed wheel's: the in-place build of the quick loop has none
def test_the_package_and_its_metadata_agree_on_the_version():
    # What pip installed (the wheel's METADATA, read by importlib), not the module the package imports it from.
    assert importlib.metadata.version("prerast").partition("+")[0] == prerast.__version__
    info, why = build_info.read(os.path.dirname(prerast.__file__))
    assert why is None and compat.base_version(info["prerast_version"]) == prerast.__version__


def test_build_info_keys_are_the_documented_ones():
    """The installed _build_info.json has exactly the keys of prerast_meta.build_info, each documented there."""
    with open(os.path.join(os.path.dirname(prerast.__file__), build_info.INFO_FILE)) as f:
        written = set(json.load(f))
    assert written == set(build_info.KEYS), written ^ set(build_info.KEYS)
    assert all(re.search(rf"\b{key}\b", build_info.__doc__) for key in build_info.KEYS)


def test_the_wheel_the_loader_names_is_one_the_matrix_builds_for_that_torch():
    """The loader's fix command names the one (untagged) wheel of the platform, from the page of the running torch
    build: for every torch build a published cell serves, that target's parts hold a binding serving it (the
    stable one from the floor on, its minor's classic one below) and the kernels of its CUDA major (the CPU ones
    for a CPU torch), so the one wheel merged from them serves it."""
    from ci.matrix import parts as _parts

    cells = matrix.load()
    by_target = _parts.by_target(_parts.select(_parts.load(cells=cells), published=True))
    checked = 0
    for cell in (c for c in cells if c.published):
        target_parts = by_target[cell.target.name]
        for release, platform in cell.serves:
            cuda = None if platform == "cpu" else f"{platform[2:-1]}.{platform[-1]}"  # cu126 -> 12.6
            stable = compat.release(release)[:2] >= compat.STABLE_FLOOR
            bindings = [
                p
                for p in target_parts
                if p.kind == "binding"
                and (p.abi == "stable" if stable else compat.minor(p.cell.torch) == compat.minor(release))
            ]
            compute = f"cu{compat.cuda_major(cuda)}" if cuda else "cpu"
            kernels = [p for p in target_parts if p.kind == "kernels" and p.compute == compute]
            assert bindings and kernels, (cell.id, release, platform)
            assert '"prerast==' + compat.base_version(compat.__version__) + '"' in compat.fix_command(
                {"python": "3.11.0", "torch_version": f"{release}+{platform}", "cuda_version": cuda, "cxx11_abi": 0}
            )
            checked += 1
    assert checked > 50
