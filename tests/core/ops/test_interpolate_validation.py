"""Bad input to interpolate gets a clear Python exception, never a crash or an out-of-bounds read."""

import pytest
import torch

import prerast


def inputs():
    attr = torch.rand(4, 3)
    rast = torch.zeros(2, 5, 6, 4)
    rast[:, 1:3, 2:4] = torch.tensor([0.2, 0.3, 0.5, 2.0])
    tri = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32)
    return attr, rast, tri, torch.zeros(2, 5, 6, 4)


def test_dtypes():
    attr, rast, tri, db = inputs()
    with pytest.raises(TypeError, match="attr must be Float, got Double"):
        prerast.interpolate(attr.double(), rast, tri)
    with pytest.raises(TypeError, match="rast must be Float"):
        prerast.interpolate(attr, rast.half(), tri)
    with pytest.raises(TypeError, match="tri must be Int, got Long"):
        prerast.interpolate(attr, rast, tri.long())
    with pytest.raises(TypeError, match="rast_db must be Float"):
        prerast.interpolate(attr, rast, tri, rast_db=db.double(), diff_attrs=[0])


def test_shapes():
    attr, rast, tri, db = inputs()
    with pytest.raises(ValueError, match="attr must have 2 or 3 dimensions"):
        prerast.interpolate(attr[0], rast, tri)
    with pytest.raises(ValueError, match="rast must have 4 dimensions"):
        prerast.interpolate(attr, rast[0], tri)
    with pytest.raises(ValueError, match="rast must have size 4 in dimension 3"):
        prerast.interpolate(attr, rast[..., :3], tri)
    with pytest.raises(ValueError, match="tri must have size 3"):
        prerast.interpolate(attr, rast, tri[:, :2])
    with pytest.raises(ValueError, match=r"attr of shape \[3, 4, 3\] has 3 images but rast has 2"):
        prerast.interpolate(attr.expand(3, 4, 3), rast, tri)
    with pytest.raises(ValueError, match="rast_db has shape .* but rast has shape"):
        prerast.interpolate(attr, rast, tri, rast_db=db[:1], diff_attrs=[0])


def test_indices_out_of_range():
    attr, rast, tri, db = inputs()
    with pytest.raises(IndexError, match=r"vertex indices in \[1, 4\] but attr has 4 vertices"):
        prerast.interpolate(attr, rast, tri + 1)
    with pytest.raises(IndexError, match="vertex indices"):
        prerast.interpolate(attr, rast, tri - 1)
    bad = rast.clone()
    bad[0, 0, 0, 3] = 3.0
    with pytest.raises(IndexError, match=r"triangle IDs in \[0, 3\] but tri has 2 triangles"):
        prerast.interpolate(attr, bad, tri)
    bad[0, 0, 0, 3] = -1.0
    with pytest.raises(IndexError, match="triangle IDs"):
        prerast.interpolate(attr, bad, tri)
    bad[0, 0, 0, 3] = float("nan")
    with pytest.raises(IndexError, match="triangle IDs"):
        prerast.interpolate(attr, bad, tri)


def test_diff_attrs():
    attr, rast, tri, db = inputs()
    with pytest.raises(IndexError, match=r"diff_attrs\[1\] = 3 is not an attribute index: attr has 3"):
        prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=[0, 3])
    with pytest.raises(IndexError, match=r"diff_attrs\[0\] = -4 is not an attribute index"):
        prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=[-4])
    with pytest.raises(ValueError, match="'all' or a list"):
        prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs="some")
    with pytest.raises(TypeError, match="must hold ints"):
        prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=[0.5])
    with pytest.raises(TypeError, match="'all' or a list"):
        prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=2)


def test_not_tensors_and_devices():
    attr, rast, tri, _ = inputs()
    with pytest.raises(TypeError, match="attr must be a torch.Tensor"):
        prerast.interpolate(attr.tolist(), rast, tri)
    with pytest.raises(ValueError, match="one device"):
        prerast.interpolate(attr, rast.to("meta"), tri)


def test_non_contiguous_inputs_are_accepted():
    attr, rast, tri, db = inputs()
    wide = torch.rand(4, 6)
    wide[:, ::2] = attr
    out, out_da = prerast.interpolate(wide[:, ::2], rast, tri, rast_db=db, diff_attrs="all")
    want, want_da = prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs="all")
    assert torch.equal(out, want) and torch.equal(out_da, want_da)
