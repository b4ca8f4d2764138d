"""The two builds of one binding source: the stable-ABI plugin and the classic (ATen) one register the same ops
with the same schemas, and a raw op refuses the same bad input with the same exception kind. The installed
plugin is one kind; the other is built here (CPU only) and each is loaded in a process of its own. Each also runs
out of memory (tests/support/out_of_memory.py): the classic kind raises torch.OutOfMemoryError, the stable kind a
RuntimeError that says so, which prerast's Python functions turn into torch.OutOfMemoryError."""

import json
import os
import subprocess
import sys

import pytest
import torch

import out_of_memory
from prerast import _loader, _ops
from prerast_meta import compat, sources as _sources

pytestmark = pytest.mark.wheel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Loads one binding (its CPU part) with a CPU kernel library, as the loader does (ctypes hands the binding the
# kernels' table), and prints its schemas, what a few bad raw calls raise and what running out of memory raises.
PROBE = (
    out_of_memory.CHILD
    + r"""
import ctypes
kernels = ctypes.CDLL(sys.argv[2])
kernels.prerast_kernel_table.restype = ctypes.c_void_p
torch.ops.load_library(sys.argv[1])
attach = ctypes.CDLL(sys.argv[1]).prerast_attach_kernels
attach.restype, attach.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
assert attach(kernels.prerast_kernel_table()) is None
oom = run(torch.ops.prerast)  # first: the kernel library keeps its scratch from call to call
schemas = sorted(str(s) for s in torch._C._jit_get_all_schemas() if s.name.startswith("prerast::"))
pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]]])
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
ops = torch.ops.prerast
calls = {
    "index out of range": lambda: ops.rasterize_fwd(pos, tri + 7, 8, 8, None, None),
    "bad resolution": lambda: ops.rasterize_fwd(pos, tri, 0, 8, None, None),
    "bad rank": lambda: ops.rasterize_fwd(pos[0, 0], tri, 8, 8, None, None),
    "rast IDs out of range": lambda: ops.interpolate_fwd(torch.ones(3, 2), torch.full((1, 2, 2, 4), 9.0), tri, None, []),
    "too many mip levels": lambda: ops.texture_fwd(torch.ones(1, 2, 2, 1), torch.ones(1, 1, 1, 2), None, None,
                                                   [torch.ones(1, 1, 1, 1)] * 3, 1, 0),
}
raised = {}
for name, call in calls.items():
    try:
        call()
        raised[name] = None
    except Exception as e:
        raised[name] = [type(e).__name__, str(e).splitlines()[0]]
rast, _ = ops.rasterize_fwd(pos, tri, 8, 8, None, None)
print(json.dumps({"schemas": schemas, "raised": raised, "covered": int((rast[..., 3] > 0).sum()),
                  "info": ops.binary_info(), "oom": oom}))
"""
)


def probe(library, kernels):
    out = subprocess.run([sys.executable, "-c", PROBE, library, kernels], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def other_kind(tmp_path_factory):
    """The binding (CPU part) of the kind that is not installed, built from the same sources, with its kernels."""
    installed = _loader.require()
    kind = "classic" if installed.get("abi") == "stable" else "stable"
    if kind == "stable" and compat.release(torch.__version__)[:2] < compat.STABLE_FLOOR:
        pytest.skip(f"torch {torch.__version__} is older than the stable ABI's floor")
    work = tmp_path_factory.mktemp("other-kind")
    tree = _sources.materialize(str(work / "src"))
    env = dict(os.environ, PRERAST_ABI=kind, PRERAST_FORCE_CPU="1")
    # Through the test environment's ccache (torch >= 2.13 puts one found on PATH in front of the compiler), kept
    # in .venv between runs; paths under the tree count as relative, so a tree at another temporary path hits.
    env.update(
        PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
        CCACHE_BASEDIR=tree,
        CCACHE_NOHASHDIR="1",
        CCACHE_DIR=os.path.join(ROOT, ".venv", "ccache-tests"),
    )
    out = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "-b", str(work / "lib"), "-t", str(work / "tmp")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(work / "lib" / "prerast" / "_build_info.json") as f:
        assert json.load(f)["abi"] == kind
    return kind, str(work / "lib" / "prerast" / "_C.abi3.so"), str(work / "lib" / "prerast" / "_kernels_cpu.abi3.so")


@pytest.fixture(scope="module")
def probes(other_kind):
    """{abi: what PROBE printed} of the installed binding and of the other kind, each in a process of its own."""
    kind, library, kernels = other_kind
    installed = _loader.require()
    return {installed["abi"]: probe(installed["path"], installed["kernel_path"]), kind: probe(library, kernels)}


def test_same_ops_same_schemas_same_refusals(other_kind, probes):
    kind = other_kind[0]
    mine, theirs = probes[_loader.require()["abi"]], probes[kind]
    assert f"abi={kind}" in theirs["info"] and f"abi={kind}" not in mine["info"]
    assert mine["schemas"] == theirs["schemas"] and len(mine["schemas"]) == 12
    assert mine["covered"] == theirs["covered"] > 0
    for name, got in mine["raised"].items():
        other = theirs["raised"][name]
        assert got is not None and other is not None, name
        assert got[0] == other[0] and got[1] == other[1], (name, got, other)


def test_both_kinds_report_out_of_memory(probes):
    assert sorted(probes) == ["classic", "stable"]
    for abi, got in probes.items():
        for where in ("raw scratch", "raw outputs"):
            name, message = got["oom"][where]
            assert out_of_memory.out_of_memory_problem(name, message, ["rasterize"], public=False) is None, (abi, where)
            assert name == ("OutOfMemoryError" if abi == "classic" else "RuntimeError"), (abi, where, message)
            # What the public functions raise for it (_ops.raises_typed): torch.OutOfMemoryError, either kind.
            typed = _ops.typed_error(_ops.OutOfMemoryError(message) if abi == "classic" else RuntimeError(message))
            assert isinstance(typed, _ops.OutOfMemoryError) and out_of_memory.OUT_OF_MEMORY_MARKER not in str(typed)
        assert got["oom"]["raw bad input"][0] == "ValueError", (abi, got["oom"]["raw bad input"])
