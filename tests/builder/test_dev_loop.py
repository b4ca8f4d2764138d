"""The dev loop of README "Developing": `python -m ci dev --cpu` builds the plugin in place in a copy of the working
tree, an edit of one C++ file recompiles that file alone, and pytest run through `python -m ci dev -- ...` sees the
edit. CPU only, with a compiler cache kept in .venv/ccache-tests between runs (a copy of the tree elsewhere hits
the same entries: CCACHE_BASEDIR), so that after the first run the whole file costs seconds of compiling."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

import fresh_clone

ROOT = fresh_clone.ROOT
sys.path.insert(0, ROOT)
from ci.builder import cells, dev  # noqa: E402
from prerast_meta import sources as _sources  # noqa: E402

pytestmark = pytest.mark.slow  # in-place builds in a copy of the tree

CCACHE_DIR = os.path.join(ROOT, ".venv", "ccache-tests")
EDITED = "csrc/bindings/library.cpp"  # binary_info(): "version=...;abi=..."
MARK = "dev-loop-edit"

PROBE = """
import json, os, torch, prerast
from prerast import _loader
print(json.dumps({"file": prerast.__file__, "source": _loader.status()["source"],
                  "info": torch.ops.prerast.binary_info()}))
"""

PROBE_TEST = f"""
import os, torch, prerast

def test_sees_the_edit():
    assert os.path.dirname(prerast.__file__) == {{package!r}}
    assert "{MARK}" in torch.ops.prerast.binary_info()
"""


def run_dev(copy, *args):
    env = dict(os.environ, CCACHE_DIR=CCACHE_DIR)
    env.pop("PRERAST_FORCE_CPU", None)
    out = subprocess.run(
        [sys.executable, "-m", "ci", "dev", "--cpu", *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    (reported,) = re.findall(r"(\d+) object\(s\) recompiled(?:: (.*)| \(nothing had changed\))$", out.stdout, re.M)
    return out.stdout, (reported[1].split(", ") if reported[1] else [])


def probe(copy):
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=copy, env=dev.pytest_env(copy), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A copy of the working tree with the CPU plugin built in place."""
    path = str(tmp_path_factory.mktemp("dev-loop") / "prerast")
    cells.copy_source(path)
    run_dev(path)
    return path


def test_in_place_build_is_what_the_package_loads(copy):
    package = os.path.join(copy, dev.PACKAGE)
    info = json.load(open(os.path.join(package, "_build_info.json")))
    assert info["cuda_library"] is None and os.path.isfile(os.path.join(package, info["library"]))
    got = probe(copy)
    assert got["file"] == os.path.join(package, "__init__.py")  # the copy's package, not an installed prerast
    assert got["source"] == "bundled" and MARK not in got["info"]
    assert got["info"].startswith(f"version={info['prerast_version']};")


def test_an_edit_recompiles_its_file_alone_and_pytest_sees_it(copy):
    temp = dev.build_dir(copy, cpu=True)
    before = dev.objects(temp)
    assert len(before) >= 9  # every CPU source has its object
    assert run_dev(copy)[1] == []  # nothing changed: nothing recompiled

    path = os.path.join(copy, EDITED)
    text = open(path).read()
    assert text.count('";abi="') == 1
    with open(path, "w") as f:
        f.write(text.replace('";abi="', f'";{MARK};abi="'))
    package = os.path.join(copy, dev.PACKAGE)
    with open(os.path.join(copy, "tests", "test_dev_loop_probe.py"), "w") as f:
        f.write(PROBE_TEST.format(package=package))
    stdout, reported = run_dev(copy, "--", "-q", "-p", "no:cacheprovider", "tests/test_dev_loop_probe.py")
    assert "1 passed" in stdout
    # Only the edited file's object was rewritten (the build folder's own record, not just the command's word).
    after = dev.objects(temp)
    # Each library builds in a folder of its own (setup.py): the CPU library's is prerast._C.
    assert dev.recompiled(before, after) == reported == ["prerast._C/csrc/bindings/library.o"]


def test_in_place_files_stay_out_of_a_wheel_and_the_shipped_sources(copy, tmp_path):
    package = os.path.join(copy, dev.PACKAGE)
    assert glob.glob(os.path.join(package, "_C*.so")) and os.path.exists(os.path.join(package, "_build_info.json"))
    # What a wheel's build_py puts in the wheel: the Python package and its _src copy, no in-place build output.
    lib = tmp_path / "lib"
    env = dict(os.environ, PRERAST_FORCE_CPU="1")
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    shipped = [os.path.relpath(os.path.join(d, n), lib) for d, _, files in os.walk(lib) for n in files]
    assert "prerast/__init__.py" in shipped and "prerast/_src/csrc/bindings/library.cpp" in shipped
    assert not [n for n in shipped if n.endswith((".so", ".o", "_build_info.json")) or "/build/" in n], shipped
    # A source tree made from the package (python -m prerast build-wheel) carries none either.
    tree = _sources.materialize(str(tmp_path / "tree"), root=copy, package_dir=package)
    made = [os.path.join(d, n) for d, _, files in os.walk(tree) for n in files]
    assert not [n for n in made if n.endswith((".so", ".o", "_build_info.json"))]
    assert not os.path.exists(os.path.join(tree, "build"))


def test_missing_ninja_is_named_with_its_fix(tmp_path):
    with pytest.raises(dev.ToolMissing, match=r"pip install -r ci/requirements-build.txt"):
        dev.check_tools({"PATH": str(tmp_path)})
