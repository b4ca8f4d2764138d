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


def test_requires_python_is_the_abi3_floor():
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    assert project["requires-python"] == f">={compat.python_floor_text()}"


def test_installed_binary_carries_the_shared_facts():
    info = _loader.require()
    assert info["python_tag"] == f"{compat.PYTHON_TAG}-abi3"
    if info["abi"] == "stable":
        assert info["torch_floor"] == compat.floor_text()
    tag = info["prerast_version"].partition("+")[2]
    assert tag == compat.local_tag(info["torch_version"], info["cuda_version"], info["abi"])
    wheel = os.environ.get("PRERAST_TEST_WHEEL")
    if wheel:  # the wheel ci/test.sh built: its name carries the same tags
        assert f"-{compat.PYTHON_TAG}-abi3-" in os.path.basename(wheel)
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
    """For every torch build the matrix serves, the tag the loader's fix command names (compat.serving_tag) is the
    local tag of a cell that serves that build: the loader never sends a user to a wheel nobody builds for it
    (a CPU torch from the floor on takes PyPI's untagged CUDA wheel, which serves CPU torch too)."""
    cells = matrix.load()
    checked = 0
    for cell in cells:
        for release, platform in cell.serves:
            cuda = None if platform == "cpu" else f"{platform[2:-1]}.{platform[-1]}"  # cu126 -> 12.6
            builders = {c.local_tag for c in cells if c.target == cell.target and (release, platform) in c.serves}
            assert compat.serving_tag(f"{release}+{platform}", cuda) in builders, (release, platform, builders)
            checked += 1
    assert checked > 50
