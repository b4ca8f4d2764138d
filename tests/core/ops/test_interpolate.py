"""interpolate against the NumPy model, screen-space finite differences and central differences of its
gradients."""

import numpy as np
import pytest
import torch

import prerast
import reference_shading as ref
from conftest import make_ctx
from scenes import random_scene, to_torch

H, W = 20, 24


def hand_rast(rng, num_images, num_tris, height=H, width=W):
    """A rast built by hand: random IDs (about a quarter background), barycentrics and derivatives."""
    ids = rng.integers(0, num_tris + 1, size=(num_images, height, width))
    ids[rng.random(ids.shape) < 0.25] = 0
    u = rng.random(ids.shape)
    v = rng.random(ids.shape) * (1 - u)
    rast = np.stack([u, v, rng.uniform(-1, 1, ids.shape), ids], -1) * (ids > 0)[..., None]
    db = rng.normal(size=(num_images, height, width, 4)) * (ids > 0)[..., None]
    return rast.astype(np.float32), db.astype(np.float32)


def attr_for(rng, mode, num_images, num_vertices, num_attrs):
    shape = {
        "range": (num_vertices, num_attrs),
        "instanced": (num_images, num_vertices, num_attrs),
        "shared": (1, num_vertices, num_attrs),
    }[mode]
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["instanced", "shared", "range"])
@pytest.mark.parametrize("diff", [None, [1], "all", [2, 0, 2]])
def test_matches_reference_on_hand_made_rast(device, mode, diff):
    rng = np.random.default_rng(1)
    N, V, T, A = 3, 9, 7, 4
    rast, db = hand_rast(rng, N, T)
    tri = rng.integers(0, V, size=(T, 3)).astype(np.int32)
    attr = attr_for(rng, mode, N, V, A)
    t = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    out, out_da = prerast.interpolate(t(attr), t(rast), t(tri), rast_db=t(db), diff_attrs=diff)
    want_diff = list(range(A)) if diff == "all" else (diff or [])
    want, want_da = ref.interpolate(attr, rast, tri, db, want_diff)
    assert out.shape == (N, H, W, A) and out_da.shape == (N, H, W, 2 * len(want_diff))
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_da.cpu().numpy(), want_da, rtol=1e-5, atol=1e-5)
    assert (out.cpu().numpy()[rast[..., 3] == 0] == 0).all(), "background must be zero"


@pytest.mark.parametrize("seed", range(2))
def test_matches_reference_on_rasterized_scene(ctx, seed):
    rng = np.random.default_rng(seed)
    pos, tri = random_scene(rng, num_images=2, num_tris=15)
    p, t = to_torch(pos, tri, ctx.device)
    rast, db = prerast.rasterize(ctx, p, t, (H, W))
    attr = rng.normal(size=(2, pos.shape[1], 5)).astype(np.float32)
    out, out_da = prerast.interpolate(torch.from_numpy(attr).to(ctx.device), rast, t, rast_db=db, diff_attrs=[4, 1])
    want, want_da = ref.interpolate(attr, rast.cpu().numpy(), tri, db.cpu().numpy(), [4, 1])
    assert (rast[..., 3] > 0).float().mean() > 0.2, "scene too empty to test"
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_da.cpu().numpy(), want_da, rtol=1e-4, atol=1e-5)


def test_without_rast_db_no_derivatives(device):
    rng = np.random.default_rng(2)
    rast, _ = hand_rast(rng, 1, 2)
    tri = torch.tensor([[0, 1, 2], [2, 1, 3]], dtype=torch.int32, device=device)
    attr = torch.randn(4, 3, device=device)
    out, out_da = prerast.interpolate(attr, torch.from_numpy(rast).to(device), tri)
    assert out.shape == (1, H, W, 3) and out_da.shape == (1, H, W, 0)
    with pytest.raises(ValueError, match="diff_attrs needs rast_db"):
        prerast.interpolate(attr, torch.from_numpy(rast).to(device), tri, diff_attrs="all")
    _, out_da = prerast.interpolate(
        attr, torch.from_numpy(rast).to(device), tri, rast_db=torch.zeros(1, H, W, 4, device=device)
    )
    assert out_da.shape == (1, H, W, 0)


@pytest.mark.parametrize("perspective", [False, True])
def test_derivatives_match_screen_space_differences(ctx, perspective):
    # A big triangle: dA/dX from rast_db must match the change of the interpolated attribute from one pixel to
    # the next (central differences; the attribute is smooth, and exactly linear without perspective).
    w = np.array([1.0, 2.5, 0.7]) if perspective else np.ones(3)
    xy = np.array([[-3.0, -3.0], [4.0, -3.0], [0.2, 4.0]])
    pos = np.concatenate([xy * w[:, None], 0.2 * w[:, None], w[:, None]], -1)[None].astype(np.float32)
    tri = np.array([[0, 1, 2]], np.int32)
    p, t = to_torch(pos, tri, ctx.device)
    rast, db = prerast.rasterize(ctx, p, t, (32, 32))
    attr = torch.tensor([[0.0, 3.0], [1.0, -2.0], [5.0, 0.5]], device=ctx.device)
    out, out_da = prerast.interpolate(attr, rast, t, rast_db=db, diff_attrs="all")
    out, out_da = out[0].cpu().numpy().astype(np.float64), out_da[0].cpu().numpy()
    assert (rast[0, 1:-1, 1:-1, 3] == 1).all()
    dx = (out[1:-1, 2:] - out[1:-1, :-2]) / 2
    dy = (out[2:, 1:-1] - out[:-2, 1:-1]) / 2
    tol = 2e-2 if perspective else 1e-4
    np.testing.assert_allclose(out_da[1:-1, 1:-1, 0::2], dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(out_da[1:-1, 1:-1, 1::2], dy, rtol=tol, atol=tol)


def central_difference(loss, x, index, h):
    x_p, x_m = x.clone(), x.clone()
    x_p[index] += h
    x_m[index] -= h
    return (loss(x_p) - loss(x_m)) / (2 * h)


@pytest.mark.parametrize("mode", ["instanced", "shared", "range"])
def test_gradients_match_finite_differences(device, mode):
    rng = np.random.default_rng(3)
    N, V, T, A = 2, 6, 5, 3
    rast, db = hand_rast(rng, N, T, 8, 9)
    tri = torch.from_numpy(rng.integers(0, V, size=(T, 3)).astype(np.int32)).to(device)
    attr = torch.from_numpy(attr_for(rng, mode, N, V, A)).to(device)
    rast, db = torch.from_numpy(rast).to(device), torch.from_numpy(db).to(device)
    w_out = torch.randn(N, 8, 9, A, device=device)
    w_da = torch.randn(N, 8, 9, 4, device=device)
    diff = [2, 0]

    def loss(attr_, rast_, db_):
        out, out_da = prerast.interpolate(attr_, rast_, tri, rast_db=db_, diff_attrs=diff)
        return (out.double() * w_out).sum() + (out_da.double() * w_da).sum()

    leaves = [x.clone().requires_grad_(True) for x in (attr, rast, db)]
    loss(*leaves).backward()
    grads = [x.grad for x in leaves]
    assert (grads[1][..., 2:] == 0).all(), "z/w and ID get no gradient"
    g = torch.Generator().manual_seed(0)
    for which, x in enumerate((attr, rast, db)):
        for _ in range(12):
            index = tuple(int(torch.randint(s, (1,), generator=g)) for s in x.shape)
            if which == 1 and index[-1] >= 2:
                index = index[:-1] + (index[-1] - 2,)
            args = [attr, rast, db]

            def f(v, which=which):
                args_ = list(args)  # noqa: B023 (f is called in this iteration only)
                args_[which] = v
                return loss(*args_)

            with torch.no_grad():
                numeric = central_difference(f, x, index, 1e-2).item()
            assert grads[which][index].item() == pytest.approx(numeric, rel=1e-3, abs=1e-3), (which, index)


def test_rast_db_gets_no_gradient_without_derivatives(device):
    rng = np.random.default_rng(4)
    rast, db = hand_rast(rng, 1, 2)
    tri = torch.tensor([[0, 1, 2], [2, 1, 3]], dtype=torch.int32, device=device)
    attr = torch.randn(4, 2, device=device, requires_grad=True)
    db = torch.from_numpy(db).to(device).requires_grad_(True)
    out, _ = prerast.interpolate(attr, torch.from_numpy(rast).to(device), tri, rast_db=db)
    out.sum().backward()
    assert db.grad is None and attr.grad is not None


def test_empty_inputs(device):
    attr = torch.zeros(0, 3, device=device)
    tri = torch.zeros(0, 3, dtype=torch.int32, device=device)
    out, out_da = prerast.interpolate(attr, torch.zeros(2, 4, 5, 4, device=device), tri)
    assert out.shape == (2, 4, 5, 3) and (out == 0).all() and out_da.shape == (2, 4, 5, 0)
    out, _ = prerast.interpolate(
        torch.zeros(3, 0, device=device),
        torch.zeros(1, 4, 5, 4, device=device),
        torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device),
    )
    assert out.shape == (1, 4, 5, 0)


def test_deterministic_backward(device):
    rng = np.random.default_rng(5)
    rast, db = hand_rast(rng, 2, 3, 64, 64)
    tri = torch.tensor([[0, 1, 2], [2, 1, 3], [3, 1, 0]], dtype=torch.int32, device=device)
    grads = []
    for _ in range(2):
        attr = torch.ones(4, 3, device=device, requires_grad=True)
        out, _ = prerast.interpolate(attr, torch.from_numpy(rast).to(device), tri)
        (out * torch.arange(3.0, device=device)).sum().backward()
        grads.append(attr.grad)
    if device == "cpu":
        assert torch.equal(grads[0], grads[1])
    else:
        torch.testing.assert_close(grads[0], grads[1])


def test_cpu_and_cuda_agree_bitwise_in_forward(device):
    if device == "cpu":
        pytest.skip("compares the CUDA result with the CPU one")
    rng = np.random.default_rng(6)
    pos, tri = random_scene(rng, num_images=2, num_tris=30)
    attr = torch.from_numpy(rng.normal(size=(2, pos.shape[1], 6)).astype(np.float32))
    results = []
    for dev in ("cpu", device):
        ctx = make_ctx(dev)
        p, t = to_torch(pos, tri, dev)
        rast, db = prerast.rasterize(ctx, p, t, (H, W))
        results.append([x.cpu() for x in prerast.interpolate(attr.to(dev), rast, t, rast_db=db, diff_attrs="all")])
    for a, b in zip(*results):
        assert torch.equal(a, b)
