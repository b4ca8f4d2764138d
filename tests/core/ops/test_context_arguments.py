"""The contexts take nvdiffrast's constructor arguments (device, output_db, the GL context's mode), reject wrong
ones with an error naming the argument, and PRERAST_CUDA_CONTEXT_FALLBACK=cpu lets a CUDA context rasterize on the
CPU where no GPU is available (off by default, warning once)."""

import warnings

import numpy as np
import pytest
import torch

import prerast
from prerast import _context


def triangle():
    pos = torch.tensor([[[-0.8, -0.7, 0.1, 1.0], [0.9, -0.5, 0.3, 1.0], [-0.2, 0.8, 0.5, 1.0]]])
    return pos, torch.tensor([[0, 1, 2]], dtype=torch.int32)


@pytest.mark.parametrize(
    "args",
    [
        (),
        (None,),
        ("cpu",),
        (torch.device("cpu"),),
        ({"device": "cpu"}),
        ({"device": torch.device("cpu"), "output_db": True}),
        ("cpu", np.bool_(True)),
    ],
)
def test_cpu_context_takes_nvdiffrast_arguments(args):
    kwargs = args if isinstance(args, dict) else {}
    ctx = prerast.RasterizeCpuContext(*(() if kwargs else args), **kwargs)
    assert ctx.device == torch.device("cpu") and ctx.output_db is True
    pos, tri = triangle()
    got = prerast.rasterize(ctx, pos, tri, (12, 10))
    want = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (12, 10))
    assert (want[0][..., 3] > 0).sum() > 20
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize(
    "device, match",
    [
        ("cuda", "device must be 'cpu'"),
        (torch.device("cuda", 0), "device must be 'cpu'"),
        (0, "device must be 'cpu'"),
        ("meta", "device must be 'cpu'"),
        ("gpu7", "not a device name"),
        (1.5, "device must be None"),
        (True, "device must be None"),
        ([0], "device must be None"),
        (-1, "device index must be >= 0"),
    ],
)
def test_cpu_context_rejects_other_devices(device, match):
    with pytest.raises(ValueError, match=match):
        prerast.RasterizeCpuContext(device)


@pytest.mark.parametrize(
    "device, match",
    [
        ("cpu", "must be a CUDA device"),
        (torch.device("cpu"), "must be a CUDA device"),
        (2.0, "device must be None"),
        (False, "device must be None"),
        ("cuda:x", "not a device name"),
        (-3, "device index must be >= 0"),
    ],
)
def test_cuda_context_rejects_wrong_devices_with_or_without_gpu(device, match):
    # The argument is checked before CUDA's availability: the same ValueError on every machine.
    with pytest.raises(ValueError, match=match):
        prerast.RasterizeCudaContext(device)
    with pytest.raises(ValueError, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        prerast.RasterizeGLContext(device=device)


@pytest.mark.parametrize("bad", ["yes", 2, None, 1.0, torch.tensor(True)])
def test_output_db_must_be_a_bool(bad):
    for make in (
        lambda: prerast.RasterizeCpuContext(output_db=bad),
        lambda: prerast.RasterizeCudaContext(0, bad),
        lambda: prerast.RasterizeGLContext(output_db=bad),
    ):
        with pytest.raises(TypeError, match="output_db must be True or False"), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            make()


def test_gl_context_mode_is_checked():
    with pytest.raises(ValueError, match="mode must be 'automatic' or 'manual'"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        prerast.RasterizeGLContext(mode="auto")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_context_device_forms():
    n = torch.cuda.device_count()
    for device in (None, "cuda", 0, "cuda:0", torch.device("cuda"), torch.device("cuda", 0)):
        ctx = prerast.RasterizeCudaContext(device=device)
        assert ctx.device.type == "cuda" and ctx.device.index is not None
    with pytest.raises(ValueError, match="does not exist"):
        prerast.RasterizeCudaContext(n)


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without a GPU, on any machine; the fallback's warning not yet given."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(_context, "_fallback_warned", [])
    monkeypatch.delenv(_context.FALLBACK_VARIABLE, raising=False)
    return monkeypatch


def test_cuda_context_without_gpu_names_the_switch(no_gpu):
    with pytest.raises(RuntimeError, match="CUDA is not available.*PRERAST_CUDA_CONTEXT_FALLBACK=cpu"):
        prerast.RasterizeCudaContext()
    no_gpu.setenv(_context.FALLBACK_VARIABLE, "0")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        prerast.RasterizeCudaContext("cuda:0")
    no_gpu.setenv(_context.FALLBACK_VARIABLE, "yes please")
    with pytest.raises(ValueError, match="PRERAST_CUDA_CONTEXT_FALLBACK='yes please' is not understood"):
        prerast.RasterizeCudaContext()


def test_cuda_context_falls_back_to_cpu_when_asked_and_warns_once(no_gpu):
    no_gpu.setenv(_context.FALLBACK_VARIABLE, "cpu")
    pos, tri = triangle()
    pos.requires_grad_(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        contexts = [
            prerast.RasterizeCudaContext(),
            prerast.RasterizeCudaContext("cuda:1", output_db=False),
            prerast.RasterizeGLContext(device=0),
        ]
    fallback = [w for w in caught if issubclass(w.category, UserWarning) and "rasterizing on the CPU" in str(w.message)]
    assert len(fallback) == 1 and fallback[0].filename == __file__
    assert all(c.device == torch.device("cpu") for c in contexts)
    assert isinstance(contexts[0], prerast.RasterizeCudaContext) and not contexts[1].output_db
    # The fallen-back context renders what the CPU context renders, gradients included.
    results = []
    for ctx in (contexts[0], prerast.RasterizeCpuContext()):
        p = pos.detach().clone().requires_grad_(True)
        rast, db = prerast.rasterize(ctx, p, tri, (9, 11))
        (rast[..., :2].sum() + db.square().sum()).backward()
        results.append((rast, db, p.grad))
    assert all(torch.equal(a, b) for a, b in zip(*results))
    assert prerast.rasterize(contexts[1], pos, tri, (9, 11))[1].shape == (1, 9, 11, 0)


def test_cuda_context_given_cpu_follows_the_fallback(no_gpu):
    """Programs that choose their device at run time construct RasterizeCudaContext(device='cpu') (and the GL
    context likewise): an error naming the switch by default, the CPU with it."""
    with pytest.raises(ValueError, match="device must be a CUDA device.*PRERAST_CUDA_CONTEXT_FALLBACK=cpu"):
        prerast.RasterizeCudaContext(device="cpu")
    no_gpu.setenv(_context.FALLBACK_VARIABLE, "cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        contexts = [
            prerast.RasterizeCudaContext(device="cpu"),
            prerast.RasterizeCudaContext(torch.device("cpu"), output_db=False),
            prerast.RasterizeGLContext(device="cpu"),
        ]
    assert [str(w.message) for w in caught if "rasterizing on the CPU" in str(w.message)] == [
        "RasterizeCudaContext: device='cpu' was asked for; rasterizing on the CPU "
        "(PRERAST_CUDA_CONTEXT_FALLBACK=cpu). Tensors must be on the CPU too."
    ]
    assert all(c.device == torch.device("cpu") for c in contexts) and not contexts[1].output_db
    pos, tri = triangle()
    want = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (7, 5))[0]
    assert all(torch.equal(prerast.rasterize(c, pos, tri, (7, 5))[0], want) for c in contexts)
    with pytest.raises(ValueError, match="device must be a CUDA device"):
        prerast.RasterizeCudaContext(device="meta")
