"""Argument checks done in Python before an op is dispatched: types, dtypes and devices, with messages for
users. Shapes and index ranges are checked by the compiled ops themselves (dtypes too, but a stable-ABI op can
only raise ValueError for them: these checks keep TypeError for the public functions)."""
import torch

from . import _loader

# ATen's names of dtypes, as the compiled ops spell them in their messages.
_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                torch.int32: "Int", torch.int64: "Long", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool"}


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def tensor(op, name, value, dtype=None):
    """value must be a tensor (of `dtype` when given)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if dtype is not None and value.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {dtype_name(dtype)}, got {dtype_name(value.dtype)}")
    return value


def resolution(op, res):
    try:  # a symbolic size (torch.compile with dynamic shapes) stays symbolic: int() would specialize it
        h, w = (r if isinstance(r, torch.SymInt) else int(r) for r in res)
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
