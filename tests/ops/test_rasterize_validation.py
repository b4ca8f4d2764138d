"""Bad input to rasterize gets a clear Python exception, never a crash or an out-of-bounds read."""
import numpy
import pytest
import torch

import prerast


def scene(device="cpu"):
    pos = torch.tensor([[[-0.5, -0.5, 0.0, 1.0], [0.5, -0.5, 0.0, 1.0], [0.0, 0.5, 0.0, 1.0]]], device=device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device)
    return pos, tri


@pytest.fixture
def cpu():
    return prerast.RasterizeCpuContext()


def test_wrong_dtype(cpu):
    pos, tri = scene()
    with pytest.raises(TypeError, match="pos must be Float, got Double"):
        prerast.rasterize(cpu, pos.double(), tri, (8, 8))
    with pytest.raises(TypeError, match="tri must be Int, got Long"):
        prerast.rasterize(cpu, pos, tri.long(), (8, 8))


def test_wrong_rank_and_shape(cpu):
    pos, tri = scene()
    with pytest.raises(ValueError, match="pos must have 2 or 3 dimensions"):
        prerast.rasterize(cpu, pos[None], tri, (8, 8))
    with pytest.raises(ValueError, match="pos must have size 4 in dimension 2"):
        prerast.rasterize(cpu, pos[..., :3].contiguous(), tri, (8, 8))
    with pytest.raises(ValueError, match="tri must have size 3"):
        prerast.rasterize(cpu, pos, tri[:, :2].contiguous(), (8, 8))


def test_non_contiguous(cpu):
    pos, tri = scene()
    wide = torch.zeros(1, 3, 8)
    wide[..., :4] = pos
    with pytest.raises(ValueError, match="contiguous"):
        prerast.rasterize(cpu, wide[..., :4], tri, (8, 8))


@pytest.mark.parametrize("bad", [[[0, 1, 3]], [[0, -1, 2]], [[0, 1, 2**30]]])
def test_indices_out_of_range(cpu, bad):
    pos, _ = scene()
    with pytest.raises(IndexError, match="vertex indices"):
        prerast.rasterize(cpu, pos, torch.tensor(bad, dtype=torch.int32), (8, 8))


@pytest.mark.parametrize("res", [(0, 8), (8, -1), (-3, -3)])
def test_bad_resolution(cpu, res):
    pos, tri = scene()
    with pytest.raises(ValueError, match="resolution must be positive"):
        prerast.rasterize(cpu, pos, tri, res)


def test_resolution_not_a_pair(cpu):
    pos, tri = scene()
    with pytest.raises(TypeError, match="resolution"):
        prerast.rasterize(cpu, pos, tri, 8)


def test_resolution_over_limit(cpu):
    pos, tri = scene()
    with pytest.raises(ValueError, match="exceeds the maximum"):
        prerast.rasterize(cpu, pos, tri, (8, 40000))
    with pytest.raises(ValueError, match="exceeds the maximum of 32768 per side"):
        prerast.rasterize(cpu, pos, tri, (2**70, 8))  # too large for the op's int64: refused before it


@pytest.mark.parametrize("res", [(2.7, 3.9), (8.0, 8), "64", "ab", (True, True), (8, None), (8,), (8, 8, 8),
                                 torch.tensor([8.0, 8.0]), torch.tensor(8), (numpy.float32(8), 8)])
def test_resolution_must_be_two_integers(cpu, res):
    pos, tri = scene()
    with pytest.raises(TypeError, match="resolution must be a pair \\(height, width\\) of integers"):
        prerast.rasterize(cpu, pos, tri, res)


@pytest.mark.parametrize("res", [(6, 10), [6, 10], (numpy.int64(6), numpy.int32(10)), (torch.tensor(6), 10),
                                 torch.tensor([6, 10], dtype=torch.int32), numpy.array([6, 10]), torch.Size([6, 10])])
def test_resolution_of_integers_in_any_form(cpu, res):
    pos, tri = scene()
    rast, _ = prerast.rasterize(cpu, pos, tri, res)
    reference, _ = prerast.rasterize(cpu, pos, tri, (6, 10))
    assert rast.shape == (1, 6, 10, 4) and torch.equal(rast, reference)


def test_not_a_tensor(cpu):
    _, tri = scene()
    with pytest.raises(TypeError, match="pos must be a torch.Tensor"):
        prerast.rasterize(cpu, [[0.0] * 4] * 3, tri, (8, 8))


def test_bad_context():
    pos, tri = scene()
    with pytest.raises(TypeError, match="glctx"):
        prerast.rasterize("cpu", pos, tri, (8, 8))


def test_ranges_errors(cpu):
    pos, tri = scene()
    # Instanced mode ignores ranges, as nvdiffrast does; the raw op still refuses it.
    alone, _ = prerast.rasterize(cpu, pos, tri, (8, 8))
    ignored, _ = prerast.rasterize(cpu, pos, tri, (8, 8), ranges=torch.tensor([[0, 1]], dtype=torch.int32))
    assert torch.equal(alone, ignored)
    with pytest.raises(ValueError, match="ranges is only for range mode"):
        torch.ops.prerast.rasterize_fwd(pos, tri, 8, 8, torch.tensor([[0, 1]], dtype=torch.int32), None)
    with pytest.raises(ValueError, match="needs ranges"):
        prerast.rasterize(cpu, pos[0], tri, (8, 8))
    with pytest.raises(IndexError, match="outside the 1 triangles"):
        prerast.rasterize(cpu, pos[0], tri, (8, 8), ranges=torch.tensor([[0, 2]], dtype=torch.int32))
    with pytest.raises(IndexError, match="outside"):
        prerast.rasterize(cpu, pos[0], tri, (8, 8), ranges=torch.tensor([[-1, 1]], dtype=torch.int32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_mixed_devices():
    pos, tri = scene()
    ctx = prerast.RasterizeCudaContext()
    with pytest.raises(ValueError, match="one device"):
        prerast.rasterize(ctx, pos.cuda(), tri, (8, 8))


def test_cuda_tensor_on_cpu_context_meta():
    # A tensor on another device than the context (meta stands in for a GPU on machines without one).
    pos, tri = scene()
    with pytest.raises(ValueError, match="one device"):
        prerast.rasterize(prerast.RasterizeCpuContext(), pos.to("meta"), tri, (8, 8))


def test_cuda_context_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        prerast.RasterizeCudaContext()
