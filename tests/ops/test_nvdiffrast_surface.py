"""The rest of nvdiffrast's surface: glctx.active_depth_peeler, DepthPeeler's attributes, coplanar duplicates
peeled once, output_db=False contexts and diff_attrs without rast_db."""
import warnings

import pytest
import torch

import prerast
from conftest import requires_cuda


def quad(device, z=0.5):
    pos = torch.tensor([[[-0.8, -0.8, z, 1.0], [0.8, -0.8, z, 1.0], [-0.8, 0.8, z, 1.0], [0.8, 0.8, z, 1.0]]],
                       device=device)
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
