"""texture and texture_construct_mip: the public API over the prerast::texture_* ops, and
those ops' fakes and autograd.

Conventions (the arithmetic lives in csrc/core/texture.h):
- 2D textures are [N, Ht, Wt, C]; uv [..., 2] with u along the width, v along the height. Texel i covers
  [i/size, (i+1)/size) and its centre is (i + 0.5)/size.
- Cube maps are [N, 6, S, S, C] with faces +x, -x, +y, -y, +z, -z in the OpenGL layout; uv is a direction
  [..., 3] and uv_da its screen derivatives (dx/dX, dx/dY, dy/dX, dy/dY, dz/dX, dz/dY), the layout interpolate
  gives for a 3-component attribute with diff_attrs. Filtering continues across face edges; a bilinear tap off
  a cube corner reads the mean of the three texels that meet there.
- Mip level k+1 halves each side of level k, rounding down, down to 1 texel; an odd side folds its last texel
  into the last box (three texels averaged instead of two). Cube faces are reduced independently.
- Level of detail: with the footprint vectors jX = d texel / dX, jY = d texel / dY in level-0 texels (for a cube
  map, on the face's s, t), 0.5 * log2 of the larger eigenvalue of [[|jX|^2, jX.jY], [jX.jY, |jY|^2]] (the
  footprint's major axis), plus mip_level_bias, clamped to [0, levels - 1]. 'linear-mipmap-nearest' reads
  level floor(lod).
"""

import torch

from . import _checks, _loader, _ops
from ._constants import BOUNDARY_MODES, FILTER_MODES, MAX_MIP_LEVELS

_MIP_NEAREST, _MIP_LINEAR = FILTER_MODES["linear-mipmap-nearest"], FILTER_MODES["linear-mipmap-linear"]


class TextureMipChain:
    """Mip levels 1, 2, ... of a texture, as :func:`texture_construct_mip` returns them.

    Pass it as ``texture(..., mip=chain)`` to reuse it across calls while the texture is unchanged; gradients of
    its levels still reach the texture. It is made by :func:`texture_construct_mip`, not by user code.

    Args:
        levels (list[torch.Tensor]): the levels below the texture, largest first.
        base_shape (Sequence[int]): the shape of the texture (level 0).
        cube_mode (bool): whether the texture is a cube map.

    Differences from nvdiffrast:
        prerast's own object; it cannot be mixed with nvdiffrast's opaque mip objects.
    """

    def __init__(self, levels, base_shape, cube_mode):
        self._levels = levels
        self._base_shape = tuple(base_shape)
        self._cube_mode = cube_mode

    @property
    def num_levels(self):
        """Levels below level 0 (the texture itself)."""
        return len(self._levels)

    def __repr__(self):
        return (
            f"TextureMipChain(base_shape={list(self._base_shape)}, levels={self.num_levels}, "
            f"cube_mode={self._cube_mode})"
        )


def _check_tex(op, tex, cube):
    _checks.tensor(op, "tex", tex)
    if tex.dtype != torch.float32:
        raise TypeError(f"{op}: tex must be float32, got {tex.dtype}")
    if cube and (tex.dim() != 5 or tex.shape[1] != 6 or tex.shape[2] != tex.shape[3]):
        raise ValueError(f"{op}: a cube map must have shape [N, 6, S, S, C], got {list(tex.shape)}")
    if tex.numel() == 0:
        raise ValueError(f"{op}: tex must have at least one texture, texel and channel, got shape {list(tex.shape)}")
    if not cube and tex.dim() != 4:
        hint = (
            " (a cube map needs boundary_mode='cube', or cube_mode=True for texture_construct_mip)"
            if tex.dim() == 5
            else ""
        )
        raise ValueError(f"{op}: a 2D texture must have shape [N, H, W, C], got {list(tex.shape)}{hint}")


def _flat(t):
    """[N, (6,) h, w, C] -> [N * faces, h, w, C]: cube faces are reduced like separate 2D textures. A 2D texture
    is passed as it is: a view would put a node in the graph whose gradient shares storage, which makes autograd
    sum the texture's two gradients (its own and its levels') into a new tensor instead of into one of them."""
    return t if t.dim() == 4 else t.reshape(-1, *t.shape[-3:])


def _build_levels(tex, max_mip_level):
    """Levels 1, 2, ... of tex. Each halving is differentiable, so that gradients of the levels reach tex."""
    levels = []
    level = tex.contiguous()
    while (max_mip_level is None or len(levels) < max_mip_level) and max(level.shape[-3:-1]) > 1:
        nxt = torch.ops.prerast.texture_mip_down(_flat(level))
        level = nxt if tex.dim() == 4 else nxt.view(*tex.shape[:-3], *nxt.shape[1:])
        levels.append(level)
    return levels


@_ops.raises_typed
def texture_construct_mip(tex, max_mip_level=None, cube_mode=False):
    """Build the mip chain of a texture once, for reuse across :func:`texture` calls.

    Level k+1 halves each side of level k (rounding down, to 1 texel) with 2×2 box averages; an odd side folds its
    last texel into the last box. Cube faces are reduced independently.

    Args:
        tex (torch.Tensor): float32 ``[N, H, W, C]``, or ``[N, 6, S, S, C]`` with cube_mode. Differentiable: the
            levels' gradients flow back into it.
        max_mip_level (int, optional): the most levels to build below tex (0: none). Default None: down to one
            texel.
        cube_mode (bool): tex is a cube map. Default False.

    Returns:
        TextureMipChain: the levels below tex, to pass as ``texture(tex, ..., mip=chain)``.

    Raises:
        TypeError: tex is not a float32 tensor.
        ValueError: tex has the wrong shape or is empty, or max_mip_level is negative or not an integer.
    """
    op = "texture_construct_mip"
    _loader.require()
    _check_tex(op, tex, bool(cube_mode))
    max_mip_level = _checks.max_mip_level(op, max_mip_level)
    _checks.on_device(op, tex.device, tex=tex)
    return TextureMipChain(_build_levels(tex, max_mip_level), tex.shape, bool(cube_mode))


def _mode(op, name, value, modes):
    if value not in modes:
        raise ValueError(f"{op}: {name} must be one of {', '.join(repr(m) for m in modes)}; got {value!r}")
    return modes[value]


def _levels_for(op, tex, mip, cube, max_mip_level):
    """The mip levels below tex to sample from a given chain (None is built inside texture_fwd_mipped)."""
    if isinstance(mip, TextureMipChain):
        if mip._base_shape != tuple(tex.shape) or mip._cube_mode != cube:
            raise ValueError(
                f"{op}: mip was built for a texture of shape {list(mip._base_shape)} "
                f"(cube_mode={mip._cube_mode}) but tex has shape {list(tex.shape)} "
                f"(cube={cube}); rebuild it with texture_construct_mip(tex)"
            )
        levels = mip._levels
    elif isinstance(mip, (list, tuple)):
        for i, t in enumerate(mip):
            _checks.tensor(op, f"mip[{i}]", t, torch.float32)
        levels = [t.contiguous() for t in mip]
    else:
        raise TypeError(
            f"{op}: mip must be None, the result of texture_construct_mip, or a list of level tensors; "
            f"got {type(mip).__name__}"
        )
    return levels if max_mip_level is None else levels[:max_mip_level]


@_ops.raises_typed
def texture(
    tex, uv, uv_da=None, mip_level_bias=None, mip=None, filter_mode="auto", boundary_mode="wrap", max_mip_level=None
):
    """Sample a 2D texture or cube map at texture coordinates, with optional mipmapping.

    Texel i of a side of n texels covers ``[i/n, (i+1)/n)``. The mip level of detail is ½·log2 of the larger
    eigenvalue of the footprint's screen-space Jacobian product (its major axis) in level-0 texels, plus
    mip_level_bias, clamped to the levels there are (:doc:`/conventions`).

    Args:
        tex (torch.Tensor): float32 ``[N, Ht, Wt, C]``, or ``[N, 6, S, S, C]`` (faces +x, −x, +y, −y, +z, −z)
            with ``boundary_mode='cube'``; N = 1 serves every image. Differentiable.
        uv (torch.Tensor): float32 ``[N, H, W, 2]`` texture coordinates (u along the width, v along the height),
            or ``[N, H, W, 3]`` directions for a cube map. Differentiable, except with ``'nearest'``.
        uv_da (torch.Tensor, optional): float32 screen derivatives of uv, ``[N, H, W, 4]`` = (du/dX, du/dY,
            dv/dX, dv/dY), or ``[N, H, W, 6]`` for a cube map (what :func:`interpolate` returns for a 3-component
            attribute). Differentiable with ``'linear-mipmap-linear'``. Default None.
        mip_level_bias (torch.Tensor, optional): float32 ``[N, H, W]`` added to the level of detail.
            Differentiable with ``'linear-mipmap-linear'``. Default None.
        mip (TextureMipChain | list[torch.Tensor], optional): the chain from :func:`texture_construct_mip`, or
            user tensors for levels 1..n. Default None: built inside the call when the filter needs it.
        filter_mode (str): ``'nearest'``, ``'linear'``, ``'linear-mipmap-nearest'`` (reads level ⌊lod⌋),
            ``'linear-mipmap-linear'``, or ``'auto'``: ``'linear'`` without uv_da and mip_level_bias, else
            ``'linear-mipmap-linear'``. The ``'linear-mipmap-*'`` modes need uv_da or mip_level_bias (to choose
            a level) unless max_mip_level is 0. Default ``'auto'``.
        boundary_mode (str): ``'wrap'`` (repeat), ``'clamp'`` (to the edge texel centres), ``'zero'`` (texels
            outside are 0) or ``'cube'``. Default ``'wrap'``.
        max_mip_level (int, optional): the most levels below tex to use (0: no mipmapping). Default None: all.

    Returns:
        torch.Tensor: float32 ``[N, H, W, C]``, the filtered samples.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype, or mip is neither a chain nor a list.
        ValueError: an unknown filter_mode or boundary_mode, a wrong shape, tensors on different devices, a
            negative max_mip_level, a chain built for another texture, or a ``'linear-mipmap-*'`` filter_mode with
            neither uv_da nor mip_level_bias (as nvdiffrast refuses it).

    Gradients:
        ``'nearest'``: to tex. ``'linear'``: tex, uv. ``'linear-mipmap-nearest'``: tex, uv (and user levels).
        ``'linear-mipmap-linear'``: tex, uv, uv_da, mip_level_bias (and user levels). With a built chain the
        levels' gradients flow back into tex.

    Differences from nvdiffrast:
        Odd-sized mip levels fold the last texel into the last box; a bilinear tap off a cube corner reads the
        mean of the three texels there; degenerate footprints (zero, infinite, NaN) have a defined level and
        finite gradients.
    """
    op = "texture"
    _loader.require()
    if filter_mode == "auto":
        filter_mode = "linear" if uv_da is None and mip_level_bias is None else "linear-mipmap-linear"
    filt = _mode(op, "filter_mode", filter_mode, FILTER_MODES)
    bound = _mode(op, "boundary_mode", boundary_mode, BOUNDARY_MODES)
    cube = bound == BOUNDARY_MODES["cube"]
    _check_tex(op, tex, cube)
    _checks.tensor(op, "uv", uv, torch.float32)
    for name, t in (("uv_da", uv_da), ("mip_level_bias", mip_level_bias)):
        if t is not None:
            _checks.tensor(op, name, t, torch.float32)
    max_mip_level = _checks.max_mip_level(op, max_mip_level)
    _checks.same_device(op, tex=tex, uv=uv, uv_da=uv_da, mip_level_bias=mip_level_bias)

    mipmapped = filt in (_MIP_NEAREST, _MIP_LINEAR) and max_mip_level != 0
    if mipmapped and uv_da is None and mip_level_bias is None:
        # Nothing would select a level: nvdiffrast refuses this instead of sampling level 0.
        raise ValueError(
            f"{op}: filter_mode={filter_mode!r} needs uv_da (the screen derivatives of uv, e.g. "
            "interpolate(..., rast_db=rast_db, diff_attrs='all')) or mip_level_bias to choose a mip "
            "level; pass one, or use filter_mode='linear' (or max_mip_level=0) for no mipmapping"
        )
    levels = _levels_for(op, tex, mip, cube, max_mip_level) if mipmapped and mip is not None else []
    tex, uv, uv_da, mip_level_bias = (None if t is None else t.contiguous() for t in (tex, uv, uv_da, mip_level_bias))
    if mipmapped and mip is None:
        # One op builds the chain and samples it, so that its backward folds the levels' gradients into tex's in
        # place (the chain of texture_mip_down ops would allocate and add a texture-sized tensor per level).
        below = -1 if max_mip_level is None else min(max_mip_level, MAX_MIP_LEVELS - 1)
        return torch.ops.prerast.texture_fwd_mipped(tex, uv, uv_da, mip_level_bias, below, filt, bound)[0]
    return torch.ops.prerast.texture_fwd(tex, uv, uv_da, mip_level_bias, levels or None, filt, bound)


# --- the ops' fakes and autograd ------------------------------------------------------------------------------
# Each takes the op's arguments by schema name (_ops.py says how); _ops.define registers them with torch once the
# plugin's schemas exist.


def _mip_size(n):
    """Side of the next mip level (csrc/core/texture.h mip_size): halved, rounded down, at least 1."""
    return torch.sym_max(n // 2, 1)


def _texture_fwd_fake(tex, uv, uv_da, mip_level_bias, mip, filter_mode, boundary_mode):
    return tex.new_empty((*uv.shape[:3], tex.shape[-1]))


def _texture_grads_made(filter_mode, uv_da, bias, mip):
    """Which of (uv, uv_da, mip_level_bias) texture_bwd returns real gradients for (the others are empty)."""
    lod = filter_mode == FILTER_MODES["linear-mipmap-linear"] and bool(mip)
    return filter_mode != FILTER_MODES["nearest"], lod and uv_da is not None, lod and bias is not None


def _texture_grads(filter_mode, uv_da, bias, mip, grad_tex, grad_uv, grad_da, grad_bias):
    """The gradients of texture_fwd's inputs that texture_bwd made, by name (None for the empty ones)."""
    made_uv, made_da, made_bias = _texture_grads_made(filter_mode, uv_da, bias, mip)
    return {
        "tex": grad_tex,
        "uv": grad_uv if made_uv else None,
        "uv_da": grad_da if made_da else None,
        "mip_level_bias": grad_bias if made_bias else None,
    }


def _texture_bwd_fake(tex, uv, uv_da, mip_level_bias, mip, filter_mode, boundary_mode, grad_out, fold_mip):
    made_uv, made_da, made_bias = _texture_grads_made(filter_mode, uv_da, mip_level_bias, mip)
    none = lambda: tex.new_empty((0,))  # noqa: E731  (one each: outputs must not alias)
    return [
        torch.empty_like(tex),
        torch.empty_like(uv) if made_uv else none(),
        torch.empty_like(uv_da) if made_da else none(),
        torch.empty_like(mip_level_bias) if made_bias else none(),
        *(none() if fold_mip else torch.empty_like(m) for m in mip or ()),
    ]


def _mip_chain_shapes(tex, max_mip_level):
    """Shapes of the levels below tex that texture_fwd_mipped builds (as texture_construct_mip does)."""
    shapes, (h, w) = [], tex.shape[-3:-1]
    while (max_mip_level < 0 or len(shapes) < max_mip_level) and max(h, w) > 1:
        h, w = _mip_size(h), _mip_size(w)
        shapes.append((*tex.shape[:-3], h, w, tex.shape[-1]))
    return shapes


def _texture_mipped_fake(tex, uv, uv_da, mip_level_bias, max_mip_level, filter_mode, boundary_mode):
    return [
        tex.new_empty((*uv.shape[:3], tex.shape[-1])),
        *(tex.new_empty(s) for s in _mip_chain_shapes(tex, max_mip_level)),
    ]


def _texture_setup(ctx, a, output):
    ctx.save_for_backward(a.tex, a.uv, a.uv_da, a.mip_level_bias, *(a.mip or ()))
    ctx.modes = (a.filter_mode, a.boundary_mode)
    ctx.mip_is_list = a.mip is not None  # the gradient of mip has the structure mip had: a list, or None


def _texture_backward(ctx, grad_out):
    filter_mode, boundary_mode = ctx.modes
    tex, uv, uv_da, bias, *mip = ctx.saved_tensors
    grad_tex, grad_uv, grad_da, grad_bias, *grad_mip = torch.ops.prerast.texture_bwd(
        tex, uv, uv_da, bias, mip or None, filter_mode, boundary_mode, grad_out.contiguous()
    )
    return {
        **_texture_grads(filter_mode, uv_da, bias, mip, grad_tex, grad_uv, grad_da, grad_bias),
        "mip": grad_mip if ctx.mip_is_list else None,
    }


def _texture_mipped_setup(ctx, a, output):
    ctx.save_for_backward(a.tex, a.uv, a.uv_da, a.mip_level_bias, *output[1:])
    ctx.modes = (a.filter_mode, a.boundary_mode)
    ctx.set_materialize_grads(False)  # the levels' gradients are None (not texture-sized zeros) when unused


def _texture_mipped_backward(ctx, grads):
    """The levels are tex's own chain: texture_bwd folds their gradients into tex's in place. Gradients of the
    returned levels themselves (only a direct caller of the op has them) go back through the chain's adjoint."""
    filter_mode, boundary_mode = ctx.modes
    tex, uv, uv_da, bias, *mip = ctx.saved_tensors
    grad_out = tex.new_zeros((*uv.shape[:3], tex.shape[-1])) if grads[0] is None else grads[0].contiguous()
    grad_tex, grad_uv, grad_da, grad_bias, *_ = torch.ops.prerast.texture_bwd(
        tex, uv, uv_da, bias, mip or None, filter_mode, boundary_mode, grad_out, True
    )
    below = None  # the gradient of level k from the returned levels k, k + 1, ...
    for k in range(len(mip), 0, -1):
        g = grads[k]
        below = g if below is None else below if g is None else below + g
        if below is not None:
            above = tex if k == 1 else mip[k - 2]
            flat = below.reshape(-1, *below.shape[-3:]).contiguous()
            below = torch.ops.prerast.texture_mip_down_adjoint(flat, *above.shape[-3:-1]).view(above.shape)
    if below is not None:
        grad_tex = grad_tex + below
    return _texture_grads(filter_mode, uv_da, bias, mip, grad_tex, grad_uv, grad_da, grad_bias)


def _mip_down_fake(level):
    b, h, w, c = level.shape
    return level.new_empty((b, _mip_size(h), _mip_size(w), c))


def _mip_down_adjoint_fake(grad_next, height, width):
    return grad_next.new_empty((grad_next.shape[0], height, width, grad_next.shape[3]))


# Halving a level and its adjoint are linear maps, each the other's adjoint: their gradients are each other,
# to any order.
def _mip_down_setup(ctx, a, output):
    ctx.size = a.level.shape[1:3]


def _mip_down_backward(ctx, grad_next):
    return {"level": torch.ops.prerast.texture_mip_down_adjoint(grad_next.contiguous(), *ctx.size)}


def _mip_down_adjoint_backward(ctx, grad):
    return {"grad_next": torch.ops.prerast.texture_mip_down(grad.contiguous())}


_ops.define(
    {
        "texture_fwd": (_texture_fwd_fake, _texture_setup, _texture_backward),
        "texture_bwd": (_texture_bwd_fake, _ops.save_nothing, None),
        "texture_fwd_mipped": (_texture_mipped_fake, _texture_mipped_setup, _texture_mipped_backward),
        "texture_mip_down": (_mip_down_fake, _mip_down_setup, _mip_down_backward),
        "texture_mip_down_adjoint": (_mip_down_adjoint_fake, _ops.save_nothing, _mip_down_adjoint_backward),
    }
)
