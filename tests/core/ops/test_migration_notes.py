"""docs/migrating-from-nvdiffrast.md: the differences it states that can be checked here hold."""

import os

import numpy as np
import pytest
import torch

import prerast

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "migrating-from-nvdiffrast.md")


def triangle(device):
    pos = torch.tensor([[[-1.0, -1.0, 0.5, 1.0], [3.0, -1.0, 0.5, 1.0], [-1.0, 3.0, 0.5, 1.0]]], device=device)
    return pos, torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device)


def test_every_difference_is_one_line_with_its_reason():
    lines = [l for l in open(DOC) if l.startswith("- **")]
    assert len(lines) >= 15
    for line in lines:
        assert line.count("**") == 2 and len(line.split("**")[2].strip()) > 20, line  # a claim and its reason


def test_public_functions_raise_type_error_raw_ops_value_error(device):
    pos, tri = triangle(device)
    with pytest.raises(TypeError, match="pos must be Float"):
        prerast.rasterize(
            prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(),
            pos.double(),
            tri,
            (4, 4),
        )
    stable = prerast._loader.status()["info"]["abi"] == "stable"
    with pytest.raises(ValueError if stable else TypeError, match="pos must be Float"):
        torch.ops.prerast.rasterize_fwd(pos.double(), tri, 4, 4, None, None)


def test_raw_op_refuses_ranges_in_instanced_mode(ctx, device):
    pos, tri = triangle(device)
    ranges = torch.tensor([[0, 1]], dtype=torch.int32)
    prerast.rasterize(ctx, pos, tri, (4, 4), ranges=ranges)
    with pytest.raises(ValueError, match="ranges is only for range mode"):
        torch.ops.prerast.rasterize_fwd(pos, tri, 4, 4, ranges, None)


def test_equal_depths_draw_the_lower_id(ctx, device):
    pos, tri = triangle(device)
    rast, _ = prerast.rasterize(ctx, pos, torch.cat([tri, tri, tri]), (8, 8))
    assert (rast[..., 3] == 1).all()


def test_peeler_inputs_are_read_only(ctx, device):
    pos, tri = triangle(device)
    peeler = prerast.DepthPeeler(ctx, pos, tri, (4, 4))
    for name in ("raster_ctx", "pos", "tri", "resolution", "ranges", "grad_db"):
        with pytest.raises(AttributeError):
            setattr(peeler, name, None)
    with pytest.raises(AttributeError):
        ctx.active_depth_peeler = peeler


def test_limits():
    # antialias's edge table holds three int32 half-edges per triangle: the limit is the most triangles whose
    # last half-edge an int32 still indexes (and no more than rast can hold).
    most = prerast._checks.MAX_ANTIALIAS_TRIANGLES
    int32_max = np.iinfo(np.int32).max
    assert 3 * most <= int32_max < 3 * (most + 1) and most <= prerast._checks.MAX_TRIANGLES
    # The resolution limit is enforced at its value: the limit itself renders, one more is refused.
    side = prerast._checks.MAX_RESOLUTION
    rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), *triangle("cpu"), (side, 1))
    assert rast.shape[1] == side and (rast[0, :, 0, 3] == 1).all()
    with pytest.raises(ValueError, match=f"exceeds the maximum of {side} per side"):
        prerast.rasterize(prerast.RasterizeCpuContext(), *triangle("cpu"), (side + 1, 4))
