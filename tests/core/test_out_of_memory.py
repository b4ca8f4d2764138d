"""Memory that cannot be had reaches the caller as torch.OutOfMemoryError, wherever it ran out: in the kernel
library (its std::bad_alloc crosses the C interface as a failure of kind kKernelOutOfMemory) or in torch's
allocator (an output of the binding); other failures keep their types. Proven on the CPU, in a child process
whose address space is limited a little above what it holds, so that the allocations fail for real. The
binding's other kind (classic or stable) is checked the same way by tests/builder/test_abi_kinds.py."""

import json
import os
import subprocess
import sys

import pytest
import torch

import out_of_memory
import prerast
from prerast import _loader, _ops

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="limits RLIMIT_AS, reads /proc")

MAIN = out_of_memory.CHILD + "\nimport prerast\nprint(json.dumps(run(ops, prerast)))\n"


@pytest.fixture(scope="module")
def raised():
    proc = subprocess.run(
        [sys.executable, "-c", MAIN], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("where", ["scratch", "outputs", "interpolate outputs"])
def test_public_functions_raise_out_of_memory_error(raised, where):
    kind, message = raised[f"public {where}"]
    op = "interpolate" if "interpolate" in where else "rasterize"
    assert out_of_memory.out_of_memory_problem(kind, message, [op], public=True) is None
    assert out_of_memory.OUT_OF_MEMORY_MARKER not in message, message


@pytest.mark.parametrize("where", ["scratch", "outputs"])
def test_raw_ops_say_out_of_memory_and_the_op(raised, where):
    kind, message = raised[f"raw {where}"]
    assert out_of_memory.out_of_memory_problem(kind, message, ["rasterize"], public=False) is None
    # The stable ABI cannot raise torch's type; the classic binding raises it itself.
    assert kind == ("RuntimeError" if _loader.require()["abi"] == "stable" else "OutOfMemoryError"), message
    assert "out of memory" in message
    if where == "scratch":  # the kernel library's own allocation: its entry is named
        assert "rasterize_forward_cpu: out of memory" in message, message


def test_other_failures_keep_their_types(raised):
    assert raised["raw bad input"][0] == "ValueError", raised["raw bad input"]


def test_out_of_memory_error_is_the_one_torch_raises():
    # torch.cuda.OutOfMemoryError is the class torch raises for CUDA memory; torch.OutOfMemoryError its name
    # from torch 2.5 on. Callers catch either.
    assert _ops.OutOfMemoryError is torch.cuda.OutOfMemoryError
    assert issubclass(_ops.OutOfMemoryError, RuntimeError)
    plain = RuntimeError("rasterize: CUDA error: an illegal memory access was encountered")
    assert _ops.typed_error(plain) is plain


def test_public_functions_translate_under_torch_compile_too():
    # Traced, a public function is the op's fake: nothing to translate, and no try block for Dynamo to trace.
    ctx = prerast.RasterizeCpuContext()
    pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    compiled = torch.compile(lambda p: prerast.rasterize(ctx, p, tri, (8, 8))[0], fullgraph=True, backend="eager")
    assert torch.equal(compiled(pos), prerast.rasterize(ctx, pos, tri, (8, 8))[0])


def test_marker_is_the_one_the_stable_facade_appends():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "csrc", "bindings", "facade_stable.h")) as f:
        source = f.read()
    assert f'kOutOfMemoryMarker = "{out_of_memory.OUT_OF_MEMORY_MARKER}";' in source
