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


@pytest.mark.parametrize(
    "res",
    [
        (2.7, 3.9),
        (8.0, 8),
        "64",
        "ab",
        (True, True),
        (8, None),
        (8,),
        (8, 8, 8),
        torch.tensor([8.0, 8.0]),
        torch.tensor(8),
        (numpy.float32(8), 8),
    ],
)
def test_resolution_must_be_two_integers(cpu, res):
    pos, tri = scene()
    with pytest.raises(TypeError, match="resolution must be a pair \\(height, width\\) of integers"):
        prerast.rasterize(cpu, pos, tri, res)


@pytest.mark.parametrize(
    "res",
    [
        (6, 10),
        [6, 10],
        (numpy.int64(6), numpy.int32(10)),
        (torch.tensor(6), 10),
        torch.tensor([6, 10], dtype=torch.int32),
        numpy.array([6, 10]),
        torch.Size([6, 10]),
    ],
)
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


@pytest.mark.parametrize("mode", ["instanced", "range"])
def test_a_large_batch_is_rasterized_in_chunks_with_the_same_result(cpu, mode):
    """40 images of 60000 triangles are more (image, triangle) items than one call of the core takes (2^21): the
    batch is split into chunks of whole images, and every image equals the same image rendered alone."""
    g = torch.Generator().manual_seed(3)
    images, triangles = 40, 60000
    pos = torch.rand(images if mode == "instanced" else 1, 3 * triangles, 4, generator=g) * 2 - 1
    pos[..., 3] = 1.0
    tri = torch.randperm(3 * triangles, generator=g).to(torch.int32).reshape(triangles, 3)
    if mode == "instanced":
        rast, db = prerast.rasterize(cpu, pos, tri, (8, 6))
        alone = [prerast.rasterize(cpu, pos[n : n + 1], tri, (8, 6)) for n in (0, 17, 39)]
    else:
        ranges = torch.tensor([[(n * 997) % 1000, triangles - 1000] for n in range(images)], dtype=torch.int32)
        rast, db = prerast.rasterize(cpu, pos[0], tri, (8, 6), ranges=ranges)
        alone = [prerast.rasterize(cpu, pos[0], tri, (8, 6), ranges=ranges[n : n + 1]) for n in (0, 17, 39)]
    assert rast.shape == (images, 8, 6, 4) and (rast[..., 3] > 0).float().mean() > 0.9
    for n, (r, d) in zip((0, 17, 39), alone):
        assert torch.equal(rast[n : n + 1], r) and torch.equal(db[n : n + 1], d)


MEMORY_PROBE = """
import resource, torch, prerast
pos = torch.empty(1000, 30000, 4).uniform_(-1, 1, generator=torch.Generator().manual_seed(0))
pos[..., 3] = 1.0
tri = torch.arange(30000, dtype=torch.int32).reshape(10000, 3)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rast, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (1, 1))
assert rast.shape == (1000, 1, 1, 4)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.slow
def test_memory_follows_the_work_of_one_chunk():
    """1000 images x 10000 triangles at 1x1 pixel (10^7 items, 32 KB of output): the core sees 2^21 items at a
    time, so rasterize needs far less than the gigabytes a setup per item of the whole batch would take."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) < 400, f"rasterize raised the peak RSS by {out.stdout.strip()} MB"
