"""Fuzz cases of every prerast op, public function and raw torch.ops.prerast op, and how one is judged.

Each case calls one op with one argument (or two, in the seeded combinations) changed from a valid base: a wrong
dtype, rank or shape, zero-size or absurd dimensions, a non-contiguous tensor or one on another device (meta, or the
CPU beside a GPU), NaN/inf/huge/tiny values, indices out of range, corrupt tables; and extreme but valid inputs,
some compared with a reference. Cases are made deterministically, so that a child process (fuzz_runner.py) can
resume after case i. A case passes when it
- succeeds ('ok' or 'any') with finite outputs where its inputs are finite, and its check (if any) holds, or
- ('error' or 'any') raises TypeError, ValueError, IndexError, RuntimeError or NotImplementedError with a message
  that names the op or the argument (for a request that cannot fit: an out-of-memory error as
  tests/support/out_of_memory.py says, naming the op); on a GPU, a
  device-side assert where the case corrupts index data (the ops check indices on the device, without waiting).
"""

import os
import random
import sys
import zlib

import torch

import prerast

# The child processes of fuzz_runner.py import this module from its folder: the rule for an out-of-memory failure
# is tests/support's, shared with the out-of-memory tests.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "support")
)
import out_of_memory  # noqa: E402

OPS = torch.ops.prerast
CLEAR = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError)
FAMILIES = {}  # op family -> [(part, function(device) -> iterable of Case)]


class Lazy:
    """A value (of mutations' `values`) made from the base arguments when the case runs."""

    def __init__(self, fn):
        self.fn = fn


class Case:
    def __init__(self, name, fn, expect="any", finite=True, words=(), device_assert=False, check=None):
        self.name, self.fn, self.expect, self.finite = name, fn, expect, finite
        self.words, self.device_assert, self.check = words, device_assert, check


def family(name, part=""):
    """Registers a generator of cases of an op family (their names start with 'name/part/')."""

    def register(gen):
        FAMILIES.setdefault(name, []).append((part, gen))
        return gen

    return register


def cases(device, families=None, skip_device_asserts=False):
    """The cases of the given families (all by default), in a fixed order. On a GPU a case that ends in a
    device-side assert needs a fresh process: only the first of each op and argument is kept."""
    # Imported to register their families.
    import fuzz_raster  # noqa: F401
    import fuzz_shade  # noqa: F401
    import fuzz_texture  # noqa: F401

    out, seen = [], set()
    for fam, part, gen in [(f, part, gen) for f in families or FAMILIES for part, gen in FAMILIES[f]]:
        for c in gen(device):
            c.name = "/".join(x for x in (fam, part, c.name) if x)
            if c.device_assert and device != "cpu":
                key = c.name.split("=")[0]
                if skip_device_asserts or key in seen:
                    continue
                seen.add(key)
            out.append(c)
    names = [c.name for c in out]
    assert len(set(names)) == len(names), "case names must be unique"
    return out


# --- judging ---------------------------------------------------------------------------------------------------


def tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in tensors(item)]
    if isinstance(x, prerast.TextureMipChain):
        return list(x._levels)
    return []


def _short(text, n=300):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."


def run_case(case, device):
    """(problem or None, what happened: 'returned' or the exception's type, whether this process must be replaced:
    a CUDA error leaves the context unusable)."""
    try:
        result = case.fn(device)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (judged below)
        problem, broken = _judge_error(case, device, e)
        return problem, type(e).__name__, broken
    return _judge_result(case, result), "returned", False


def _judge_error(case, device, e):
    msg = f"{type(e).__name__}: {_short(e)}"
    broken = device != "cpu" and ("CUDA error" in str(e) or "device-side assert" in str(e))
    if case.expect == "ok":
        return f"raised {msg}", broken
    if not isinstance(e, CLEAR):
        return f"raised an exception of an unclear type, {msg}", broken
    if out_of_memory.is_out_of_memory(type(e).__name__, str(e)):  # a request that cannot fit
        return out_of_memory.out_of_memory_problem(type(e).__name__, str(e), case.words, public=False), False
    if broken:
        return (None if case.device_assert else f"CUDA error: {msg}"), True
    if not any(w in str(e) for w in case.words):
        return f"message names none of {list(case.words)}: {msg}", False
    return None, False


def _judge_result(case, result):
    if case.expect == "error":
        return "no error raised"
    if case.finite:
        bad = [
            i
            for i, t in enumerate(tensors(result))
            if t.is_floating_point() and t.device.type != "meta" and not bool(torch.isfinite(t).all())
        ]
        if bad:
            return f"outputs {bad} of finite inputs are not finite"
    if case.check is not None:
        problem = case.check(result)
        if problem:
            return f"wrong result: {problem}"
    return None


# --- making inputs ---------------------------------------------------------------------------------------------

# [N, H, W] of images that hold no pixel yet have a side past int32: shape arithmetic must not overflow.
EMPTY_HUGE = (0, 2**31 + 1, 6)


def rng(name):
    """A generator seeded by a case's name."""
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def ctx_for(device):
    return prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)


def leaf(t):
    """A tensor that collects a gradient (floating tensors only)."""
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type != "meta":
        return t.detach().clone().requires_grad_(True)
    return t


def backward(out, leaves):
    """Sums the differentiable outputs, differentiates, and returns [*gradients, *outputs]."""
    outs = [t for t in tensors(out) if t.requires_grad]
    if outs:
        sum(t.float().sum() for t in outs).backward()
    grads = [t.grad for t in leaves if isinstance(t, torch.Tensor) and t.grad is not None]
    return grads + [t.detach() for t in tensors(out)]


def _set(t, value, where=0.5):
    """A copy of t with one element (at fraction `where` of the flat tensor) set to value."""
    t = t.clone().contiguous()
    if t.numel():
        t.view(-1)[int(where * (t.numel() - 1))] = value
    return t


def _noncontiguous(t):
    out = torch.empty(*t.shape, 2, dtype=t.dtype, device=t.device)[..., 0]
    return out.copy_(t)


def _ids(t, value):
    """rast with the triangle ID of one pixel set to value."""
    t = t.clone()
    if t.dim() == 4 and t.shape[-1] == 4 and t.numel():
        t.view(-1, 4)[t.shape[0] * t.shape[1] * t.shape[2] // 2, 3] = value
    return t


def _float_bits(bits):
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32).item()


# (label, transform(tensor, args), expect, finite, device_assert); transform may return a non-tensor.
SHAPES = [
    ("rank+1", lambda t, a: t[None], "any", True, False),
    ("rank-1", lambda t, a: t[0] if t.dim() and len(t) else t.reshape(-1), "any", True, False),
    ("0-d", lambda t, a: t.reshape(-1)[0] if t.numel() else t.sum(), "error", True, False),
    ("noncontiguous", lambda t, a: _noncontiguous(t), "any", True, False),
    ("expanded", lambda t, a: t[:1].expand(t.shape) if t.dim() and len(t) else t, "any", True, False),
    ("last+1", lambda t, a: torch.cat([t, t[..., :1]], -1) if t.dim() else t, "any", True, False),
    ("last-1", lambda t, a: t[..., :-1].contiguous() if t.dim() else t, "any", True, False),
    ("empty_first", lambda t, a: t[:0] if t.dim() else t, "any", True, False),
    ("empty_last", lambda t, a: t[..., :0].contiguous() if t.dim() else t, "any", True, False),
    ("empty_huge", lambda t, a: t.new_empty([0, 2**31 + 1, *t.shape[2:]]) if t.dim() > 1 else t, "any", True, False),
    ("meta", lambda t, a: t.to("meta"), "any", False, False),
    ("other_device", lambda t, a: t.cpu() if t.is_cuda else t.to("meta"), "any", False, False),
    ("batch+1", lambda t, a: torch.cat([t, t[:1]]) if t.dim() else t, "any", True, False),
    ("list", lambda t, a: t.tolist(), "error", True, False),
    ("string", lambda t, a: "tensor", "error", True, False),
]
FLOATS = SHAPES + [
    ("float64", lambda t, a: t.double(), "error", True, False),
    ("float16", lambda t, a: t.half(), "error", True, False),
    ("int32", lambda t, a: t.int(), "error", True, False),
    ("bool", lambda t, a: t > 0, "error", True, False),
    ("nan", lambda t, a: torch.full_like(t, float("nan")), "any", False, False),
    ("nan_one", lambda t, a: _set(t, float("nan")), "any", False, False),
    ("inf_one", lambda t, a: _set(t, float("inf")), "any", False, False),
    ("-inf_one", lambda t, a: _set(t, float("-inf"), 0.3), "any", False, False),
    ("huge", lambda t, a: t * 1e30, "any", True, False),
    ("tiny", lambda t, a: t * 1e-30, "any", True, False),
    ("max", lambda t, a: torch.full_like(t, 3.4e38), "any", False, False),
    ("negated", lambda t, a: -t, "any", True, False),
]
INTS = SHAPES + [
    ("int64", lambda t, a: t.long(), "error", True, False),
    ("float32", lambda t, a: t.float(), "error", True, False),
    ("int16", lambda t, a: t.short(), "error", True, False),
]
# Index data: the op must refuse values outside [0, bound) (on a GPU through a device-side assert).
INDICES = INTS + [
    ("-1", lambda t, a: _set(t, -1), "error", True, True),
    ("int_min", lambda t, a: _set(t, -(2**31), 0.9), "error", True, True),
    ("int_max", lambda t, a: _set(t, 2**31 - 1, 0.1), "error", True, True),
    ("past_end", lambda t, a: _set(t, 10**6, 1.0), "error", True, True),
]
# rast: the triangle ID channel must hold IDs of the tri it is used with.
RASTS = FLOATS + [
    ("id_nan", lambda t, a: _ids(t, float("nan")), "any", False, True),
    ("id_-1", lambda t, a: _ids(t, -1.0), "any", True, True),
    ("id_past_end", lambda t, a: _ids(t, float(len(a["tri"]) + 1)), "any", True, True),
    ("id_inf", lambda t, a: _ids(t, float("inf")), "any", False, True),
    ("id_1e30", lambda t, a: _ids(t, 1e30), "any", True, True),
    ("id_largest", lambda t, a: _ids(t, _float_bits(0x7F7FFFFF)), "any", True, True),
    ("id_half", lambda t, a: _ids(t, 0.5), "any", True, False),
]
KINDS = {"f": FLOATS, "i": INDICES, "n": INTS, "r": RASTS}


def mutations(prefix, base, call, kinds, words, values=None, combos=8, expect_base="ok", unbounded=()):
    """Cases of call(device, **args): the base args unchanged, each argument of `kinds` ({name: 'f' float, 'i'
    indices, 'n' other ints, 'r' rast}) changed by every mutation of its kind, each of `values` ({name: [(label,
    value, expect), ...]}; a value that is a Lazy is made from the base args) set to each value, and `combos`
    seeded pairs of changes to two arguments. `unbounded` lists changes ('arg=label') whose exact outputs may
    exceed float32 (the gradient of a tiny input), so that they need not be finite."""
    values = values or {}
    words = tuple(words)
    changes = []  # (arg, label, function of args giving the new value, expect, finite, device_assert)
    for arg, kind in kinds.items():
        for label, fn, expect, finite, dev in KINDS[kind]:
            changes.append((arg, label, lambda a, arg=arg, fn=fn: fn(a[arg], a), expect, finite, dev))
    for arg, options in values.items():
        for label, value, expect in options:
            changes.append((arg, label, lambda a, v=value: v.fn(a) if isinstance(v, Lazy) else v, expect, True, False))
    changes = [(*c[:4], c[4] and f"{c[0]}={c[1]}" not in unbounded, c[5]) for c in changes]

    def run(changed):
        def fn(device):
            args = base(device)
            new = {arg: make(args) for arg, make in changed}
            args.update(new)
            return call(device, **args)

        return fn

    yield Case(f"{prefix}/base", run([]), expect_base, True, words)
    for arg, label, make, expect, finite, dev in changes:
        yield Case(f"{prefix}/{arg}={label}", run([(arg, make)]), expect, finite, words + (arg,), dev)
    r = random.Random(zlib.crc32(prefix.encode()))
    for _ in range(combos):
        one, two = r.sample(changes, 2)
        if one[0] == two[0]:
            continue
        name = f"{prefix}/{one[0]}={one[1]}+{two[0]}={two[1]}"
        yield Case(
            name, run([one[:3:2], two[:3:2]]), "any", one[4] and two[4], words + (one[0], two[0]), one[5] or two[5]
        )
