import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # tests/reference.py and helpers

import prerast  # noqa: E402  (the installed wheel, or an in-place build on PYTHONPATH)

HAS_CUDA = torch.cuda.is_available() and bool(prerast._loader.require().get("cuda_version"))
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def make_ctx(device):
    return prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)


@pytest.fixture
def ctx(device):
    return make_ctx(device)


requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and a CUDA build of prerast")
