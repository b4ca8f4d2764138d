"""Triangle IDs above 2^24: rast[..., 3] holds ID + 1 as nvdiffrast stores it (the number up to 2^24, above it
the float with bit pattern 0x4a800000 + ID + 1), and rasterize's backward, interpolate, antialias and DepthPeeler
read it back. A range-mode mesh of 2^24 + 8 triangles (200 MB of indices) draws two triangles past 2^24; the same
two triangles as a small mesh give the reference, with IDs shifted."""

import numpy as np
import pytest
import torch

import prerast
from conftest import assert_same_sums
from reference import decode_triangle_id, encode_triangle_id

BIG = 2**24 + 3  # index of the first drawn triangle: its stored ID is 2^24 + 4
FILLER = 4  # filler rows reference a vertex of their own, so they share no edge with the drawn ones


def test_encoding_reference():
    n = np.array([0, 1, 2**24 - 1, 2**24, 2**24 + 1, 2**24 + 2, 10**8, 0x7F7FFFFF - 0x4A800000])
    f = encode_triangle_id(n)
    assert f[3] == np.float32(2**24) and f[4] == np.float32(16777218.0)  # the two encodings meet at 2^24
    assert (np.diff(f) > 0).all() and np.isfinite(f).all()
    np.testing.assert_array_equal(decode_triangle_id(f), n)


def geometry(device):
    pos = torch.tensor(
        [
            [-0.9, -0.9, 0.3, 1.0],
            [0.9, -0.8, 0.1, 1.0],
            [-0.7, 0.9, 0.5, 1.0],
            [0.9, 0.9, 0.2, 1.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
        device=device,
    )
    small = torch.tensor([[0, 1, 2], [1, 3, 2], [0, 3, 2]], dtype=torch.int32)  # the third overlaps both
    big = torch.full((BIG + 5, 3), FILLER, dtype=torch.int32)
    big[BIG], big[BIG + 2], big[BIG + 4] = small
    return pos, small.to(device), big.to(device)


def big_topology_hash(small_hash, num_triangles, device):
    """The hash of the big mesh, put together from the small one's: drawn triangle s sits at BIG + 2 s, and all
    filler half-edges form one group of their own (their edge {4, 4} touches nothing drawn). Building it with
    antialias_construct_topology_hash works too, but sorts 50 million edges."""
    H = 3 * num_triangles
    to_big = lambda h: 3 * (BIG + 2 * (h // 3)) + h % 3
    drawn = to_big(torch.arange(9, device=device))
    filler = torch.ones(H, dtype=torch.bool, device=device)
    filler[drawn] = False
    half_edges = torch.cat([to_big(small_hash.half_edges.long()), torch.nonzero(filler)[:, 0]]).int()
    groups = small_hash.group_start.numel() - 1
    group_of = torch.full((H,), groups, dtype=torch.int32, device=device)
    group_of[drawn] = small_hash.group_of
    group_start = torch.cat([small_hash.group_start, torch.tensor([H], dtype=torch.int32, device=device)])
    return prerast.TopologyHash(num_triangles, half_edges, group_of, group_start)


@pytest.fixture(scope="module")
def meshes():
    return geometry("cpu")


def shifted(small_rast):
    """The small mesh's rast with its IDs moved to where the big mesh holds the triangles."""
    out = small_rast.clone()
    ids = small_rast[..., 3].long().cpu().numpy()
    big_ids = np.where(ids > 0, BIG + 1 + 2 * (ids - 1), 0)
    out[..., 3] = torch.from_numpy(encode_triangle_id(big_ids)).to(out.device)
    return out


def test_render_interpolate_and_gradients_past_2_24(ctx, device, meshes):
    pos, small, big = (t.to(device) for t in meshes)
    res = (24, 20)
    r_small = torch.tensor([[0, 3]], dtype=torch.int32)
    r_big = torch.tensor([[BIG, 5]], dtype=torch.int32)
    ps, pb = pos.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    rast_s, db_s = prerast.rasterize(ctx, ps, small, res, ranges=r_small)
    rast_b, db_b = prerast.rasterize(ctx, pb, big, res, ranges=r_big)
    assert (rast_b[..., 3] > 2**24).sum() > 100
    assert torch.equal(rast_b.detach(), shifted(rast_s.detach())) and torch.equal(db_b, db_s)
    np.testing.assert_array_equal(  # the stored bits, against the reference encoding
        rast_b[..., 3].detach().cpu().numpy().view(np.uint32),
        shifted(rast_s.detach())[..., 3].cpu().numpy().view(np.uint32),
    )

    attr = torch.rand(5, 3, device=device)
    out_s, da_s = prerast.interpolate(attr, rast_s, small, db_s, diff_attrs="all")
    out_b, da_b = prerast.interpolate(attr, rast_b, big, db_b, diff_attrs="all")
    assert torch.equal(out_s, out_b) and torch.equal(da_s, da_b)
    (out_s.sum() + da_s.sum()).backward()
    (out_b.sum() + da_b.sum()).backward()
    assert ps.grad.abs().sum() > 0
    assert_same_sums(ps.grad, pb.grad)


def test_antialias_past_2_24(ctx, device, meshes):
    pos, small, big = (t.to(device) for t in meshes)
    res = (24, 20)
    rast_s, _ = prerast.rasterize(ctx, pos, small, res, ranges=torch.tensor([[0, 3]], dtype=torch.int32))
    rast_b, _ = prerast.rasterize(ctx, pos, big, res, ranges=torch.tensor([[BIG, 5]], dtype=torch.int32))
    color = prerast.interpolate(torch.rand(5, 3, device=device), rast_s, small)[0]
    hash_s = prerast.antialias_construct_topology_hash(small)
    hash_b = big_topology_hash(hash_s, big.shape[0], device)
    ps, pb = pos.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    out_s = prerast.antialias(color, rast_s, ps, small, hash_s)
    out_b = prerast.antialias(color, rast_b, pb, big, hash_b)
    assert not torch.equal(out_s, color)
    assert torch.equal(out_s, out_b)
    out_s.sum().backward()
    out_b.sum().backward()
    assert_same_sums(ps.grad, pb.grad)


def test_depth_peeling_past_2_24(ctx, device, meshes):
    pos, small, big = (t.to(device) for t in meshes)
    res = (24, 20)
    layers = []
    for tri, ranges in ((small, [[0, 3]]), (big, [[BIG, 5]])):
        with prerast.DepthPeeler(ctx, pos, tri, res, ranges=torch.tensor(ranges, dtype=torch.int32)) as peeler:
            layers.append([peeler.rasterize_next_layer()[0] for _ in range(3)])
    for s, b in zip(*layers):
        assert torch.equal(b, shifted(s))
    assert (layers[1][1][..., 3] > 2**24).sum() > 50


def test_rast_ids_beyond_the_mesh_are_refused(ctx, device, meshes):
    if device == "cuda":
        pytest.skip("on CUDA a bad ID is a device-side assert, tested in a process of its own (test_no_sync.py)")
    pos, small, big = (t.to(device) for t in meshes)
    rast, _ = prerast.rasterize(ctx, pos, big, (8, 8), ranges=torch.tensor([[BIG, 5]], dtype=torch.int32))
    attr = torch.rand(5, 3, device=device)
    prerast.interpolate(attr, rast, big)  # IDs above 2^24, all within the mesh
    bad = rast.clone()
    bad[0, 0, 0, 3] = float(encode_triangle_id(big.shape[0] + 1))
    with pytest.raises(IndexError, match="triangle IDs"):
        prerast.interpolate(attr, bad, big)
    bad[0, 0, 0, 3] = float("inf")
    with pytest.raises(IndexError, match="triangle IDs"):
        prerast.interpolate(attr, bad, big)
