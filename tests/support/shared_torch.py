"""The shared CPU torch of the wheel tests (ci/builder/shared_torch.py), skipping a test where it cannot be installed."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ci.builder import shared_torch as _shared  # noqa: E402
from ci.builder.shared_torch import TORCH_SITE, TORCH_SPEC, make_venv, pip  # noqa: E402,F401


def shared_torch(*spec_and_variable):
    try:
        return _shared.shared_torch(*spec_and_variable)
    except _shared.TorchUnavailable as e:
        pytest.skip(str(e))
