"""Every prerast op is a proper custom op: torch.library.opcheck (schema, fake kernel, autograd registration,
AOT dispatch) passes with representative inputs; double backward raises instead of returning zeros."""

import importlib
import os
import sys

import pytest
import torch

import prerast
from conftest import make_ctx
from render_scene import grid_scene

OPS_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "ops")


def registered_ops():
    """Every prerast::* op the loaded plugin registered, by name, except binary_info (no tensors to check)."""
    return sorted(
        name.split("::")[1]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("prerast::") and name != "prerast::binary_info"
    )


OPS = registered_ops()


def extra_op_inputs(device):
    """The inputs that tests/core/ops/test_<op>.py files give for their ops, as an `opcheck_inputs(device)` function
    returning what op_inputs returns: a new op brings its cases in its own test file."""
    found = {}
    sys.path.insert(0, OPS_TESTS)
    try:
        for name in sorted(os.listdir(OPS_TESTS)):
            if name.startswith("test_") and name.endswith(".py"):
                with open(os.path.join(OPS_TESTS, name)) as f:
                    if "def opcheck_inputs(" not in f.read():
                        continue
                found.update(importlib.import_module(name[:-3]).opcheck_inputs(device))
    finally:
        sys.path.remove(OPS_TESTS)
    return found


def op_inputs(device):
    """op name -> list of (args, kwargs) that exercise it: instanced and range mode, with and without
    derivatives, plain and mipmapped textures; then the cases of tests/core/ops/ files (extra_op_inputs)."""
    return {**core_op_inputs(device), **extra_op_inputs(device)}


def core_op_inputs(device):
    pos, tri, uv, tex = grid_scene(n=3, images=2, device=device)
    pos.requires_grad_(True), uv.requires_grad_(True), tex.requires_grad_(True)
    ctx = make_ctx(device)
    ops = torch.ops.prerast
    rast, rast_db = ops.rasterize_fwd(pos.detach(), tri, 12, 10, None, None)
    ranges = torch.tensor([[0, 10], [4, 14]], dtype=torch.int32)
    rast_range, _ = ops.rasterize_fwd(pos[0].detach(), tri, 12, 10, ranges, None)
    texc, texd = prerast.interpolate(uv.detach(), rast, tri, rast_db=rast_db, diff_attrs="all")
    levels = [m.detach() for m in prerast.texture_construct_mip(tex)._levels]
    color = torch.rand(2, 12, 10, 3, device=device, requires_grad=True)
    topo = prerast.antialias_construct_topology_hash(tri)
    table = (topo.half_edges, topo.group_of, topo.group_start)
    out, crossing = ops.antialias_fwd(color.detach(), rast, pos.detach(), tri, *table)
    rast_g, db_g = rast.clone().requires_grad_(True), rast_db.clone().requires_grad_(True)
    cube = torch.rand(1, 6, 8, 8, 3, device=device, requires_grad=True)
    grad = lambda t: torch.randn_like(t)  # noqa: E731
    del ctx
    return {
        "rasterize_fwd": [
            ((pos, tri, 12, 10, None, None), {}),
            ((pos, tri, 12, 10, None, None, False), {}),
            ((pos, tri, 12, 10, None, None, True, False), {}),
            ((pos[0], tri, 12, 10, ranges, None), {}),
            ((pos, tri, 12, 10, None, rast), {}),
        ],
        "rasterize_bwd": [
            ((pos.detach(), tri, rast, grad(rast), grad(rast)), {}),
            ((pos[0].detach(), tri, rast_range, grad(rast_range), None), {}),
        ],
        # An empty list argument also arrives as None (as AOTInductor's proxy executor passes one).
        "interpolate_fwd": [
            ((uv, rast_g, tri, db_g, [0, 1]), {}),
            ((uv, rast_g, tri, None, []), {}),
            ((uv[:1], rast_g, tri, db_g, [1]), {}),
            ((uv, rast_g, tri, None, None), {}),
            ((uv, rast_g, tri, db_g, None), {}),
            ((uv[0], rast_range, tri, None, None), {}),
        ],
        "interpolate_bwd": [
            ((uv.detach(), rast, tri, rast_db, [0, 1], grad(texc), grad(texd)), {}),
            ((uv.detach(), rast, tri, None, [], grad(texc), None), {}),
            ((uv.detach(), rast, tri, rast_db, None, grad(texc), None), {}),
        ],
        "texture_fwd": [
            ((tex, texc.requires_grad_(True), texd.requires_grad_(True), None, levels, 3, 0), {}),
            ((tex, texc, None, None, [], 1, 1), {}),
            ((tex, texc, None, None, [], 0, 2), {}),
            ((tex, texc, None, None, None, 1, 0), {}),
            ((cube, torch.randn(2, 12, 10, 3, device=device), None, None, None, 1, 3), {}),
            ((tex, texc, texd, torch.rand(2, 12, 10, device=device), levels[:2], 2, 0), {}),
        ],
        "texture_bwd": [
            (
                (
                    tex.detach(),
                    texc.detach(),
                    texd.detach(),
                    None,
                    levels,
                    3,
                    0,
                    torch.randn(2, 12, 10, 3, device=device),
                ),
                {},
            ),
            ((tex.detach(), texc.detach(), None, None, [], 0, 1, torch.randn(2, 12, 10, 3, device=device)), {}),
            ((tex.detach(), texc.detach(), None, None, None, 1, 0, torch.randn(2, 12, 10, 3, device=device)), {}),
            (
                (
                    cube.detach(),
                    torch.randn(2, 12, 10, 3, device=device),
                    None,
                    None,
                    None,
                    1,
                    3,
                    torch.randn(2, 12, 10, 3, device=device),
                ),
                {},
            ),
            (
                (
                    tex.detach(),
                    texc.detach(),
                    texd.detach(),
                    None,
                    levels,
                    3,
                    0,
                    torch.randn(2, 12, 10, 3, device=device),
                    True,
                ),
                {},
            ),
        ],
        "texture_fwd_mipped": [
            ((tex, texc, texd, None, -1, 3, 0), {}),
            ((tex, texc, texd, torch.rand(2, 12, 10, device=device), 2, 2, 1), {}),
            (
                (
                    tex.detach().expand(1, 6, 16, 16, 3).contiguous().requires_grad_(True),
                    torch.randn(2, 12, 10, 3, device=device),
                    torch.randn(2, 12, 10, 6, device=device),
                    None,
                    -1,
                    3,
                    3,
                ),
                {},
            ),
        ],
        "texture_mip_down": [
            ((tex.view(1, 16, 16, 3),), {}),
            ((torch.rand(2, 5, 3, 2, device=device, requires_grad=True),), {}),
        ],
        "texture_mip_down_adjoint": [
            ((torch.rand(1, 8, 8, 3, device=device, requires_grad=True), 16, 16), {}),
            ((torch.rand(6, 2, 1, 3, device=device), 5, 3), {}),
        ],
        "antialias_fwd": [((color, rast, pos, tri, *table), {}), ((color, rast, pos, tri, *table, 2.0), {})],
        "antialias_bwd": [
            ((color.detach(), rast, pos.detach(), tri, *table, crossing, grad(out), 1.0, True), {}),
            ((color.detach(), rast, pos.detach(), tri, *table, crossing, grad(out), 1.0, False), {}),
        ],
    }


@pytest.mark.parametrize("op", OPS)
def test_opcheck(op, device):
    cases = op_inputs(device).get(op)
    assert cases, (
        f"prerast::{op} is registered but has no opcheck inputs: give tests/core/ops/test_<op>.py an "
        "opcheck_inputs(device) function returning {op name: [(args, kwargs), ...]}"
    )
    for args, kwargs in cases:
        torch.library.opcheck(getattr(torch.ops.prerast, op).default, args, kwargs)


def test_ops_are_the_registered_ones():
    """OPS comes from the dispatcher, not from a list: it holds the ops of every binding, and only those."""
    schemas = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("prerast::")}
    assert schemas - {"binary_info"} == set(OPS)
    assert {"rasterize_fwd", "interpolate_bwd", "texture_fwd_mipped", "antialias_fwd"} <= set(OPS)


def test_every_op_has_inputs(device):
    missing = sorted(set(OPS) - set(op_inputs(device)))
    assert not missing, f"ops with no opcheck inputs: {missing} (see test_opcheck's message)"


def test_public_functions_have_no_autograd_function(device):
    """Each public function's backward is its op's registered autograd formula (torch.library.register_autograd,
    which torch.compile traces), never an autograd.Function of our own: every custom backward node in the graph
    of a textured, antialiased render is one torch generated for a prerast op."""
    pos = torch.tensor(
        [[[-0.9, -0.9, 0.5, 1.0], [0.9, -0.8, 0.5, 1.0], [-0.7, 0.9, 0.5, 1.0]]], device=device, requires_grad=True
    )
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device)
    rast, rast_db = prerast.rasterize(make_ctx(device), pos, tri, (16, 16))
    uv = torch.rand(1, 3, 2, device=device, requires_grad=True)
    texc, texd = prerast.interpolate(uv, rast, tri, rast_db=rast_db, diff_attrs="all")
    tex = torch.rand(1, 8, 8, 3, device=device, requires_grad=True)
    out = prerast.antialias(prerast.texture(tex, texc, texd, filter_mode="linear-mipmap-linear"), rast, pos, tri)
    custom, seen, todo = set(), set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            custom.add(type(node).__name__)
        todo += [n for n, _ in node.next_functions]
    generated = {n for n in custom if n.startswith("GeneratedBackwardFor_prerast_")}
    assert custom == generated, f"autograd.Function nodes of our own: {custom - generated}"
    assert {n.split("_prerast_")[1].split("_fwd")[0] for n in generated} >= {
        "rasterize",
        "interpolate",
        "texture",
        "antialias",
    }


def test_double_backward_raises(device):
    pos, tri, uv, tex = grid_scene(n=3, device=device)
    pos.requires_grad_(True), tex.requires_grad_(True)
    target = torch.rand(1, 12, 12, 3, device=device)
    _, loss = __import__("render_scene").render(make_ctx(device), pos, tri, uv, tex, target)
    grad_pos, grad_tex = torch.autograd.grad(loss, (pos, tex), create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        (grad_pos.square().sum() + grad_tex.square().sum()).backward()
