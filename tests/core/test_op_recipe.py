"""docs/architecture.md's "Checklist for a new op" is carried out, not just read: a copy of the source tree gains a toy
op, `scale` (out = x * s, differentiable in x), written into exactly the files the checklist lists and no others;
the CPU library is built in place there (`python -m ci dev --cpu`, ccache and ninja as in the dev loop) and the op
runs through torch.ops.prerast, the public function, torch.library.opcheck and tests/runtime/test_custom_ops.py, which
finds the new op by itself. A step the checklist forgets (a source list, a table of ops) fails here.

The build recompiles the toy op's two sources and relinks (the others come from ccache when this checkout was built
before): about 30 s on two busy cores, up to 90 s with a cold cache.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
# What the copy holds: everything a build and the op tests read.
TREE = [
    "setup.py",
    "pyproject.toml",
    ".clang-format",
    "MANIFEST.in",
    "README.md",
    "LICENSE",
    "csrc",
    "prerast_meta",
    "package",
    "ci",
    "tests",
    "docs",
]
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.so", "*.pyd", "_build_info.json", "_src", "*.egg-info", "_build", "gallery"
)
OP = "scale"

# The toy op's text for each file of the checklist, by the checklist's name for it (<op> for the op's name). A
# file that exists already gets the text inserted where the "anchor" says.
TOY = {
    "csrc/core/<op>.h": """\
// scale: out = x * s, the per-element math shared by the CPU loop and the CUDA kernel.
#pragma once

#include <cstdint>

#include "common.h"

namespace prerast {

PR_HD float scale_one(float x, float s) { return x * s; }

struct ScaleArgs {  // what the binding hands the kernel library's entries
  const float* x;
  int64_t n;
  float s;
  float* out;
};

void scale_cpu(const ScaleArgs& a, const ParallelFor& pfor);
const char* scale_cuda(const ScaleArgs& a, StreamHandle stream);

}  // namespace prerast
""",
    "csrc/core/<op>_cpu.cpp": """\
#include "kernel_entry.h"
#include "scale.h"

namespace prerast {

void scale_cpu(const ScaleArgs& a, const ParallelFor& pfor) {
  pfor(a.n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) a.out[i] = scale_one(a.x[i], a.s);
  });
}

PRERAST_CPU_ENTRY(scale_cpu, ScaleArgs, a, k) { scale_cpu(a, k.pfor); }

}  // namespace prerast
""",
    "csrc/core/<op>_cuda.cu": """\
#include "cuda_helpers.cuh"
#include "kernel_entry.h"
#include "scale.h"

namespace prerast {
namespace {

__global__ void scale_kernel(const float* x, int64_t n, float s, float* out) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale_one(x[i], s);
}

}  // namespace

const char* scale_cuda(const ScaleArgs& a, StreamHandle stream) {
  if (a.n == 0) return nullptr;
  scale_kernel<<<grid_for(a.n, 256), 256, 0, (cudaStream_t)stream>>>(a.x, a.n, a.s, a.out);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

PRERAST_CUDA_ENTRY(scale_cuda, ScaleArgs, a, k) { return scale_cuda(a, k.stream); }

}  // namespace prerast
""",
    "csrc/bindings/<op>.cpp": """\
// scale: out = x * s.
#include "common.h"
#include "../core/scale.h"

namespace prerast {
namespace {

constexpr const char* kOp = "scale";

Tensor scale(const Tensor& x, double s) {
  check_tensor(kOp, "x", x, Dtype::Float, {1, 2, 3, 4});
  auto out = empty_like_float(kOp, x);
  const int64_t n = out.numel();
  if (n == 0) return out;
  const ScaleArgs a{data<float>(x), n, (float)s, data<float>(out)};
  run_on_device(
      kOp, x, [&] { kernels::cpu("scale_cpu", a); },
      [&](StreamHandle stream) { return kernels::cuda("scale_cuda", a, stream); });
  return out;
}

}  // namespace
}  // namespace prerast

#ifndef PRERAST_CUDA_LIBRARY
PRERAST_LIBRARY_FRAGMENT(m) {
  m.def("scale(Tensor x, float s) -> Tensor");
}
#endif

PRERAST_KERNELS(m) {
  m.impl("scale", PRERAST_KERNEL(prerast::scale));
}
""",
    "package/prerast/_<op>.py": '''\
"""scale: the public API over the prerast::scale op, and its fake and autograd."""
import torch

from . import _checks, _loader, _ops

API_SECTION = "Scaling"  # where the API reference lists scale (docs/api.rst's prerast-remaining)


def scale(x, s):
    """Multiply a tensor by a number.

    Args:
        x (torch.Tensor): float32, of rank 1 to 4. Differentiable.
        s (float): the factor.

    Returns:
        torch.Tensor: x * s, on x's device.
    """
    _loader.require()
    _checks.tensor("scale", "x", x, torch.float32)
    return torch.ops.prerast.scale(x.contiguous(), float(s))


def _scale_fake(x, s):
    return torch.empty_like(x)


def _scale_setup(ctx, a, output):
    ctx.s = a.s


def _scale_backward(ctx, grad):
    return {"x": torch.ops.prerast.scale(grad.contiguous(), ctx.s)}


_ops.define({"scale": (_scale_fake, _scale_setup, _scale_backward)})
''',
    "package/prerast/__init__.py": {
        "from ._rasterize import DepthPeeler, rasterize  # noqa: E402\n": "from ._scale import scale  # noqa: E402\n",
        '    "rasterize",\n': '    "scale",\n',
    },
    "tests/core/ops/test_<op>.py": """\
import torch

import prerast


def opcheck_inputs(device):
    x = torch.randn(2, 3, 4, device=device, requires_grad=True)
    return {"scale": [((x, 2.5), {}), ((x[0], -1.0), {})]}


def test_scale(device):
    x = torch.randn(5, 7, device=device, requires_grad=True)
    torch.testing.assert_close(prerast.scale(x, 3.0), x.detach() * 3.0, rtol=0, atol=0)
    torch.testing.assert_close(torch.ops.prerast.scale(x, -2.0), x.detach() * -2.0, rtol=0, atol=0)
    prerast.scale(x, 3.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
    torch.library.opcheck(torch.ops.prerast.scale.default, (x, 0.5))
""",
}


def recipe_files():
    """The files of docs/architecture.md's checklist table, as written there (with <op>)."""
    with open(ARCHITECTURE) as f:
        text = f.read()
    section = text.split("### Checklist for a new op", 1)[1].split("\n#", 1)[0]
    return [m for row in re.findall(r"^\| (`.*?) \|", section, re.M) for m in re.findall(r"`([^`]+)`", row)]


def add_toy_op(root):
    for template, text in TOY.items():
        path = os.path.join(root, *template.replace("<op>", OP).split("/"))
        if isinstance(text, dict):
            with open(path) as f:
                content = f.read()
            for anchor, line in text.items():
                assert anchor in content, f"{template}: the toy op's anchor {anchor!r} is gone; update TOY"
                content = content.replace(anchor, anchor + ("\n" if anchor.startswith("..") else "") + line, 1)
            text = content
        with open(path, "w") as f:
            f.write(text)


def test_every_source_is_compiled():
    """prerast_meta/sources.py's rule takes every .cpp/.cu under csrc/ into a library: a file it misses (a binding
    under a subfolder, a core file without _cpu or .cu) would be shipped and hashed but never compiled."""
    sys.path.insert(0, ROOT)
    from prerast_meta import sources

    assert sources.uncompiled_sources(ROOT) == []
    cpu, cuda = sources.library_sources(ROOT, "kernels-cpu"), sources.library_sources(ROOT, "kernels-cuda")
    assert "csrc/core/rasterize_cpu.cpp" in cpu and "csrc/core/rasterize_cuda.cu" in cuda
    assert "csrc/bindings/rasterize.cpp" in sources.library_sources(ROOT, "binding")


def test_a_source_no_library_compiles_is_reported(tmp_path):
    sys.path.insert(0, ROOT)
    from prerast_meta import sources

    for rel in (
        "setup.py",
        "csrc/core/scale.h",
        "csrc/core/scale_cpu.cpp",
        "csrc/core/scale_host.cpp",
        "csrc/bindings/scale.cpp",
        "csrc/bindings/cuda/scale.cpp",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert sources.uncompiled_sources(str(tmp_path)) == ["csrc/bindings/cuda/scale.cpp", "csrc/core/scale_host.cpp"]
    assert sources.library_sources(str(tmp_path), "binding") == ["csrc/bindings/scale.cpp"]
    assert sources.library_sources(str(tmp_path), "kernels-cpu") == ["csrc/core/scale_cpu.cpp"]


def test_toy_op_is_what_the_recipe_lists():
    """The toy op writes exactly the checklist's files: the recipe and this test cannot part."""
    assert sorted(TOY) == sorted(recipe_files())
    assert len(recipe_files()) <= 7


@pytest.fixture(scope="module")
def tree_with_toy_op(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("recipe"))
    for name in TREE:
        src = os.path.join(ROOT, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(root, name), ignore=IGNORE)
        else:
            shutil.copy2(src, os.path.join(root, name))
    add_toy_op(root)
    return root


@pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "csrc", "core", "common.h")), reason="needs the source tree")
def test_toy_op_builds_and_runs(tree_with_toy_op):
    """Built as the dev loop builds (the CPU library in place), then run by its own tests and the op tests."""
    root = tree_with_toy_op
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    cmd = [
        sys.executable,
        "-m",
        "ci",
        "dev",
        "--cpu",
        "--",
        "-q",
        "-p",
        "no:cacheprovider",
        f"tests/core/ops/test_{OP}.py",
        "tests/runtime/test_custom_ops.py",
        "-k",
        OP,
    ]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-6000:]
    # test_scale, test_opcheck[scale] on each device pytest runs here.
    assert re.search(r"\b[2-9]\d* passed", log) and " failed" not in log, log[-3000:]
    built = re.search(r"built in \S+: (\d+) object\(s\) recompiled: (.*)", log)
    print(built.group(0) if built else log[-3000:])
    assert built and f"csrc/bindings/{OP}.o" in built.group(2) and f"csrc/core/{OP}_cpu.o" in built.group(2), log


# The suite's checks over every op, module and source file, run whole on the tree with the toy op: a new op that
# needed an edit outside the recipe's files (a schema table, the API reference, the import layers, the formatters'
# rules) fails here.
WHOLE_TREE_CHECKS = [
    "tests/runtime/test_op_schemas.py",
    "tests/docs/test_docstrings.py",
    "tests/builder/test_import_tree.py",
    "tests/builder/test_lint.py",
]


def test_the_suites_whole_tree_checks_pass_with_the_toy_op(tree_with_toy_op):
    root = tree_with_toy_op
    # The recipe's last step: the formatters over its files (docs/contributing.md), as a contributor runs them.
    files = [t.replace("<op>", OP) for t in recipe_files()]
    tools = os.path.dirname(sys.executable)
    for cmd in (
        [os.path.join(tools, "ruff"), "check", "--fix", "--quiet", *[f for f in files if f.endswith(".py")]],
        [os.path.join(tools, "ruff"), "format", "--quiet", *[f for f in files if f.endswith(".py")]],
        [os.path.join(tools, "clang-format"), "-i", *[f for f in files if f.endswith((".h", ".cpp", ".cu"))]],
    ):
        subprocess.run(cmd, cwd=root, check=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-m", "ci", "dev", "--cpu", "--", "-q", "-p", "no:cacheprovider", *WHOLE_TREE_CHECKS]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and " passed" in log and " failed" not in log, log[-6000:]
