"""The texture gradient of a texture larger than the image (the CPU splits it into one band of texels per thread
instead of giving every thread a copy): the same numbers for any thread count, and the adjoint of the forward
(texture is linear in tex, so <texture(d), g> = <d, grad_tex> for any d and output gradient g)."""

import pytest
import torch

import prerast
from conftest import per_thread_count

FILTERS = ("nearest", "linear", "linear-mipmap-nearest", "linear-mipmap-linear")


def scene(device, seed=0):
    """A 256^2 texture sampled by 2 x 48 x 48 pixels: far more texels than pixels."""
    gen = torch.Generator().manual_seed(seed)
    tex = torch.rand(1, 256, 256, 2, generator=gen)
    uv = torch.rand(2, 48, 48, 2, generator=gen) * 1.5 - 0.25
    uv_da = (torch.rand(2, 48, 48, 4, generator=gen) - 0.5) * 0.05
    grad = torch.randn(2, 48, 48, 2, generator=gen)
    return [t.to(device) for t in (tex, uv, uv_da, grad)]


def gradients(tex, uv, uv_da, grad, filter_mode):
    tex, uv, uv_da = (t.clone().requires_grad_() for t in (tex, uv, uv_da))
    out = prerast.texture(tex, uv, uv_da, filter_mode=filter_mode)
    wrt = (
        [tex, uv, uv_da] if filter_mode == "linear-mipmap-linear" else [tex, uv] if filter_mode != "nearest" else [tex]
    )
    return torch.autograd.grad(out, wrt, grad)


@pytest.mark.parametrize("filter_mode", FILTERS)
def test_same_gradients_for_any_thread_count(filter_mode):
    tex, uv, uv_da, grad = scene("cpu")
    results = per_thread_count(lambda: gradients(tex, uv, uv_da, grad, filter_mode))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("filter_mode", FILTERS)
def test_texture_gradient_is_the_adjoint_of_the_forward(device, filter_mode):
    tex, uv, uv_da, grad = scene(device, seed=1)
    grad_tex = gradients(tex, uv, uv_da, grad, filter_mode)[0]
    d = torch.randn(tex.shape, generator=torch.Generator().manual_seed(2)).to(device)
    with torch.no_grad():
        lhs = (prerast.texture(d, uv, uv_da, filter_mode=filter_mode).double() * grad.double()).sum()
    rhs = (d.double() * grad_tex.double()).sum()
    assert grad_tex.abs().sum() > 0
    torch.testing.assert_close(lhs, rhs, rtol=1e-4, atol=1e-3)
