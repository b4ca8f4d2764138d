"""Every command of README.md's ```bash blocks is tested, and this table says how. A command added to the README
without an entry here fails test_every_readme_command_has_a_test.

  run     runs for real in a fresh clone, with the PATH of a new user (the Python environment the README has
          them make, then the system's programs less the build tools the README does not ask for)
  help    too long to run here: its --help runs in the fresh clone and must list every option the README gives
  test    the named test (path::function) runs it, or what it does, and must exist
  ci      the named file runs it: CI runs that file
  syntax  a shell script that needs a GPU: bash -n checks it parses
"""
import json
import os
import re
import shlex
import subprocess
import zipfile

import pytest

import fresh_clone

README = os.path.join(fresh_clone.ROOT, "README.md")
CELL_BUILD = "tests/ci/test_cell_end_to_end.py::test_cpu_cell_builds_end_to_end_from_a_fresh_clone"
IMAGES = "tests/ci/test_two_images.py::"
EXAMPLES = "tests/examples/test_examples.py::"

HOW = {
    "bash ci/quickstart.sh": {"syntax": True, "ci": ("ci/test.sh", "ci wheel build"),
                              "test": "tests/ci/test_runtime_wheel.py::test_wheel_renders_without_compiler"},
    "bash ci/test.sh": {"ci": (".ci/run", "bash ci/test.sh")},
    "python -m prerast doctor": {"run": True},
    "python -m prerast doctor --json": {"run": True},
    'python -m prerast build-wheel --arch "8.0;9.0+PTX" --out dist': {
        "help": "python -m prerast build-wheel --help", "test": IMAGES + "test_build_wheel_from_checkout"},
    "pip install --no-deps dist/prerast-*.whl": {"test": IMAGES + "test_runtime_renders_from_wheel"},
    'PRERAST_BUILD_ON_MISMATCH=1 PRERAST_CACHE_DIR=/opt/prerast-cache python -c "import prerast"': {
        "test": IMAGES + "test_racing_first_uses_build_once"},
    "export PRERAST_CACHE_DIR=/opt/prerast-cache": {"test": IMAGES + "test_runtime_loads_copied_cache"},
    "export CUDA_HOME=/usr/local/cuda": {"ci": ("ci/test.sh", "export CUDA_HOME=")},
    'export PRERAST_CUDA_ARCH_LIST="8.0;9.0+PTX"': {
        "ci": ("ci/test.sh", "export PRERAST_CUDA_ARCH_LIST="),
        "test": "tests/ci/test_built_wheel.py::test_named_after_its_cell_and_built_for_this_torch"},
    "pip wheel --no-build-isolation --no-deps -w dist .": {
        "ci": ("ci/wheel.py", '"--no-build-isolation", "--no-deps", "-w"'),
        "test": "tests/ci/test_built_wheel.py::test_no_torch_or_cuda_library_inside"},
    "python3.11 -m ci matrix --local": {"run": True},
    "python3.11 -m ci build --cell 2.14.1+cu130": {"help": "python3.11 -m ci build --help", "test": CELL_BUILD},
    'python3.11 -m ci build --cell 2.9+cu130 --cell 2.14.1+cu130@3.12 --archs "8.0;9.0+PTX"': {
        "help": "python3.11 -m ci build --help", "test": CELL_BUILD},
    "python3.11 -m ci build --all-local": {"help": "python3.11 -m ci build --help", "test": CELL_BUILD},
    "python3.11 -m ci summary": {"run": True},
    "python3.11 -m ci index dist/cells --out site/whl": {"run": True},
    "pip install prerast -f https://prerast.github.io/whl/torch-2.14.1+cu130.html": {
        "test": "tests/ci/test_index.py::test_find_links_page_gives_the_newest_wheel_this_python_can_run"},
    'pip install "prerast==0.1.0+pt24cu121" --extra-index-url https://prerast.github.io/whl/simple': {
        "test": "tests/ci/test_index.py::test_pep503_index_serves_every_build"},
    "python3.11 -m ci symbols dist/prerast-0.1.0-cp310-abi3-*.whl": {
        "help": "python3.11 -m ci symbols --help",
        "test": "tests/ci/test_built_wheel.py::test_stable_plugin_imports_only_torchs_c_shims"},
    "python3.11 -m ci abi-proof dist/prerast-0.1.0-cp310-abi3-*.whl": {
        "help": "python3.11 -m ci abi-proof --help", "test": "tests/ci/test_abi_proof.py::test_proof_of_one_torch"},
    "python3.11 -m ci abi-proof --build 2.4.0 --cpu --torch 2.4.1 --refused 2.9.1": {
        "help": "python3.11 -m ci abi-proof --help", "test": "tests/ci/test_abi_proof.py::test_proof_of_one_torch"},
    "python benchmarks/run.py --quick": {"run": True},
    "python benchmarks/run.py --only rasterize --json r.json": {"help": "python benchmarks/run.py --help"},
    "python benchmarks/run.py --scenes vs-llvmpipe --json ops.json": {"help": "python benchmarks/run.py --help"},
    "python benchmarks/vs_llvmpipe.py": {"help": "python benchmarks/vs_llvmpipe.py --help"},
    "bash ci/gpu_check.sh": {"syntax": True},
    "python examples/triangle.py": {"test": "tests/examples/test_examples.py::test_triangle"},
    "python examples/cube.py --steps 400": {"help": "python examples/cube.py --help",
                                            "test": EXAMPLES + "test_loss_falls"},
    "python examples/pose.py --device cuda": {"help": "python examples/pose.py --help",
                                              "test": EXAMPLES + "test_loss_falls"},
    "python examples/textured_sphere.py": {"test": EXAMPLES + "test_loss_falls"},
    "python examples/envmap.py": {"test": EXAMPLES + "test_loss_falls"},
    "python -m prerast precompile mypackage.scene:Renderer --inputs example_inputs.pt --out render.pt2": {
        "help": "python -m prerast precompile --help",
        "test": "tests/test_precompile.py::test_runtime_loads_inference_artifact_without_compiler"},
}

# Commands the README names in its prose (not in a block) that a new user runs first.
ALSO_RUN = ["python -m prerast demo"]


def readme_commands():
    """The commands of README.md's ```bash blocks: comments dropped, whitespace collapsed, in order."""
    commands, in_block = [], False
    for line in open(README):
        if line.startswith("```"):
            in_block = line.strip() == "```bash"
            continue
        if in_block:
            command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if command and command not in commands:
                commands.append(command)
    return commands


def test_every_readme_command_has_a_test():
    commands = readme_commands()
    assert len(commands) > 15  # the parser found the blocks
    untested = [c for c in commands if c not in HOW]
    assert not untested, f"README.md commands with no entry in tests/test_readme.py HOW: {untested}"
    stale = [c for c in HOW if c not in commands]
    assert not stale, f"HOW lists commands the README no longer has: {stale}"
    for command in ALSO_RUN:
        assert f"`{command}`" in open(README).read()


@pytest.mark.parametrize("command", [c for c, how in HOW.items() if "test" in how or "ci" in how])
def test_named_test_or_ci_step_exists(command):
    how = HOW[command]
    if "test" in how:
        path, name = how["test"].split("::")
        assert f"def {name}(" in open(os.path.join(fresh_clone.ROOT, path)).read(), how["test"]
    if "ci" in how:
        path, text = how["ci"]
        assert text in open(os.path.join(fresh_clone.ROOT, path)).read(), how["ci"]


def test_ci_runs_the_test_script():
    assert "exec bash ci/test.sh" in open(os.path.join(fresh_clone.ROOT, ".ci", "run")).read()


@pytest.mark.parametrize("command", [c for c, how in HOW.items() if how.get("syntax")])
def test_script_parses(command):
    script = shlex.split(command)[1]
    out = subprocess.run(["bash", "-n", script], cwd=fresh_clone.ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    path = fresh_clone.clone(root / "prerast")
    # What `ci index` indexes: a wheel in dist/cells (a stand-in with the metadata the index reads).
    cell = os.path.join(path, "dist", "cells", "2.13.0+cpu-py3.11")
    os.makedirs(cell)
    with zipfile.ZipFile(os.path.join(cell, "prerast-0.1.0+pt213cpu-cp310-abi3-manylinux_2_28_x86_64.whl"), "w") as z:
        z.writestr("prerast/_build_info.json", json.dumps({"prerast_version": "0.1.0+pt213cpu",
                                                           "torch_version": "2.13.0+cpu", "cuda_version": None}))
        z.writestr("prerast-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: prerast\nVersion: 0.1.0+pt213cpu\n"
                                                       "Requires-Python: >=3.10\n")
    env = fresh_clone.fresh_env([fresh_clone.venv_bin(), fresh_clone.system_bin(root / "system-bin")])
    return path, env


def run(command, clone):
    path, env = clone
    return subprocess.run(["bash", "-c", command], cwd=path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("command", [c for c, how in HOW.items() if how.get("run")] + ALSO_RUN)
def test_command_runs_in_a_fresh_clone(command, clone):
    out = run(command, clone)
    assert out.returncode == 0, f"$ {command}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    if "--json" in command and "doctor" in command:
        assert json.loads(out.stdout)["exit_code"] == 0
    if "ci index" in command:
        assert os.path.exists(os.path.join(clone[0], "site", "whl", "torch-2.13.0+cpu.html"))
    if "ci matrix --local" in command:
        assert "2.13.0+cpu" in out.stdout and "->" in out.stdout


@pytest.mark.parametrize("command", [c for c, how in HOW.items() if "help" in how])
def test_long_command_documents_the_options_the_readme_uses(command, clone):
    out = run(HOW[command]["help"], clone)
    assert out.returncode == 0, out.stderr
    for option in re.findall(r"(?<!\S)(--[a-z][\w-]*)", command):
        assert option in out.stdout, f"{option} of `{command}` is not in `{HOW[command]['help']}`"
