"""rasterize and DepthPeeler: the public API over the prerast::rasterize_* ops (autograd and fakes: _ops.py)."""
import torch

from . import _checks, _loader
from ._context import _Context


def _prepare(op, glctx, pos, tri, resolution, ranges):
    _loader.require()
    ranges = _checks.ranges_for(pos, ranges)
    if not isinstance(glctx, _Context):
        raise TypeError(f"{op}: glctx must be a RasterizeCudaContext or RasterizeCpuContext, got "
                        f"{type(glctx).__name__}")
    _checks.tensor(op, "pos", pos, torch.float32)
    _checks.tensor(op, "tri", tri, torch.int32)
    if ranges is not None:
        _checks.tensor(op, "ranges", ranges, torch.int32)
        if ranges.device.type != "cpu":
            raise ValueError(f"{op}: ranges must be a CPU tensor, got one on {ranges.device}")
    height, width = _checks.resolution(op, resolution)
    _checks.on_device(op, glctx.device, pos=pos, tri=tri)
    return height, width, ranges


def rasterize(glctx, pos, tri, resolution, ranges=None, grad_db=True):
    """Rasterize triangles into (rast, rast_db).

    pos: float32 [N, V, 4] clip-space vertices (instanced mode) or [V, 4] with ranges (range mode).
    tri: int32 [T, 3]. resolution: (height, width). ranges: int32 [N, 2] CPU tensor of (first, count), ignored in
    instanced mode.
    rast: [N, H, W, 4] = (u, v, z/w, triangle_id + 1), zero where nothing is drawn; IDs past 2^24 are stored as
    the float whose bit pattern is 0x4a800000 + triangle_id + 1, as in nvdiffrast.
    rast_db: [N, H, W, 4] = (du/dX, du/dY, dv/dX, dv/dY) in pixels; [N, H, W, 0], neither computed nor written,
    for a context made with output_db=False.
    Gradients flow to pos from u, v and, when grad_db is True, from rast_db.
    """
    height, width, ranges = _prepare("rasterize", glctx, pos, tri, resolution, ranges)
    glctx._check_free("rasterize")
    rast, rast_db = torch.ops.prerast.rasterize_fwd(pos, tri, height, width, ranges, None, bool(grad_db),
                                                    _checks.wants_derivatives(glctx))
    return rast, rast_db


class DepthPeeler:
    """Successive depth layers: `with DepthPeeler(ctx, pos, tri, res) as p: rast, db = p.rasterize_next_layer()`.

    The first layer equals rasterize(); each further one holds, per pixel, the nearest surface strictly behind the
    previous layer's, so a surface drawn twice at the same depth shows once. The context is reserved while the
    peeler is active (glctx.active_depth_peeler).
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
        self._glctx._check_free("DepthPeeler")
        self._glctx._active_peeler = self
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

    def rasterize_next_layer(self):
        if not self._active:
            raise RuntimeError("DepthPeeler.rasterize_next_layer: use the peeler inside a 'with' block")
        pos, tri, ranges = self._inputs
        height, width = self._size
        rast, rast_db = torch.ops.prerast.rasterize_fwd(pos, tri, height, width, ranges, self._prev, self._grad_db,
                                                        _checks.wants_derivatives(self._glctx))
        self._prev = rast.detach()
        self.peeling_idx += 1
        return rast, rast_db

