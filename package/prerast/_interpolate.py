"""interpolate: the public API over the prerast::interpolate_* ops, and
those ops' fakes and autograd."""

import torch

from . import _checks, _loader, _ops

_OP = "interpolate"


@_ops.raises_typed
def interpolate(attr, rast, tri, rast_db=None, diff_attrs=None):
    """Interpolate vertex attributes over the rasterized image, perspective-correctly.

    Args:
        attr (torch.Tensor): float32 vertex attributes, ``[V, A]`` (range mode, or shared by every image) or
            ``[N, V, A]`` (instanced; N = 1 is shared by every image). Differentiable.
        rast (torch.Tensor): float32 ``[N, H, W, 4]``, the first output of :func:`rasterize`. Differentiable
            through its (u, v) channels.
        tri (torch.Tensor): int32 ``[T, 3]``, the triangles that were rasterized.
        rast_db (torch.Tensor, optional): float32 ``[N, H, W, 4]``, the second output of :func:`rasterize`;
            needed with diff_attrs. Differentiable. Default None.
        diff_attrs (str | Sequence[int] | torch.Tensor, optional): ``'all'``, or the indices of the attributes
            whose screen-space derivatives to return (a sequence, array or tensor of ints; negative ones count
            from the end). Default None: no derivatives.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: ``(out, out_da)``: out is float32 ``[N, H, W, A]``, zero on background
        pixels; out_da is ``[N, H, W, 2 * len(diff_attrs)]`` = (dA/dX, dA/dY) per listed attribute in pixels, or
        ``[N, H, W, 0]`` without diff_attrs.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype, or diff_attrs holds something other than
            ints.
        ValueError: a wrong shape, tensors on different devices, or diff_attrs without rast_db (also the empty
            rast_db of an ``output_db=False`` context).
        IndexError: a diff_attrs entry outside ``-A .. A-1``, or tri holding a vertex index outside ``[0, V)``.

    Gradients:
        To attr, to rast's (u, v) channels and, when derivatives are returned, to rast_db.

    Differences from nvdiffrast:
        diff_attrs without rast_db is a ValueError instead of results without derivatives, and an index outside
        the attributes is an IndexError before anything runs.
    """
    _loader.require()
    for name, value, dtype in (("attr", attr, torch.float32), ("rast", rast, torch.float32), ("tri", tri, torch.int32)):
        _checks.tensor(_OP, name, value, dtype)
    if rast_db is not None:
        _checks.tensor(_OP, "rast_db", rast_db, torch.float32)
    _checks.same_device(_OP, attr=attr, rast=rast, tri=tri, rast_db=rast_db)
    diff = _checks.attribute_indices(_OP, diff_attrs, attr.shape[-1] if attr.dim() in (2, 3) else None)
    rast_db = _checks.derivatives_input(_OP, diff, rast_db)
    if rast_db is not None:
        rast_db = rast_db.contiguous()
    return torch.ops.prerast.interpolate_fwd(
        attr.contiguous(), rast.contiguous(), tri.contiguous(), rast_db, diff or None
    )


# --- the ops' fakes and autograd ------------------------------------------------------------------------------
# Each takes the op's arguments by schema name (_ops.py says how); _ops.define registers them with torch once the
# plugin's schemas exist.


def _interpolate_fwd_fake(attr, rast, tri, rast_db, diff):
    n, h, w = rast.shape[:3]
    num_diff = len(diff or ()) if rast_db is not None else 0
    return attr.new_empty((n, h, w, attr.shape[-1])), attr.new_empty((n, h, w, 2 * num_diff))


def _interpolate_bwd_fake(attr, rast, tri, rast_db, diff, grad_out, grad_da):
    with_db = rast_db is not None and bool(diff)
    grad_db = torch.empty_like(rast_db) if with_db else attr.new_empty((0,))
    return torch.empty_like(attr), torch.empty_like(rast), grad_db


def _interpolate_setup(ctx, a, output):
    ctx.save_for_backward(a.attr, a.rast, a.tri, a.rast_db)
    ctx.diff = list(a.diff or ())


def _interpolate_backward(ctx, grad_out, grad_da):
    attr, rast, tri, rast_db = ctx.saved_tensors
    with_da = rast_db is not None and len(ctx.diff) > 0
    grad_attr, grad_rast, grad_db = torch.ops.prerast.interpolate_bwd(
        attr, rast, tri, rast_db, ctx.diff or None, grad_out.contiguous(), grad_da.contiguous() if with_da else None
    )
    return {"attr": grad_attr, "rast": grad_rast, "rast_db": grad_db if with_da else None}


_ops.define(
    {
        "interpolate_fwd": (_interpolate_fwd_fake, _interpolate_setup, _interpolate_backward),
        "interpolate_bwd": (_interpolate_bwd_fake, _ops.save_nothing, None),
    }
)
