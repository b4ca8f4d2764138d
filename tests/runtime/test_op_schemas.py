"""The Python side of every op (what prerast/_<op>.py hands to _ops.define) agrees with its registered C++ schema:
the fakes, setup_contexts and backwards name only arguments the schema has, every tensor op has a fake and an
autograd registration, and a backward gives one gradient per schema argument, each shaped like the argument it
belongs to."""

import ast
import inspect
import textwrap

import pytest
import torch
from test_custom_ops import op_inputs
from torch._library import simple_registry

from prerast import _ops


def registered_names(op):
    return [a.name for a in getattr(torch.ops.prerast, op).default._schema.arguments]


def _tree(fn):
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def _called_helpers(fn):
    """fn and the functions of its own module it calls, directly or through each other."""
    found, todo = [], [fn]
    while todo:
        f = todo.pop()
        if f in found:
            continue
        found.append(f)
        for node in ast.walk(_tree(f)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                helper = f.__globals__.get(node.func.id)
                if inspect.isfunction(helper) and helper.__module__ == f.__module__:
                    todo.append(helper)
    return found


def names_read(setup):
    """The attributes a setup_context reads from its inputs (its second parameter)."""
    tree = _tree(setup)
    inputs = tree.body[0].args.args[1].arg
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == inputs
    }


def names_returned(backward):
    """The keys of the dicts a backward (or a helper of its module that it calls) returns."""
    keys = set()
    for fn in _called_helpers(backward):
        for node in ast.walk(_tree(fn)):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
                keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


def disagreements(ops, schema_names):
    """What in an op table (as _ops.OPS) names arguments that schema_names(op) does not list."""
    found = []
    for op, (fake, setup, backward) in ops.items():
        names = schema_names(op)
        params = list(inspect.signature(fake).parameters)
        if params != names:
            found.append(f"{op}: the fake takes {params}, the schema has {names}")
        for kind, used in (
            ("setup_context reads", names_read(setup)),
            ("backward returns gradients for", names_returned(backward) if backward else set()),
        ):
            if used - set(names):
                found.append(f"{op}: {kind} {sorted(used - set(names))}, not in the schema {names}")
    return found


def test_python_side_names_only_schema_arguments():
    assert disagreements(_ops.OPS, registered_names) == []


def test_a_renamed_schema_argument_is_reported():
    """Renaming rasterize_fwd's grad_db in the schema (as a C++ change would) leaves its fake and setup stale."""

    def renamed(op):
        return (
            [("want_grad_db" if n == "grad_db" else n) for n in registered_names(op)]
            if op == "rasterize_fwd"
            else registered_names(op)
        )

    found = disagreements(_ops.OPS, renamed)
    assert len(found) == 2 and all(f.startswith("rasterize_fwd:") and "grad_db" in f for f in found), found


def test_a_misspelled_name_is_reported():
    def setup(ctx, a, output):
        ctx.save_for_backward(a.tex, a.uvda)

    def backward(ctx, grad_out):
        return {"tex": grad_out, "mip_bias": None}

    table = {"texture_fwd": (_ops.OPS["texture_fwd"][0], setup, backward)}
    found = disagreements(table, registered_names)
    assert found == [
        f"texture_fwd: setup_context reads ['uvda'], not in the schema {registered_names('texture_fwd')}",
        "texture_fwd: backward returns gradients for ['mip_bias'], not in the schema "
        f"{registered_names('texture_fwd')}",
    ]


def _takes_or_returns_tensors(op):
    schema = getattr(torch.ops.prerast, op).default._schema
    return any("Tensor" in str(a.type) for a in (*schema.arguments, *schema.returns))


def test_every_tensor_op_has_a_fake_and_autograd():
    ops = sorted(n.split("::")[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("prerast::"))
    tensor_ops = [op for op in ops if _takes_or_returns_tensors(op)]
    assert "binary_info" in ops and "binary_info" not in tensor_ops
    assert sorted(_ops.OPS) == tensor_ops
    for op in tensor_ops:
        assert simple_registry.singleton.find(f"prerast::{op}").fake_impl.kernel is not None, op
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"prerast::{op}", "Autograd"), op


class Ctx:
    """The part of an autograd context that the setups and backwards use."""

    def __init__(self, num_inputs):
        self.needs_input_grad = (True,) * num_inputs

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def set_materialize_grads(self, value):
        pass


def _like(output):
    if isinstance(output, torch.Tensor):
        return torch.randn_like(output)
    return type(output)(_like(o) for o in output)


DIFFERENTIABLE = sorted(op for op, (_, _, backward) in _ops.OPS.items() if backward)


@pytest.mark.parametrize("op", DIFFERENTIABLE)
def test_backward_gives_each_argument_its_own_gradient(op, device):
    """Through the functions register() installs: a gradient per schema argument, each None or shaped like its
    argument (a gradient put in another argument's slot has another shape), for inputs that leave defaulted
    arguments out as callers do."""
    _, setup, backward = _ops._by_name(op, *_ops.OPS[op])
    names = registered_names(op)
    for args, _ in op_inputs(device)[op]:
        with torch.no_grad():
            output = getattr(torch.ops.prerast, op)(*args)
        ctx = Ctx(len(args))
        setup(ctx, args, output)
        # One gradient per output; a Tensor[] output (texture_fwd_mipped's) is one output, its gradient a list.
        grads = backward(ctx, *(_like(output) if isinstance(output, tuple) else (_like(output),)))
        assert len(grads) == len(names)
        for name, arg, grad in zip(names, args, grads):
            if grad is None:
                continue
            if isinstance(arg, torch.Tensor):
                assert grad.shape == arg.shape, (op, name)
            else:  # a list of tensors (texture_fwd's mip)
                assert [g.shape for g in grad] == [t.shape for t in arg], (op, name)
        assert any(g is not None for g in grads), op


def test_a_new_schema_argument_shifts_nothing(monkeypatch):
    """An argument added to rasterize_fwd's schema before height: the fake refuses it by name instead of reading
    it as the height, and gradients stay with the arguments they are named for."""
    schema = list(_ops.schema_arguments("rasterize_fwd"))
    grown = (*schema[:2], ("layers", False, None), *schema[2:])
    monkeypatch.setattr(_ops, "schema_arguments", lambda op: grown if op == "rasterize_fwd" else schema)
    fake, _, _ = _ops._by_name("rasterize_fwd", *_ops.OPS["rasterize_fwd"])
    pos, tri = torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.int32)
    with pytest.raises(TypeError, match="layers"):
        fake(pos, tri, 1, 8, 8, None, None)
    inputs = _ops.Inputs("rasterize_fwd", (pos, tri, 1, 8, 8, None, None))
    assert (inputs.height, inputs.width, inputs.grad_db, inputs.output_db) == (8, 8, True, True)
    grads = _ops.gradients("rasterize_fwd", {"pos": pos})
    assert len(grads) == 9 and grads[0] is pos and grads[1:] == (None,) * 8


def test_unknown_names_raise_at_run_time():
    inputs = _ops.Inputs("texture_mip_down", (torch.zeros(1, 2, 2, 1),))
    with pytest.raises(AttributeError, match="no argument 'tex'.*'level'"):
        inputs.tex  # noqa: B018 (the attribute read is what raises)
    with pytest.raises(KeyError, match="height"):
        _ops.gradients("texture_mip_down", {"height": None})
    with pytest.raises(TypeError, match="missing argument 'width'"):
        _ops.Inputs("texture_mip_down_adjoint", (torch.zeros(1, 1, 1, 1), 2))
