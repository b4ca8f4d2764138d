"""The interpolate backward where neighbouring pixels show the same triangle (the CPU sums such a run of pixels
before adding it to the three attribute rows): grad_rast and grad_db are each pixel's own sums over the attributes,
in attribute order, to the bit; grad_attr matches a float64 NumPy sum over the pixels; runs end at image boundaries when every
image has its own attributes; a triangle that names one vertex twice gets both contributions; and the bands a large
grad_attr is split into give the same bits for any thread count."""

import numpy as np
import pytest
import torch

import prerast
from conftest import make_ctx, per_thread_count

H, W = 48, 64


def scene(device, num_images=3):
    """Two large triangles (runs of dozens of pixels) and a sprinkle of small ones (runs of a few), per image."""
    rng = np.random.default_rng(11)
    big = [[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]]
    small = rng.uniform(-0.9, 0.9, size=(60, 1, 2)) + rng.uniform(-0.06, 0.06, size=(60, 3, 2))
    xy = np.concatenate([np.array(big), small.reshape(-1, 2)])
    V = xy.shape[0]
    pos = np.zeros((num_images, V, 4), np.float32)
    for n in range(num_images):
        w = rng.uniform(0.6, 2.0, size=V)
        pos[n, :, :2] = xy * [(-1) ** n, 1] * w[:, None]  # mirrored: a run goes on from one image to the next
        pos[n, :, 2] = rng.uniform(0.1, 0.9, size=V) * w
        pos[n, :, 2][6:] -= 0.5 * w[6:]  # the small triangles in front
        pos[n, :, 3] = w
    tri = np.arange(V, dtype=np.int32).reshape(-1, 3)
    p, t = torch.from_numpy(pos).to(device), torch.from_numpy(tri).to(device)
    rast, db = prerast.rasterize(make_ctx(device), p, t, (H, W))
    return p, t, rast, db


def backward(attr, rast, tri, db, diff, grad_out, grad_da):
    return torch.ops.prerast.interpolate_bwd(
        attr, rast, tri, db if diff else None, diff, grad_out, grad_da if diff else None
    )


def reference(attr, rast, tri, diff, grad_out, grad_da, db):
    """NumPy: grad_rast and grad_db summed over attributes in float32, in attribute order; grad_attr in float64."""
    attr, rast, tri, grad_out = (x.cpu().numpy() for x in (attr, rast, tri, grad_out))
    N, V, A = attr.shape if attr.ndim == 3 else (rast.shape[0],) + attr.shape
    attrs = attr if attr.ndim == 3 else np.broadcast_to(attr, (N, V, A))
    ids = rast[..., 3].astype(np.int64)  # small IDs are exact in float32
    hit = ids > 0
    rows = tri[np.maximum(ids - 1, 0)]  # [N, H, W, 3]
    image = np.arange(N)[:, None, None]
    a = [attrs[image, rows[..., j]] for j in range(3)]  # [N, H, W, A] each
    u, v = rast[..., 0], rast[..., 1]
    w = (np.float32(1) - u) - v
    gu = np.zeros(u.shape, np.float32)
    gv = np.zeros(u.shape, np.float32)
    for c in range(A):
        gu = gu + grad_out[..., c] * (a[0][..., c] - a[2][..., c])
        gv = gv + grad_out[..., c] * (a[1][..., c] - a[2][..., c])
    grad_rast = np.stack([gu, gv, np.zeros_like(gu), np.zeros_like(gu)], -1) * hit[..., None]
    gdb = [np.zeros(u.shape, np.float32) for _ in range(4)]
    for k, c in enumerate(diff):
        gx, gy = (grad_da[..., 2 * k + i].cpu().numpy() for i in range(2))
        d0, d1 = a[0][..., c] - a[2][..., c], a[1][..., c] - a[2][..., c]
        gdb = [gdb[0] + gx * d0, gdb[1] + gy * d0, gdb[2] + gx * d1, gdb[3] + gy * d1]
    grad_db = np.stack(gdb, -1) * hit[..., None]
    grad_attr = np.zeros((N, V, A) if attr.ndim == 3 else (V, A))
    weights = [u, v, w]
    terms = np.abs(grad_attr.copy())
    for j in range(3):
        contrib = (grad_out.astype(np.float64) * weights[j][..., None].astype(np.float64)) * hit[..., None]
        if diff:
            db_ = db.cpu().numpy().astype(np.float64)
            gda = grad_da.cpu().numpy().astype(np.float64)
            for k, c in enumerate(diff):
                gx, gy = gda[..., 2 * k], gda[..., 2 * k + 1]
                w0, w1 = gx * db_[..., 0] + gy * db_[..., 1], gx * db_[..., 2] + gy * db_[..., 3]
                contrib[..., c] += [w0, w1, -(w0 + w1)][j] * hit
        target = (image.repeat(H, 1).repeat(W, 2), rows[..., j]) if attr.ndim == 3 else (rows[..., j],)
        np.add.at(grad_attr, target, contrib)
        np.add.at(terms, target, np.abs(contrib))
    return grad_rast, grad_db, grad_attr, terms


@pytest.mark.parametrize("num_attrs", [1, 3, 4, 7, 32])
@pytest.mark.parametrize("instanced", [False, True])
def test_runs_against_numpy(device, num_attrs, instanced):
    pos, tri, rast, db = scene(device)
    assert (rast[..., 3] == 1).sum() > 200 and (rast[..., 3] > 2).sum() > 50  # long runs and short ones
    for n in range(2):  # one triangle's pixels on both sides of each image boundary
        assert rast[n, -1, -1, 3] == rast[n + 1, 0, 0, 3] > 0
    gen = torch.Generator().manual_seed(num_attrs)
    N = rast.shape[0]
    shape = (N, pos.shape[1], num_attrs) if instanced else (pos.shape[1], num_attrs)
    attr = torch.randn(shape, generator=gen).to(device)
    grad_out = torch.randn(N, H, W, num_attrs, generator=gen).to(device)
    diff = [num_attrs - 1, 0]
    grad_da = torch.randn(N, H, W, 4, generator=gen).to(device)
    want_rast, want_db, want_attr, terms = reference(attr, rast, tri, diff, grad_out, grad_da, db)
    run = lambda: backward(attr, rast, tri, db, diff, grad_out, grad_da)  # noqa: E731
    # On the CPU with one thread too: more threads cut the pixels into chunks, and runs with them.
    for grad_attr, grad_rast, grad_db in per_thread_count(run, (1, 2)) if device == "cpu" else [run()]:
        assert torch.equal(grad_rast.cpu(), torch.from_numpy(want_rast.astype(np.float32)))
        assert torch.equal(grad_db.cpu(), torch.from_numpy(want_db.astype(np.float32)))
        err = np.abs(grad_attr.cpu().numpy().astype(np.float64) - want_attr)
        assert (err <= 1e-6 * terms + 1e-6).all(), err.max()


def test_triangle_naming_one_vertex_twice(device):
    """Rasterized as ordinary triangles, interpolated with triangle 1 naming vertex 0 for two corners: vertex 0 gets
    u + v of every pixel of that triangle."""
    pos, tri, rast, db = scene(device, num_images=1)
    twice = tri.clone()
    twice[0] = torch.tensor([0, 0, 2])
    attr = torch.rand(pos.shape[1], 5, generator=torch.Generator().manual_seed(1)).to(device)
    grad_out = torch.rand(1, H, W, 5, generator=torch.Generator().manual_seed(2)).to(device)
    grad_attr = backward(attr, rast, twice, db, [], grad_out, None)[0]
    _, _, want_attr, _ = reference(attr, rast, twice, [], grad_out, None, db)
    torch.testing.assert_close(grad_attr.cpu().double(), torch.from_numpy(want_attr), rtol=1e-6, atol=1e-5)
    on_first = (rast[..., 3] == 1).unsqueeze(-1)
    uv = (rast[..., 0] + rast[..., 1]).unsqueeze(-1)
    assert float(grad_attr[0, 0]) == pytest.approx(float((grad_out * uv * on_first)[..., 0].sum()), rel=1e-5)


def test_bands_with_long_runs_are_the_same_for_any_thread_count():
    """A grad_attr far larger than the image (a million unused vertices) is split into bands, one per thread; the
    runs, and so the sums, are the same whichever thread adds them. Two images: bands need 4096 pixels or more."""
    pos, tri, rast, db = scene("cpu", num_images=2)
    gen = torch.Generator().manual_seed(3)
    attr = torch.randn(1_000_000, 4, generator=gen)
    grad_out = torch.randn(2, H, W, 4, generator=gen)
    grad_da = torch.randn(2, H, W, 2, generator=gen)
    results = per_thread_count(lambda: backward(attr, rast, tri, db, [2], grad_out, grad_da))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)
    want_rast, want_db, want_attr, terms = reference(attr, rast, tri, [2], grad_out, grad_da, db)
    assert torch.equal(results[0][1], torch.from_numpy(want_rast.astype(np.float32)))
    assert torch.equal(results[0][2], torch.from_numpy(want_db.astype(np.float32)))
    assert (np.abs(results[0][0].numpy() - want_attr) <= 1e-6 * terms + 1e-6).all()
