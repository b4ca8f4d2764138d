"""rasterize and DepthPeeler: the public API over the prerast::rasterize_* ops, and
those ops' fakes and autograd."""

import torch

from . import _checks, _loader, _ops
from ._context import _Context


def _prepare(op, glctx, pos, tri, resolution, ranges):
    _loader.require()
    ranges = _checks.ranges_for(pos, ranges)
    if not isinstance(glctx, _Context):
        raise TypeError(
            f"{op}: glctx must be a RasterizeCudaContext or RasterizeCpuContext, got {type(glctx).__name__}"
        )
    _checks.tensor(op, "pos", pos, torch.float32)
    _checks.tensor(op, "tri", tri, torch.int32)
    if ranges is not None:
        _checks.tensor(op, "ranges", ranges, torch.int32)
        if ranges.device.type != "cpu":
            raise ValueError(f"{op}: ranges must be a CPU tensor, got one on {ranges.device}")
    height, width = _checks.resolution(op, resolution)
    _checks.on_device(op, glctx.device, pos=pos, tri=tri)
    return height, width, ranges


@_ops.raises_typed
@_checks.with_limits
def rasterize(glctx, pos, tri, resolution, ranges=None, grad_db=True):
    """Rasterize triangles into barycentric, depth and triangle-ID images.

    Args:
        glctx (RasterizeCudaContext | RasterizeCpuContext): where to rasterize; tensors must be on its device.
        pos (torch.Tensor): float32 clip-space vertices (x, y, z, w): ``[N, V, 4]`` in instanced mode (one image
            per N), or ``[V, 4]`` in range mode (with ``ranges``). Differentiable.
        tri (torch.Tensor): int32 ``[T, 3]`` vertex indices into pos, each in ``[0, V)``.
        resolution (tuple[int, int]): ``(height, width)`` of the images, each from 1 to {MAX_RESOLUTION}.
        ranges (torch.Tensor, optional): int32 ``[N, 2]`` CPU tensor of (first triangle, count) per image in range
            mode; ignored in instanced mode. Default None.
        grad_db (bool): whether gradients also flow from ``rast_db`` back to pos. Default True.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: ``(rast, rast_db)``, both float32 on glctx's device.
        rast is ``[N, H, W, 4]`` = (u, v, z/w, triangle_id + 1), all zero where nothing is drawn; IDs past 2^24
        are stored as the float whose bit pattern is ``0x4a800000 + triangle_id + 1``. rast_db is
        ``[N, H, W, 4]`` = (du/dX, du/dY, dv/dX, dv/dY) in pixels, or ``[N, H, W, 0]`` (neither computed nor
        written) for a context made with ``output_db=False``.

    Raises:
        TypeError: an argument is not a tensor, has the wrong dtype, or glctx is not a context.
        ValueError: a wrong shape, a resolution out of range, tensors on another device than glctx, or ranges
            not on the CPU.
        IndexError: tri holds a vertex index outside ``[0, V)`` (on CUDA: a device-side assert instead).
        RuntimeError: glctx is reserved by an active DepthPeeler.

    Gradients:
        To pos, from u and v and, when grad_db is True, from rast_db; none from z/w or the triangle ID.

    Differences from nvdiffrast:
        Coverage exactly on an edge follows a tie rule decided in double precision (shared edges are
        watertight), equal depths go to the lower triangle ID, and errors are TypeError / ValueError /
        IndexError instead of RuntimeError (:doc:`/migrating-from-nvdiffrast`).
    """
    height, width, ranges = _prepare("rasterize", glctx, pos, tri, resolution, ranges)
    glctx._check_free("rasterize")
    rast, rast_db = torch.ops.prerast.rasterize_fwd(
        pos, tri, height, width, ranges, None, bool(grad_db), _checks.wants_derivatives(glctx)
    )
    return rast, rast_db


class DepthPeeler:
    """Successive depth layers of a scene, nearest first, as a context manager.

    ``with DepthPeeler(ctx, pos, tri, res) as peeler: rast, rast_db = peeler.rasterize_next_layer()``. The first
    layer equals :func:`rasterize`; each further one holds, per pixel, the nearest surface strictly behind the
    previous layer's, so a surface drawn twice at the same depth shows once. The context is reserved while the
    peeler is active (``glctx.active_depth_peeler``). The arguments are checked here, and are then read-only
    attributes of the same names (``raster_ctx`` for glctx); ``peeling_idx`` counts the layers peeled inside
    the ``with`` block (None outside it).

    Args:
        glctx (RasterizeCudaContext | RasterizeCpuContext): where to rasterize.
        pos (torch.Tensor): float32 ``[N, V, 4]`` or ``[V, 4]`` clip-space vertices, as for :func:`rasterize`.
            Differentiable.
        tri (torch.Tensor): int32 ``[T, 3]`` vertex indices.
        resolution (tuple[int, int]): ``(height, width)``.
        ranges (torch.Tensor, optional): int32 ``[N, 2]`` CPU tensor for range mode. Default None.
        grad_db (bool): whether gradients flow from rast_db to pos. Default True.

    Raises:
        TypeError: as for :func:`rasterize`.
        ValueError: as for :func:`rasterize`.
        RuntimeError: on entering the ``with`` block, when glctx is already reserved by another peeler.

    Differences from nvdiffrast:
        Coplanar duplicates are peeled once; the attributes above are read-only (assigning one raises
        AttributeError), since the peeler checked its inputs when it was made.
    """

    def __init__(self, glctx, pos, tri, resolution, ranges=None, grad_db=True):
        height, width, ranges = _prepare("DepthPeeler", glctx, pos, tri, resolution, ranges)
        self._inputs = (pos, tri, ranges)
        self._grad_db = bool(grad_db)
        self._size = (height, width)
        self._glctx = glctx
        self._prev = None
        self._active = False
        self.peeling_idx = None  # layers peeled so far inside the 'with' block; None outside it

    # What the peeler was made with, under nvdiffrast's attribute names.
    raster_ctx = property(lambda self: self._glctx)
    pos = property(lambda self: self._inputs[0])
    tri = property(lambda self: self._inputs[1])
    ranges = property(lambda self: self._inputs[2])
    resolution = property(lambda self: self._size)
    grad_db = property(lambda self: self._grad_db)

    def __enter__(self):
        self._glctx._reserve(self, "DepthPeeler")
        self._active = True
        self._prev = None
        self.peeling_idx = 0
        return self

    def __exit__(self, *exc):
        self._glctx._active_peeler = None
        self._active = False
        self._prev = None
        self.peeling_idx = None
        return False

    @_ops.raises_typed
    def rasterize_next_layer(self):
        """Rasterize the next layer: the nearest surface behind the previous layer's, per pixel.

        Returns:
            tuple[torch.Tensor, torch.Tensor]: ``(rast, rast_db)`` as :func:`rasterize` returns them; pixels with
            no further surface are zero.

        Raises:
            RuntimeError: called outside the peeler's ``with`` block.
        """
        if not self._active:
            raise RuntimeError("DepthPeeler.rasterize_next_layer: use the peeler inside a 'with' block")
        pos, tri, ranges = self._inputs
        height, width = self._size
        rast, rast_db = torch.ops.prerast.rasterize_fwd(
            pos, tri, height, width, ranges, self._prev, self._grad_db, _checks.wants_derivatives(self._glctx)
        )
        self._prev = rast.detach()
        self.peeling_idx += 1
        return rast, rast_db


# --- the ops' fakes and autograd ------------------------------------------------------------------------------
# Each takes the op's arguments by schema name (_ops.py says how); _ops.define registers them with torch once the
# plugin's schemas exist.


def _rasterize_fwd_fake(pos, tri, height, width, ranges, peel_prev, grad_db, output_db):
    n = pos.shape[0] if pos.dim() == 3 else ranges.shape[0]
    return pos.new_empty((n, height, width, 4)), pos.new_empty((n, height, width, 4 if output_db else 0))


def _rasterize_bwd_fake(pos, tri, rast, grad_rast, grad_db):
    return torch.empty_like(pos)


def _rasterize_setup(ctx, a, output):
    ctx.save_for_backward(a.pos, a.tri, output[0])
    # Without rast_db (output_db=False) there is no derivative output for a gradient to come from.
    ctx.grad_db = a.grad_db and a.output_db
    # rast_db's gradient stays None when nothing used rast_db, so that the backward skips that term instead of
    # reading a tensor of zeros.
    ctx.set_materialize_grads(False)


def _rasterize_backward(ctx, grad_rast, grad_rast_db):
    pos, tri, rast = ctx.saved_tensors
    if grad_rast is None:
        grad_rast = torch.zeros_like(rast)
    grad_db = grad_rast_db.contiguous() if ctx.grad_db and grad_rast_db is not None else None
    return {"pos": torch.ops.prerast.rasterize_bwd(pos, tri, rast, grad_rast.contiguous(), grad_db)}


_ops.define(
    {
        "rasterize_fwd": (_rasterize_fwd_fake, _rasterize_setup, _rasterize_backward),
        "rasterize_bwd": (_rasterize_bwd_fake, _ops.save_nothing, None),
    }
)
