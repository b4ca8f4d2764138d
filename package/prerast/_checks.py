"""Argument checks done in Python before an op is dispatched: types and devices, with messages for users.
Shapes, dtypes and index ranges are checked again by the compiled ops themselves."""
import torch

from . import _loader


def tensor(op, name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def resolution(op, res):
    try:
        h, w = (int(r) for r in res)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: resolution must be a pair (height, width) of ints, got {res!r}") from None
    if h <= 0 or w <= 0:
        raise ValueError(f"{op}: resolution must be positive, got ({h}, {w})")
    return h, w


def on_device(op, device, **tensors):
    """All given tensors on `device`; the first CUDA use of a device also checks the GPU is served."""
    for name, t in tensors.items():
        if t is not None and t.device != device:
            others = ", ".join(f"{n} on {v.device}" for n, v in tensors.items() if v is not None)
            raise ValueError(f"{op}: every tensor must be on {device} ({others}); move them to one device")
    if device.type == "cuda":
        _loader.check_device(device)


def same_device(op, **tensors):
    """The common device of the given tensors (None entries skipped)."""
    present = [(n, t) for n, t in tensors.items() if t is not None]
    device = present[0][1].device
    on_device(op, device, **dict(present))
    return device
