"""interpolate: the public API over the prerast::interpolate_* ops (autograd and fakes: _ops.py)."""
import torch

from . import _checks, _loader

_OP = "interpolate"




def interpolate(attr, rast, tri, rast_db=None, diff_attrs=None):
    """Interpolate vertex attributes over the rasterized image.

    attr: float32 [V, A] (range mode) or [N, V, A] (instanced; N = 1 is shared by every image).
    rast: [N, H, W, 4] from rasterize. tri: int32 [T, 3], the triangles that were rasterized.
    rast_db, diff_attrs: with rast_db from rasterize and diff_attrs a sequence, array or tensor of attribute
    indices (negative ones count from the end) or 'all', also returns the screen-space derivatives (dA/dX, dA/dY)
    of those attributes; diff_attrs without rast_db is a ValueError.

    Returns (out [N, H, W, A], out_da [N, H, W, 2 * len(diff_attrs)]); out is zero on background pixels and
    out_da is [N, H, W, 0] without diff_attrs. Gradients flow to attr, to rast's (u, v) channels
    and, when derivatives are output, to rast_db.
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
    return torch.ops.prerast.interpolate_fwd(attr.contiguous(), rast.contiguous(), tri.contiguous(), rast_db, diff)
