"""Bad input to antialias and antialias_construct_topology_hash gets a clear Python exception."""

import pytest
import torch

import prerast


def inputs():
    pos = torch.tensor([[[-0.5, -0.5, 0.0, 1.0], [0.5, -0.5, 0.0, 1.0], [0.0, 0.5, 0.0, 1.0]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (6, 7))
    return torch.rand(1, 6, 7, 3), rast, pos, tri


def test_dtypes_and_shapes():
    color, rast, pos, tri = inputs()
    with pytest.raises(TypeError, match="color must be Float, got Double"):
        prerast.antialias(color.double(), rast, pos, tri)
    with pytest.raises(ValueError, match="color must have 4 dimensions"):
        prerast.antialias(color[0], rast, pos, tri)
    with pytest.raises(TypeError, match="pos must be Float"):
        prerast.antialias(color, rast, pos.double(), tri)
    with pytest.raises(ValueError, match="pos must have size 4 in dimension 2"):
        prerast.antialias(color, rast, pos[..., :3], tri)
    with pytest.raises(ValueError, match="rast must have size 4"):
        prerast.antialias(color, rast[..., :2], pos, tri)
    with pytest.raises(ValueError, match=r"color has shape \[1, 5, 7, 3\] but rast has shape \[1, 6, 7, 4\]"):
        prerast.antialias(color[:, :5], rast, pos, tri)
    with pytest.raises(ValueError, match="pos of shape .* has 2 images but rast has 1"):
        prerast.antialias(color, rast, pos.expand(2, 3, 4), tri)
    with pytest.raises(TypeError, match="pos_gradient_boost must be a number"):
        prerast.antialias(color, rast, pos, tri, pos_gradient_boost="2")
    for bad in (float("nan"), float("inf"), -float("inf"), torch.tensor(float("nan"))):
        with pytest.raises(ValueError, match="pos_gradient_boost must be finite"):
            prerast.antialias(color, rast, pos, tri, pos_gradient_boost=bad)


def test_indices():
    color, rast, pos, tri = inputs()
    with pytest.raises(IndexError, match="vertex indices"):
        prerast.antialias(color, rast, pos, tri + 1)
    bad = rast.clone()
    bad[0, 0, 0, 3] = 2.0
    with pytest.raises(IndexError, match=r"triangle IDs in \[0, 2\] but tri has 1 triangles"):
        prerast.antialias(color, bad, pos, tri)


def test_topology_hash_checks():
    color, rast, pos, tri = inputs()
    with pytest.raises(TypeError, match="topology_hash must come from antialias_construct_topology_hash"):
        prerast.antialias(color, rast, pos, tri, topology_hash=object())
    other = prerast.antialias_construct_topology_hash(torch.tensor([[0, 1, 2], [2, 1, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match="built for 2 triangles but tri has 1"):
        prerast.antialias(color, rast, pos, tri, topology_hash=other)
    build = prerast.antialias_construct_topology_hash
    with pytest.raises(TypeError, match="tri must be Int"):
        build(tri.long())
    with pytest.raises(ValueError, match=r"tri must have shape \[T, 3\]"):
        build(tri[:, :2])
    with pytest.raises(IndexError, match="negative vertex index"):
        build(tri - 1)
    with pytest.raises(TypeError, match="tri must be a torch.Tensor"):
        build([[0, 1, 2]])


def test_devices():
    color, rast, pos, tri = inputs()
    with pytest.raises(ValueError, match="one device"):
        prerast.antialias(color, rast, pos.to("meta"), tri)
