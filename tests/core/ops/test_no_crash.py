"""Raw torch.ops.prerast calls with inputs that used to be read through without a check: each runs in a child
process, so that a crash is a failed test with its exit status, and must end in a clear Python exception."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each case a child process that imports torch

SETUP = """
import torch, prerast
ops = torch.ops.prerast
pos = torch.tensor([[[-0.5, -0.5, 0.0, 1.0], [0.5, -0.5, 0.0, 1.0], [0.0, 0.5, 0.0, 1.0]]])
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
rast, rast_db = ops.rasterize_fwd(pos, tri, 8, 8, None, None, True)
topo = prerast.antialias_construct_topology_hash(tri)
def corrupt(name, value):
    tables = [topo.half_edges, topo.group_of, topo.group_start]
    i = ["half_edges", "group_of", "group_start"].index(name)
    tables[i] = tables[i].clone().fill_(value)
    return tables
"""

CASES = {
    "rasterize_bwd, tri out of range": (
        "ops.rasterize_bwd(pos, tri + 10**8, rast, torch.ones_like(rast), None)",
        "IndexError",
        "vertex indices",
    ),
    "tri changed between rasterize and backward": (
        "p = pos.clone().requires_grad_(True); r, _ = prerast.rasterize(prerast.RasterizeCpuContext(), p, tri, (8, 8)); "
        "tri.data[:, 0] = 10**8; r.sum().backward()",
        "IndexError",
        "vertex indices",
    ),
    "texture_mip_down, no texels": ("ops.texture_mip_down(torch.ones(1, 0, 4, 3))", "ValueError", "no texels"),
    "texture_mip_down, no columns": ("ops.texture_mip_down(torch.ones(1, 4, 0, 3))", "ValueError", "no texels"),
    "antialias, half_edges out of range": (
        "ops.antialias_fwd(torch.ones(1, 8, 8, 3), rast, pos, tri, *corrupt('half_edges', 10**8), 1.0)",
        "IndexError",
        "topology_hash is corrupt",
    ),
    "antialias, negative group_of": (
        "ops.antialias_fwd(torch.ones(1, 8, 8, 3), rast, pos, tri, *corrupt('group_of', -5), 1.0)",
        "IndexError",
        "topology_hash is corrupt",
    ),
    "antialias, group_start past the end": (
        "ops.antialias_fwd(torch.ones(1, 8, 8, 3), rast, pos, tri, *corrupt('group_start', 10**6), 1.0)",
        "IndexError",
        "topology_hash is corrupt",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_clear_error_not_a_crash(case):
    code, kind, words = CASES[case]
    out = subprocess.run([sys.executable, "-c", SETUP + code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, f"exit status {out.returncode} (a negative one is a signal): {out.stderr[-2000:]}"
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(kind) and words in last, last
