"""The attribute gradient of many vertices seen by few pixels (the CPU splits grad_attr into one band of rows per
thread instead of giving every thread a copy): the same numbers for one thread and for several, and the adjoint of
the forward (interpolate is linear in attr, so <interpolate(d), g> = <d, grad_attr> for any d and g)."""

import numpy as np
import torch

import prerast
from conftest import make_ctx, per_thread_count
from scenes import random_scene, to_torch


def scene(device):
    """3000 small triangles (9000 vertices of 16 attributes) over 64 x 64 pixels."""
    rng = np.random.default_rng(3)
    pos, tri = to_torch(*random_scene(rng, num_images=1, num_tris=3000, perspective=True), device)
    rast, rast_db = prerast.rasterize(make_ctx(device), pos, tri, (64, 64))
    gen = torch.Generator().manual_seed(4)
    attr = torch.rand(pos.shape[0], pos.shape[1], 16, generator=gen).to(device)
    grads = [torch.randn(1, 64, 64, n, generator=gen).to(device) for n in (16, 4)]
    return attr, rast.detach(), rast_db.detach(), tri, grads


def gradients(attr, rast, rast_db, tri, grads):
    attr, rast, rast_db = (t.clone().requires_grad_() for t in (attr, rast, rast_db))
    out, out_da = prerast.interpolate(attr, rast, tri, rast_db, diff_attrs=[0, 5])
    return torch.autograd.grad((out, out_da), (attr, rast, rast_db), grads)


def test_same_gradients_for_one_thread_and_several():
    attr, rast, rast_db, tri, grads = scene("cpu")
    assert (rast[..., 3] > 0).float().mean() > 0.5
    results = per_thread_count(lambda: gradients(attr, rast, rast_db, tri, grads))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_attribute_gradient_is_the_adjoint_of_the_forward(device):
    attr, rast, rast_db, tri, grads = scene(device)
    grad_attr = gradients(attr, rast, rast_db, tri, grads)[0]
    d = torch.randn(attr.shape, generator=torch.Generator().manual_seed(5)).to(device)
    with torch.no_grad():
        out, out_da = prerast.interpolate(d, rast, tri, rast_db, diff_attrs=[0, 5])
    lhs = (out.double() * grads[0].double()).sum() + (out_da.double() * grads[1].double()).sum()
    rhs = (d.double() * grad_attr.double()).sum()
    assert grad_attr.abs().sum() > 0
    torch.testing.assert_close(lhs, rhs, rtol=1e-4, atol=1e-3)
