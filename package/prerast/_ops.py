"""What makes the compiled prerast::* ops proper custom ops for torch: a fake (shape-only) implementation of each,
so that torch.compile, torch.export and AOTInductor can trace them, and their autograd, registered through
torch.library. The public functions in _rasterize.py, _interpolate.py, _texture.py and _antialias.py are plain
calls of these ops, with nothing for Dynamo to trace around.

The *_bwd ops compute first-order gradients only; differentiating through them raises an error instead of
silently yielding zeros.

The list arguments (interpolate's `int[]? diff`, texture's `Tensor[]? mip`) are optional, and the public functions
pass None for an empty one: AOTInductor's proxy executor hands an empty list to an op as None, which a
non-optional list argument would refuse when a precompiled package runs.
"""
import functools

import torch

from ._constants import FILTER_MODES

_registered = []


# --- arguments by name -----------------------------------------------------------------------------------------
# The fakes, setup_contexts and backwards below never index an op's inputs by position: register() passes them
# the inputs by the names of the registered schema (csrc/bindings/<op>.cpp), and a backward returns a dict
# {argument name: gradient} that is laid out in the schema's order. A name that the schema lacks raises; a new
# argument cannot shift the meaning of another. tests/test_op_schemas.py checks every name used here against the
# schemas.

@functools.cache
def schema_arguments(op):
    """The registered schema's arguments of prerast::<op>, in order, as (name, has a default, default)."""
    return tuple((a.name, a.has_default_value(), a.default_value)
                 for a in getattr(torch.ops.prerast, op).default._schema.arguments)


class Inputs:
    """An op's inputs as attributes named after its schema's arguments, defaults filled in."""

    def __init__(self, op, args, kwargs=None):
        kwargs, values = dict(kwargs or {}), {}
        schema = schema_arguments(op)
        if len(args) > len(schema):
            raise TypeError(f"prerast::{op}: {len(args)} arguments, its schema has {len(schema)}")
        for i, (name, has_default, default) in enumerate(schema):
            if i < len(args):
                values[name] = args[i]
            elif name in kwargs:
                values[name] = kwargs.pop(name)
            elif has_default:
                values[name] = default
            else:
                raise TypeError(f"prerast::{op}: missing argument {name!r}")
        if kwargs:
            raise TypeError(f"prerast::{op}: its schema has no argument {sorted(kwargs)}")
        self._op, self._values = op, values

    def __getattr__(self, name):  # reached only for names that are not attributes of the object itself
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"prerast::{self.__dict__.get('_op')} has no argument {name!r}; its schema has "
                             f"{list(values)}")


def gradients(op, grads):
    """{argument name: gradient} as the tuple autograd wants: one slot per schema argument, None where absent."""
    names = [name for name, _, _ in schema_arguments(op)]
    unknown = grads.keys() - names
    if unknown:
        raise KeyError(f"prerast::{op}: the backward returns gradients for {sorted(unknown)}, which are not "
                       f"arguments of its schema {names}")
    return tuple(grads.get(name) for name in names)


def _no_double_backward(op):
    def backward(ctx, *grads):
        raise RuntimeError(f"prerast: {op} computes first-order gradients only; double backward (differentiating "
                           "a gradient of a prerast op, e.g. with create_graph=True) is not supported")
    return backward


def _save_nothing(ctx, a, output):
    pass


def _mip_size(n):
    """Side of the next mip level (csrc/core/texture.h mip_size): halved, rounded down, at least 1."""
    return torch.sym_max(n // 2, 1)


# --- rasterize -------------------------------------------------------------------------------------------------

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


# --- interpolate -----------------------------------------------------------------------------------------------

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
        attr, rast, tri, rast_db, ctx.diff or None, grad_out.contiguous(), grad_da.contiguous() if with_da else None)
    return {"attr": grad_attr, "rast": grad_rast, "rast_db": grad_db if with_da else None}


# --- texture ---------------------------------------------------------------------------------------------------

def _texture_fwd_fake(tex, uv, uv_da, mip_level_bias, mip, filter_mode, boundary_mode):
    return tex.new_empty((*uv.shape[:3], tex.shape[-1]))


def _texture_grads_made(filter_mode, uv_da, bias, mip):
    """Which of (uv, uv_da, mip_level_bias) texture_bwd returns real gradients for (the others are empty)."""
    lod = filter_mode == FILTER_MODES["linear-mipmap-linear"] and bool(mip)
    return filter_mode != FILTER_MODES["nearest"], lod and uv_da is not None, lod and bias is not None


def _texture_grads(filter_mode, uv_da, bias, mip, grad_tex, grad_uv, grad_da, grad_bias):
    """The gradients of texture_fwd's inputs that texture_bwd made, by name (None for the empty ones)."""
    made_uv, made_da, made_bias = _texture_grads_made(filter_mode, uv_da, bias, mip)
    return {"tex": grad_tex, "uv": grad_uv if made_uv else None, "uv_da": grad_da if made_da else None,
            "mip_level_bias": grad_bias if made_bias else None}


def _texture_bwd_fake(tex, uv, uv_da, mip_level_bias, mip, filter_mode, boundary_mode, grad_out, fold_mip):
    made_uv, made_da, made_bias = _texture_grads_made(filter_mode, uv_da, mip_level_bias, mip)
    none = lambda: tex.new_empty((0,))  # noqa: E731  (one each: outputs must not alias)
    return [torch.empty_like(tex), torch.empty_like(uv) if made_uv else none(),
            torch.empty_like(uv_da) if made_da else none(),
            torch.empty_like(mip_level_bias) if made_bias else none(),
            *(none() if fold_mip else torch.empty_like(m) for m in mip or ())]


def _mip_chain_shapes(tex, max_mip_level):
    """Shapes of the levels below tex that texture_fwd_mipped builds (as texture_construct_mip does)."""
    shapes, (h, w) = [], tex.shape[-3:-1]
    while (max_mip_level < 0 or len(shapes) < max_mip_level) and max(h, w) > 1:
        h, w = _mip_size(h), _mip_size(w)
        shapes.append((*tex.shape[:-3], h, w, tex.shape[-1]))
    return shapes


def _texture_mipped_fake(tex, uv, uv_da, mip_level_bias, max_mip_level, filter_mode, boundary_mode):
    return [tex.new_empty((*uv.shape[:3], tex.shape[-1])),
            *(tex.new_empty(s) for s in _mip_chain_shapes(tex, max_mip_level))]


def _texture_setup(ctx, a, output):
    ctx.save_for_backward(a.tex, a.uv, a.uv_da, a.mip_level_bias, *(a.mip or ()))
    ctx.modes = (a.filter_mode, a.boundary_mode)
    ctx.mip_is_list = a.mip is not None  # the gradient of mip has the structure mip had: a list, or None


def _texture_backward(ctx, grad_out):
    filter_mode, boundary_mode = ctx.modes
    tex, uv, uv_da, bias, *mip = ctx.saved_tensors
    grad_tex, grad_uv, grad_da, grad_bias, *grad_mip = torch.ops.prerast.texture_bwd(
        tex, uv, uv_da, bias, mip or None, filter_mode, boundary_mode, grad_out.contiguous())
    return {**_texture_grads(filter_mode, uv_da, bias, mip, grad_tex, grad_uv, grad_da, grad_bias),
            "mip": grad_mip if ctx.mip_is_list else None}


def _texture_mipped_setup(ctx, a, output):
    ctx.save_for_backward(a.tex, a.uv, a.uv_da, a.mip_level_bias, *output[1:])
    ctx.modes = (a.filter_mode, a.boundary_mode)
    ctx.set_materialize_grads(False)  # the levels' gradients are None (not texture-sized zeros) when unused


def _texture_mipped_backward(ctx, grads):
    """The levels are tex's own chain: texture_bwd folds their gradients into tex's in place. Gradients of the
    returned levels themselves (only a direct caller of the op has them) go back through the chain's adjoint."""
    filter_mode, boundary_mode = ctx.modes
    tex, uv, uv_da, bias, *mip = ctx.saved_tensors
    grad_out = tex.new_zeros((*uv.shape[:3], tex.shape[-1])) \
        if grads[0] is None else grads[0].contiguous()
    grad_tex, grad_uv, grad_da, grad_bias, *_ = torch.ops.prerast.texture_bwd(
        tex, uv, uv_da, bias, mip or None, filter_mode, boundary_mode, grad_out, True)
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


# --- antialias -------------------------------------------------------------------------------------------------

def _antialias_fwd_fake(color, rast, pos, tri, half_edges, group_of, group_start, pos_gradient_boost):
    return torch.empty_like(color), color.new_empty((*rast.shape[:3], 2))


def _antialias_bwd_fake(color, rast, pos, tri, half_edges, group_of, group_start, crossing, grad_out,
                        pos_gradient_boost, with_pos):
    return torch.empty_like(color), torch.empty_like(pos) if with_pos else pos.new_empty((0,))


def _antialias_setup(ctx, a, output):
    ctx.save_for_backward(a.color, a.rast, a.pos, a.tri, a.half_edges, a.group_of, a.group_start, output[1])
    ctx.boost = a.pos_gradient_boost


def _antialias_backward(ctx, grad_out, grad_crossing):
    with_pos = ctx.needs_input_grad[2]
    grad_color, grad_pos = torch.ops.prerast.antialias_bwd(*ctx.saved_tensors, grad_out.contiguous(), ctx.boost,
                                                           with_pos)
    return {"color": grad_color, "pos": grad_pos if with_pos else None}


# op -> (fake, setup_context, backward), each taking the op's arguments by schema name: the fake as keyword
# arguments, setup_context as an Inputs, and the backward returning {argument name: gradient}. A backward of None
# makes the op first-order only.
OPS = {
    "rasterize_fwd": (_rasterize_fwd_fake, _rasterize_setup, _rasterize_backward),
    "rasterize_bwd": (_rasterize_bwd_fake, _save_nothing, None),
    "interpolate_fwd": (_interpolate_fwd_fake, _interpolate_setup, _interpolate_backward),
    "interpolate_bwd": (_interpolate_bwd_fake, _save_nothing, None),
    "texture_fwd": (_texture_fwd_fake, _texture_setup, _texture_backward),
    "texture_bwd": (_texture_bwd_fake, _save_nothing, None),
    "texture_fwd_mipped": (_texture_mipped_fake, _texture_mipped_setup, _texture_mipped_backward),
    "texture_mip_down": (_mip_down_fake, _mip_down_setup, _mip_down_backward),
    "texture_mip_down_adjoint": (_mip_down_adjoint_fake, _save_nothing, _mip_down_adjoint_backward),
    "antialias_fwd": (_antialias_fwd_fake, _antialias_setup, _antialias_backward),
    "antialias_bwd": (_antialias_bwd_fake, _save_nothing, None),
}


def _by_name(op, fake, setup, backward):
    """The three functions as torch.library calls them: with the inputs by position, and the backward returning
    one gradient per schema argument."""
    def fake_impl(*args, **kwargs):
        return fake(**Inputs(op, args, kwargs)._values)

    def setup_context(ctx, inputs, output):
        setup(ctx, Inputs(op, inputs), output)

    def backward_impl(ctx, *grads):
        return gradients(op, backward(ctx, *grads))
    return fake_impl, setup_context, backward_impl if backward else _no_double_backward(op)


def register():
    """Register the fakes and autograd of every op, once, after the plugin has loaded."""
    if _registered:
        return
    _registered.append(True)
    for op, functions in OPS.items():
        name = f"prerast::{op}"
        fake, setup, backward = _by_name(op, *functions)
        torch.library.register_fake(name)(fake)
        torch.library.register_autograd(name, backward, setup_context=setup)
