"""The rest of nvdiffrast's surface: glctx.active_depth_peeler, DepthPeeler's attributes, coplanar duplicates
peeled once, output_db=False contexts and diff_attrs without rast_db."""

import warnings

import pytest
import torch

import prerast
from conftest import requires_cuda


def quad(device, z=0.5):
    pos = torch.tensor(
        [[[-0.8, -0.8, z, 1.0], [0.8, -0.8, z, 1.0], [-0.8, 0.8, z, 1.0], [0.8, 0.8, z, 1.0]]], device=device
    )
    tri = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32, device=device)
    return pos, tri


def test_active_depth_peeler_and_attributes(ctx, device):
    pos, tri = quad(device)
    peeler = prerast.DepthPeeler(ctx, pos, tri, [16, 12], grad_db=False)
    assert ctx.active_depth_peeler is None and peeler.peeling_idx is None
    assert peeler.raster_ctx is ctx and peeler.pos is pos and peeler.tri is tri
    assert peeler.resolution == (16, 12) and peeler.ranges is None and peeler.grad_db is False
    with peeler:
        assert ctx.active_depth_peeler is peeler and peeler.peeling_idx == 0
        peeler.rasterize_next_layer()
        peeler.rasterize_next_layer()
        assert peeler.peeling_idx == 2
    assert ctx.active_depth_peeler is None and peeler.peeling_idx is None
    ranges = torch.tensor([[0, 2]], dtype=torch.int32)
    assert prerast.DepthPeeler(ctx, pos[0], tri, (4, 4), ranges=ranges).ranges is ranges


def test_coplanar_duplicates_never_reach_a_later_layer(ctx, device):
    pos, tri = quad(device)
    twice = torch.cat([tri, tri])  # the same quad twice: IDs 1, 2 and 3, 4 at exactly the same depths
    behind, _ = quad(device, z=0.7)
    scene = torch.cat([pos, behind], 1)
    everything = torch.cat([twice, tri + 4])
    with prerast.DepthPeeler(ctx, scene, everything, (16, 16)) as peeler:
        first, _ = peeler.rasterize_next_layer()
        second, _ = peeler.rasterize_next_layer()
        third, _ = peeler.rasterize_next_layer()
    covered = first[..., 3] > 0
    assert covered.sum() > 100
    assert (first[..., 3][covered] <= 2).all()  # the lowest ID wins the tie, as in rasterize
    assert (second[..., 3][covered] >= 5).all()
    torch.testing.assert_close(second[..., 2][covered], torch.full_like(second[..., 2][covered], 0.7))
    assert (third == 0).all()


def test_output_db_false_gives_empty_derivatives(ctx, device):
    # RasterizeGLContext(output_db=False) needs CUDA; the CPU context honours the same attribute.
    pos, tri = quad(device)
    ctx.output_db = False
    rast, db = prerast.rasterize(ctx, pos, tri, (8, 6))
    assert rast.shape == (1, 8, 6, 4) and db.shape == (1, 8, 6, 0)
    with prerast.DepthPeeler(ctx, pos, tri, (8, 6)) as peeler:
        assert peeler.rasterize_next_layer()[1].shape == (1, 8, 6, 0)
    out, da = prerast.interpolate(torch.rand(4, 2, device=device), rast, tri, db)
    assert da.shape == (1, 8, 6, 0)
    with pytest.raises(ValueError, match="rast_db"):
        prerast.interpolate(torch.rand(4, 2, device=device), rast, tri, db, diff_attrs="all")


def test_output_db_false_skips_only_the_derivatives(ctx, device):
    """A context made with output_db=False returns the same rast and the same gradients from it as one with
    rast_db, on a scene of many overlapping perspective triangles, and grad_db=True then has no rast_db to read."""
    g = torch.Generator().manual_seed(5)
    pos = torch.cat(
        [
            torch.rand(1, 60, 2, generator=g) * 2.4 - 1.2,
            torch.rand(1, 60, 1, generator=g) * 1.6 - 0.8,
            1 + torch.rand(1, 60, 1, generator=g),
        ],
        -1,
    )
    pos[..., :3] *= pos[..., 3:]
    tri = torch.randint(0, 60, (40, 3), generator=g, dtype=torch.int32)
    weight = torch.randn(1, 24, 20, 4, generator=g).to(device)
    grads, rasts = [], []
    for c in (
        type(ctx)(output_db=True) if device == "cpu" else type(ctx)(device, output_db=True),
        type(ctx)(output_db=False) if device == "cpu" else type(ctx)(device, output_db=False),
    ):
        p = pos.to(device).requires_grad_(True)
        rast, db = prerast.rasterize(c, p, tri.to(device), (24, 20), grad_db=True)
        assert db.shape == ((1, 24, 20, 4) if c.output_db else (1, 24, 20, 0))
        (rast[..., :2] * weight[..., :2]).sum().backward()
        rasts.append(rast.detach())
        grads.append(p.grad)
    assert (rasts[0][..., 3] > 0).sum() > 200
    assert torch.equal(rasts[0], rasts[1])
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    assert repr(c) in (
        "RasterizeCpuContext(output_db=False)",
        f"RasterizeCudaContext(device={c.device}, output_db=False)",
    )


@requires_cuda
def test_gl_context_output_db_false():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = prerast.RasterizeGLContext(output_db=False)
    pos, tri = quad("cuda")
    assert prerast.rasterize(ctx, pos, tri, (8, 6))[1].shape == (1, 8, 6, 0)


def test_diff_attrs_without_rast_db_is_a_clear_error(ctx, device):
    pos, tri = quad(device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (8, 8))
    for diff in ("all", [0], (1,)):
        with pytest.raises(ValueError, match="diff_attrs needs rast_db"):
            prerast.interpolate(torch.rand(4, 2, device=device), rast, tri, diff_attrs=diff)
    out, da = prerast.interpolate(torch.rand(4, 2, device=device), rast, tri, diff_attrs=[])
    assert da.shape == (1, 8, 8, 0)
