"""Facts the build, the matrix and the runtime share are stated once (prerast_meta.compat); where a file that
cannot import it has to spell one out (pyproject.toml's static metadata), it is checked here against that one
place, as is the binary that was built and installed."""
import json
import os
import re
import tomllib

import prerast
from prerast import _loader
from prerast_meta import build_info, compat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_requires_python_is_the_abi3_floor():
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    assert project["requires-python"] == f">={compat.python_floor_text()}"
    assert compat.PYTHON_TAG == "cp%d%d" % compat.PYTHON_FLOOR


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


def test_the_package_and_its_metadata_agree_on_the_version():
    assert prerast.__version__ == compat.__version__
    info, why = build_info.read(os.path.dirname(prerast.__file__))
    assert why is None and compat.base_version(info["prerast_version"]) == prerast.__version__


def test_build_info_keys_are_the_documented_ones():
    """The installed _build_info.json has exactly the keys of prerast_meta.build_info, each documented there."""
    with open(os.path.join(os.path.dirname(prerast.__file__), build_info.INFO_FILE)) as f:
        written = set(json.load(f))
    assert written == set(build_info.KEYS), (written ^ set(build_info.KEYS))
    assert all(re.search(rf"\b{key}\b", build_info.__doc__) for key in build_info.KEYS)


def test_serving_tag_and_build_tag_agree():
    """The wheel the loader names for a running torch is the one a build with that torch makes (a CPU torch
    from the floor on takes PyPI's untagged wheel, which serves CPU torch too)."""
    for torch_version, cuda in (("2.14.1+cu130", "13.0"), ("2.12.0+cu126", "12.6"), ("2.4.1+cu121", "12.1"),
                                ("2.9.0+cpu", None)):
        kind = compat.abi_kind(torch_version)
        assert compat.serving_tag(torch_version, cuda) == compat.local_tag(torch_version, cuda, kind)
    assert compat.serving_tag("2.13.0+cpu", None) == "" != compat.local_tag("2.13.0", None, "stable")
