"""What makes the compiled prerast::* ops proper custom ops for torch: a fake (shape-only) implementation of each,
so that torch.compile, torch.export and AOTInductor can trace them, and their autograd, registered through
torch.library. Each op's module (_rasterize.py, _interpolate.py, _texture.py, _antialias.py) holds its public
function, a plain call of the op with nothing for Dynamo to trace around, and next to it the op's fake,
setup_context and backward, which it hands to define(); this module holds only what they share.

The *_bwd ops compute first-order gradients only; differentiating through them raises an error instead of
silently yielding zeros.

The list arguments (interpolate's `int[]? diff`, texture's `Tensor[]? mip`) are optional, and the public functions
pass None for an empty one: AOTInductor's proxy executor hands an empty list to an op as None, which a
non-optional list argument would refuse when a precompiled package runs.
"""

import functools
import threading

import torch

from . import _constants

# torch.OutOfMemoryError from torch 2.5 on; the same class as torch.cuda.OutOfMemoryError, which older releases have.
OutOfMemoryError = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

# op -> (fake, setup_context, backward), as the op modules define them: the fake takes the op's arguments as keyword
# arguments, setup_context an Inputs, and the backward returns {argument name: gradient}. A backward of None makes
# the op first-order only.
OPS = {}
_registered = []
# define() and register() each check, then change, OPS and _registered: one at a time, so that an op defined while
# another thread registers is registered exactly once (a free-threaded Python has no GIL to order them).
_lock = threading.Lock()


# --- exception types -------------------------------------------------------------------------------------------
# The classic binding raises torch's own exception types. The stable binding can raise ValueError, IndexError and
# RuntimeError only, so its out-of-memory failures (an output or scratch allocation, a CPU request larger than the
# machine's memory) are RuntimeErrors whose message carries OUT_OF_MEMORY_MARKER; every public function and
# backward goes through raises_typed, which raises torch.OutOfMemoryError for them, as the classic binding does.


def typed_error(e):
    """The exception a caller should see for `e`, raised by a compiled op: torch.OutOfMemoryError for an
    out-of-memory failure of the stable binding, else `e` itself."""
    marker = _constants.OUT_OF_MEMORY_MARKER
    if isinstance(e, RuntimeError) and not isinstance(e, OutOfMemoryError) and marker in str(e):
        return OutOfMemoryError(str(e).replace(" " + marker, ""))
    return e


def raises_typed(fn):
    """fn, raising typed_error of what the ops raise. While torch.compile traces, fn runs as it is: the ops run
    later, from the compiled graph, where their fakes and the compiled code stand in for this function."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            typed = typed_error(e)
            if typed is e:
                raise
            raise typed.with_traceback(e.__traceback__) from None

    return call


# --- arguments by name -----------------------------------------------------------------------------------------
# The fakes, setup_contexts and backwards never index an op's inputs by position: register() passes them
# the inputs by the names of the registered schema (csrc/bindings/<op>.cpp), and a backward returns a dict
# {argument name: gradient} that is laid out in the schema's order. A name that the schema lacks raises; a new
# argument cannot shift the meaning of another. tests/runtime/test_op_schemas.py checks every name used here against the
# schemas.


@functools.cache
def schema_arguments(op):
    """The registered schema's arguments of prerast::<op>, in order, as (name, has a default, default)."""
    return tuple(
        (a.name, a.has_default_value(), a.default_value)
        for a in getattr(torch.ops.prerast, op).default._schema.arguments
    )


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
        raise AttributeError(
            f"prerast::{self.__dict__.get('_op')} has no argument {name!r}; its schema has {list(values)}"
        )


def gradients(op, grads):
    """{argument name: gradient} as the tuple autograd wants: one slot per schema argument, None where absent."""
    names = [name for name, _, _ in schema_arguments(op)]
    unknown = grads.keys() - names
    if unknown:
        raise KeyError(
            f"prerast::{op}: the backward returns gradients for {sorted(unknown)}, which are not "
            f"arguments of its schema {names}"
        )
    return tuple(grads.get(name) for name in names)


def _no_double_backward(op):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"prerast: {op} computes first-order gradients only; double backward (differentiating "
            "a gradient of a prerast op, e.g. with create_graph=True) is not supported"
        )

    return backward


def save_nothing(ctx, a, output):
    pass


def _by_name(op, fake, setup, backward):
    """The three functions as torch.library calls them: with the inputs by position, and the backward returning
    one gradient per schema argument."""

    def fake_impl(*args, **kwargs):
        return fake(**Inputs(op, args, kwargs)._values)

    def setup_context(ctx, inputs, output):
        setup(ctx, Inputs(op, inputs), output)

    @raises_typed
    def backward_impl(ctx, *grads):
        return gradients(op, backward(ctx, *grads))

    return fake_impl, setup_context, backward_impl if backward else _no_double_backward(op)


def _register(table):
    for op, functions in table.items():
        name = f"prerast::{op}"
        fake, setup, backward = _by_name(op, *functions)
        torch.library.register_fake(name)(fake)
        torch.library.register_autograd(name, backward, setup_context=setup)


def define(table):
    """Add {op: (fake, setup_context, backward)} to OPS: registered with torch now if the plugin has loaded, else
    when it does (register())."""
    with _lock:
        again = sorted(table.keys() & OPS.keys())
        if again:
            raise ValueError(
                f"prerast: {again} already have a fake and autograd (from {OPS[again[0]][0].__module__}); "
                "define each op once, in its own module"
            )
        OPS.update(table)
        if _registered:
            _register(table)


def register():
    """Register the fakes and autograd of every op defined so far, once, after the plugin has loaded; ops defined
    later (their modules are imported after the load) register as they are defined."""
    with _lock:
        if _registered:
            return
        _registered.append(True)
        _register(OPS)
