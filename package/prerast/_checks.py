"""Argument checks done in Python before an op is dispatched: types, dtypes and devices, with messages for
users. Shapes and index ranges are checked by the compiled ops themselves (dtypes too, but a stable-ABI op can
only raise ValueError for them: these checks keep TypeError for the public functions). Arguments that nvdiffrast
accepts in several forms (numpy scalars, tensors, negative indices) are brought to the one form the ops take."""

import math
import numbers

import numpy
import torch

from . import _constants, _loader
from ._constants import MAX_RESOLUTION, MAX_TRIANGLES

# Triangle IDs up to MAX_TRIANGLES round-trip through rast's float32 channel; antialias's half-edge table holds
# 3 int32 entries per triangle, which sets its own limit.
MAX_ANTIALIAS_TRIANGLES = min(MAX_TRIANGLES, (2**31 - 1) // 3)


def with_limits(obj):
    """obj with each {NAME} of its docstring (a limit: {MAX_RESOLUTION}, {MAX_TRIANGLES},
    {MAX_ANTIALIAS_TRIANGLES}, {MAX_TEXTURE_SIDE}) written as its value with thousands separators: docstrings
    state the limits the code holds instead of copies of them."""
    limits = {name: value for name, value in vars(_constants).items() if name.startswith("MAX_")}
    limits["MAX_ANTIALIAS_TRIANGLES"] = MAX_ANTIALIAS_TRIANGLES
    for name, value in limits.items():
        obj.__doc__ = obj.__doc__.replace("{%s}" % name, f"{value:,}")
    return obj


# ATen's names of dtypes, as the compiled ops spell them in their messages.
_DTYPE_NAMES = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.int16: "Short",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.bool: "Bool",
}


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def tensor(op, name, value, dtype=None):
    """value must be a tensor (of `dtype` when given)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if dtype is not None and value.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {dtype_name(dtype)}, got {dtype_name(value.dtype)}")
    return value


def _size(op, value, res):
    """One side of a resolution: a Python or numpy integer, a 0-d integer tensor, or a symbolic size (torch.compile
    with dynamic shapes, kept symbolic: int() would specialize it). Floats, strings and bools are refused."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        ok = value.ndim == 0 and _integer_dtype(value.dtype)
    else:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, numpy.bool_))
    if not ok:
        raise TypeError(f"{op}: resolution must be a pair (height, width) of integers, got {res!r}")
    return int(value)


def resolution(op, res):
    """(height, width) as ints (or symbolic sizes), each in [1, MAX_RESOLUTION]."""
    if (
        not isinstance(res, (tuple, list, torch.Size, torch.Tensor, numpy.ndarray))
        or (isinstance(res, (torch.Tensor, numpy.ndarray)) and res.ndim != 1)
        or len(res) != 2
    ):
        raise TypeError(f"{op}: resolution must be a pair (height, width) of integers, got {res!r}")
    h, w = (_size(op, r, res) for r in res)
    if isinstance(h, int) and isinstance(w, int):
        if h <= 0 or w <= 0:
            raise ValueError(f"{op}: resolution must be positive, got ({h}, {w})")
        if h > MAX_RESOLUTION or w > MAX_RESOLUTION:
            raise ValueError(f"{op}: resolution ({h}, {w}) exceeds the maximum of {MAX_RESOLUTION} per side")
    return h, w


def on_device(op, device, **tensors):
    """All given tensors on `device`; the first CUDA use of a device also checks the GPU is served."""
    for t in tensors.values():
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


# --- arguments nvdiffrast accepts in more than one form -------------------------------------------------------


def _is_integral(value):
    """An int, a numpy integer, a float with an integral value (2.0), or a 0-d integral tensor/array; not bool."""
    if isinstance(value, (bool, numpy.bool_)):
        return False
    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        return (
            value.ndim == 0
            and not _is_bool_dtype(value.dtype)
            and math.isfinite(float(value))
            and float(value).is_integer()
        )
    if isinstance(value, numbers.Integral):
        return True
    return isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer()


def max_mip_level(op, value):
    """None or an integral number >= 0, as an int."""
    if value is None:
        return None
    if not _is_integral(value) or int(value) < 0:
        raise ValueError(f"{op}: max_mip_level must be None or an integer >= 0, got {value!r}")
    return int(value)


def real_number(op, name, value):
    """A real number: a Python or numpy scalar, or a 0-d tensor/array; returned as a float."""
    if isinstance(value, (torch.Tensor, numpy.ndarray)) and value.ndim == 0 and not _is_bool_dtype(value.dtype):
        value = float(value)
    elif isinstance(value, (bool, numpy.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a number, got {type(value).__name__}")
    value = float(value)
    # Checked eagerly; a compiled graph may hold the value symbolically (math.isfinite would break it).
    if not torch.compiler.is_compiling() and not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value}")
    return value


def attribute_indices(op, value, num_attrs):
    """diff_attrs as a list of ints in [0, num_attrs): None -> [], 'all' -> every attribute; a list, tuple, range,
    array or tensor of integers otherwise, negative ones counting from the end as in Python. num_attrs None: the
    attribute count is unknown (attr is misshapen), so indices pass unchanged for the op to report."""
    if value is None:
        return []
    if isinstance(value, str):
        if value != "all":
            raise ValueError(f"{op}: diff_attrs must be 'all' or a list of attribute indices, got {value!r}")
        return list(range(num_attrs or 0))
    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        if value.ndim == 0:  # a single index, like a plain int, is not a list
            raise TypeError(
                f"{op}: diff_attrs must be 'all' or a list of attribute indices, got a 0-d {type(value).__name__}"
            )
        if value.ndim > 1:
            raise ValueError(f"{op}: diff_attrs must be one-dimensional, got shape {list(value.shape)}")
        items = [value[k] for k in range(len(value))]
    else:
        try:
            items = list(value)
        except TypeError:
            raise TypeError(
                f"{op}: diff_attrs must be 'all' or a list of attribute indices, got {type(value).__name__}"
            ) from None
    out = []
    for n, k in enumerate(items):
        if not _is_integral(k) or isinstance(k, float) or (hasattr(k, "dtype") and not _integer_dtype(k.dtype)):
            raise TypeError(f"{op}: diff_attrs must hold ints, got {k!r}")
        i = int(k)
        if num_attrs is None:  # attr's shape is wrong: the op reports that
            out.append(i)
            continue
        if not -num_attrs <= i < num_attrs:
            raise IndexError(
                f"{op}: diff_attrs[{n}] = {i} is not an attribute index: attr has {num_attrs} "
                f"(valid: {-num_attrs} to {num_attrs - 1}, negative ones counting from the end)"
            )
        out.append(i % num_attrs)
    return out


def _is_bool_dtype(dtype):
    return dtype == torch.bool if isinstance(dtype, torch.dtype) else numpy.dtype(dtype) == numpy.bool_


def _integer_dtype(dtype):
    if isinstance(dtype, torch.dtype):
        return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
    return numpy.issubdtype(dtype, numpy.integer)


def wants_derivatives(glctx):
    """Whether rasterize computes rast_db: a context made with output_db=False gets an empty [N, H, W, 0] one."""
    return bool(getattr(glctx, "output_db", True))


def derivatives_input(op, diff, rast_db):
    """The rast_db interpolate uses: required when diff_attrs lists attributes; the empty one of an output_db=False
    context stands for none."""
    empty = isinstance(rast_db, torch.Tensor) and rast_db.dim() == 4 and rast_db.shape[-1] == 0
    if diff and (rast_db is None or empty):
        raise ValueError(
            f"{op}: diff_attrs needs rast_db (the second output of rasterize) to compute screen-space "
            "derivatives; pass rast_db (a context made with output_db=False returns an empty one), or "
            "leave diff_attrs out"
        )
    return None if empty else rast_db


def ranges_for(pos, ranges):
    """ranges as the op needs it: ignored (None) in instanced mode, where pos is [N, V, 4]."""
    return None if isinstance(pos, torch.Tensor) and pos.dim() == 3 else ranges
