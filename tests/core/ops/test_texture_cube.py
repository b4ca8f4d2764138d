"""prerast.texture on cube maps: the NumPy model (including lookups exactly on face edges and corners),
filtering without seams across faces, mip chains, and gradients against finite differences."""

import itertools

import numpy as np
import pytest
import torch

import prerast
import reference_texture as ref
from finite_diff import check_gradients


def to_t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)


def special_directions():
    """Face centres, points on every edge (texel centres, texel boundaries, the middle), and the 8 corners."""
    dirs = [np.eye(3)[i] * s for i in range(3) for s in (1, -1)]
    for a, b in itertools.combinations(range(3), 2):
        c = 3 - a - b
        for sa, sb in itertools.product((1, -1), repeat=2):
            for t in (0.0, 0.25, -0.5, 1 / 6, -0.9):
                d = np.zeros(3)
                d[a], d[b], d[c] = sa, sb, t
                dirs.append(d)
    dirs += [np.array(s, float) for s in itertools.product((1, -1), repeat=3)]
    dirs += [np.array([1.0, 0.999, 0.2]), np.array([-0.3, 1.0, -0.9995])]  # just off edges
    return np.stack(dirs)


def cube_case(rng, S=6, tex_batch=1, N=2, H=6, W=8, lod_range=(-1.0, 3.5), C=3):
    tex = rng.normal(size=(tex_batch, 6, S, S, C))
    d = rng.normal(size=(N, H, W, 3))
    flat = d.reshape(-1, 3)
    special = special_directions()[: len(flat) // 2]
    flat[: len(special)] = special * rng.uniform(0.5, 2.0, size=(len(special), 1))
    q = np.abs(d).max(-1, keepdims=True)
    lod = rng.uniform(*lod_range, size=(N, H, W, 1))
    dd = rng.normal(size=(N, H, W, 6)) * 2.0**lod * 2 * q / S / np.sqrt(3)
    bias = rng.uniform(-0.5, 0.5, size=(N, H, W))
    return [np.asarray(a, np.float32) for a in (tex, d, dd, bias)]


@pytest.mark.parametrize("filter_mode", ref.FILTERS)
@pytest.mark.parametrize("tex_batch", [1, 2])
def test_matches_reference(device, filter_mode, tex_batch):
    rng = np.random.default_rng(len(filter_mode) + tex_batch)
    tex, d, dd, bias = cube_case(rng, tex_batch=tex_batch)
    out = prerast.texture(
        to_t(tex, device),
        to_t(d, device),
        to_t(dd, device),
        to_t(bias, device),
        filter_mode=filter_mode,
        boundary_mode="cube",
    )
    expect = ref.texture(tex, d, dd, bias, filter_mode=filter_mode, boundary_mode="cube")
    np.testing.assert_allclose(out.cpu().numpy(), expect, atol=2e-5)


@pytest.mark.parametrize("S", [1, 2, 5])
def test_small_faces_match_reference(device, S):
    rng = np.random.default_rng(S)
    tex, d, _, _ = cube_case(rng, S=S)
    for mode in ("nearest", "linear"):
        out = prerast.texture(to_t(tex, device), to_t(d, device), filter_mode=mode, boundary_mode="cube")
        np.testing.assert_allclose(
            out.cpu().numpy(), ref.texture(tex, d, filter_mode=mode, boundary_mode="cube"), atol=2e-5
        )


def face_index_texture(S, device):
    """Every texel of face f holds f."""
    return torch.arange(6, dtype=torch.float32).view(1, 6, 1, 1, 1).expand(1, 6, S, S, 1).contiguous().to(device)


def test_face_layout_edges_and_corners(device):
    tex = face_index_texture(4, device)
    axes = torch.eye(3)
    centres = torch.cat([axes, -axes], 0)[[0, 3, 1, 4, 2, 5]]  # +x, -x, +y, -y, +z, -z
    for mode in ("nearest", "linear"):
        out = prerast.texture(tex, centres.view(1, 1, 6, 3).to(device), filter_mode=mode, boundary_mode="cube")
        assert out.flatten().tolist() == [0, 1, 2, 3, 4, 5]
    # Exactly on an edge, bilinear filtering averages the two faces' edge texels.
    edge = torch.tensor([[1.0, 1.0, 0.3], [0.2, -1.0, -1.0], [-1.0, 0.0, 1.0]])
    out = prerast.texture(tex, edge.view(1, 1, 3, 3).to(device), boundary_mode="cube")
    torch.testing.assert_close(out.flatten().cpu(), torch.tensor([(0 + 2) / 2, (3 + 5) / 2, (1 + 4) / 2]))
    # Exactly on a corner: the mean of the three faces that meet there.
    corners = torch.tensor(list(itertools.product((1.0, -1.0), repeat=3)))
    out = prerast.texture(tex, corners.view(1, 1, 8, 3).to(device), boundary_mode="cube")
    faces = (corners < 0).long() + torch.tensor([0, 2, 4])
    torch.testing.assert_close(out.flatten().cpu(), faces.float().mean(1))


@pytest.mark.parametrize("filter_mode", ["linear", "linear-mipmap-linear"])
def test_no_seams_across_faces(device, filter_mode):
    """Approaching any point of an edge or corner from either face gives the same value."""
    rng = np.random.default_rng(21)
    S = 5
    tex = to_t(rng.normal(size=(1, 6, S, S, 2)), device)
    pts = []
    for a, b in itertools.permutations(range(3), 2):
        for sa, sb in itertools.product((1, -1), repeat=2):
            for t in np.concatenate([rng.uniform(-1, 1, 6), [1.0, -1.0]]):  # along the edge, corners included
                p = np.zeros(3)
                p[a], p[b], p[3 - a - b] = sa, sb, t
                pts.append(p)
    pts = np.array(pts)
    eps = 1e-5
    inside_a = pts.copy()
    inside_b = pts.copy()
    for i, p in enumerate(pts):
        a, b = np.argsort(-np.abs(p))[:2]  # the two faces meeting at the edge: step into each
        inside_a[i, b] *= 1 - eps
        inside_b[i, a] *= 1 - eps
    uv_da = np.full((1, 1, len(pts), 6), 0.05, np.float32)
    vals = []
    for d in (inside_a, inside_b):
        vals.append(
            prerast.texture(
                tex, to_t(d[None, None], device), to_t(uv_da, device), filter_mode=filter_mode, boundary_mode="cube"
            ).cpu()
        )
    assert (vals[0] - vals[1]).abs().max() < 1e-3


@pytest.mark.parametrize("S", [8, 6, 3])
def test_cube_mip_chain(device, S):
    tex = np.random.default_rng(S).normal(size=(2, 6, S, S, 2)).astype(np.float32)
    chain = prerast.texture_construct_mip(to_t(tex, device), cube_mode=True)
    expect = ref.mip_chain(tex)
    assert chain.num_levels == len(expect)
    for level, e in zip(chain._levels, expect):
        assert level.shape == e.shape
        np.testing.assert_allclose(level.cpu().numpy(), e, atol=1e-6)


@pytest.mark.parametrize("filter_mode", ref.FILTERS)
def test_gradients(device, filter_mode):
    rng = np.random.default_rng(31)
    tex, d, dd, bias = cube_case(rng, S=4, N=1, H=3, W=4, lod_range=(0.2, 1.8), C=2)
    d = rng.normal(size=d.shape).astype(np.float32)  # generic directions; edges are covered by the seam test
    inputs = {k: to_t(v, device) for k, v in dict(tex=tex, uv=d, uv_da=dd, bias=bias).items()}
    wrt = {
        "nearest": ["tex"],
        "linear": ["tex", "uv"],
        "linear-mipmap-nearest": ["tex", "uv"],
        "linear-mipmap-linear": ["tex", "uv", "uv_da", "bias"],
    }[filter_mode]

    def fn(tex, uv, uv_da, bias):
        return prerast.texture(tex, uv, uv_da, bias, filter_mode=filter_mode, boundary_mode="cube")

    check_gradients(fn, inputs, wrt, eps={"tex": 1e-2, "uv": 1e-3, "uv_da": 1e-4, "bias": 1e-2})


def test_degenerate_directions_read_zero(device):
    tex = torch.ones(1, 6, 2, 2, 1, device=device)
    d = torch.tensor([[[[0.0, 0.0, 0.0], [float("nan"), 1.0, 0.0], [0.0, 0.0, -2.0]]]], device=device)
    for mode in ref.FILTERS:
        out = prerast.texture(tex, d, torch.ones(1, 1, 3, 6, device=device), filter_mode=mode, boundary_mode="cube")
        assert out.flatten().tolist() == [0.0, 0.0, 1.0], mode
