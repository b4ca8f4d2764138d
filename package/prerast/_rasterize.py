"""rasterize and DepthPeeler: the public API over the prerast::rasterize_* ops (autograd and fakes: _ops.py)."""
import torch

from . import _checks, _loader
from ._context import _Context


def _prepare(op, glctx, pos, tri, resolution, ranges):
    _loader.require()
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
    return height, width


def rasterize(glctx, pos, tri, resolution, ranges=None, grad_db=True):
    """Rasterize triangles into (rast, rast_db).

    pos: float32 [N, V, 4] clip-space vertices (instanced mode) or [V, 4] with ranges (range mode).
    tri: int32 [T, 3]. resolution: (height, width). ranges: int32 [N, 2] CPU tensor of (first, count).
    rast: [N, H, W, 4] = (u, v, z/w, triangle_id + 1), zero where nothing is drawn.
    rast_db: [N, H, W, 4] = (du/dX, du/dY, dv/dX, dv/dY) in pixels.
    Gradients flow to pos from u, v and, when grad_db is True, from rast_db.
    """
    height, width = _prepare("rasterize", glctx, pos, tri, resolution, ranges)
    glctx._check_free("rasterize")
    return torch.ops.prerast.rasterize_fwd(pos, tri, height, width, ranges, None, bool(grad_db))


class DepthPeeler:
    """Successive depth layers: `with DepthPeeler(ctx, pos, tri, res) as p: rast, db = p.rasterize_next_layer()`.

    The first layer equals rasterize(); each further one holds, per pixel, the next surface behind the previous
    layer's. The context is reserved while the peeler is active.
    """

    def __init__(self, glctx, pos, tri, resolution, ranges=None, grad_db=True):
        self._inputs = (pos, tri, ranges)
        self._grad_db = bool(grad_db)
        self._size = _prepare("DepthPeeler", glctx, pos, tri, resolution, ranges)
        self._glctx = glctx
        self._prev = None
        self._active = False

    def __enter__(self):
        self._glctx._check_free("DepthPeeler")
        self._glctx._active_peeler = self
        self._active = True
        self._prev = None
        return self

    def __exit__(self, *exc):
        self._glctx._active_peeler = None
        self._active = False
        self._prev = None
        return False

    def rasterize_next_layer(self):
        if not self._active:
            raise RuntimeError("DepthPeeler.rasterize_next_layer: use the peeler inside a 'with' block")
        pos, tri, ranges = self._inputs
        height, width = self._size
        rast, rast_db = torch.ops.prerast.rasterize_fwd(pos, tri, height, width, ranges, self._prev, self._grad_db)
        self._prev = rast.detach()
        return rast, rast_db

