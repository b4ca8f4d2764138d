"""Fuzz cases of texture sampling (public texture, its backward, raw texture_fwd / texture_bwd, 2D and cube maps) and
of mip construction (texture_construct_mip, raw texture_mip_down / texture_mip_down_adjoint)."""

import torch

import prerast
from fuzz_cases import EMPTY_HUGE, OPS, Case, Lazy, backward, family, leaf, mutations, rng
from prerast._constants import FILTER_MODES

WORDS = ("texture",)
MWORDS = ("texture_construct_mip", "texture_mip_down")
FILTERS = list(FILTER_MODES)


def tex_args(device, cube=False):
    g = rng("tex")
    tex = torch.rand(2, 6, 8, 8, 3, generator=g) if cube else torch.rand(2, 16, 12, 3, generator=g)
    uv = torch.randn(2, 8, 6, 3, generator=g) if cube else torch.rand(2, 8, 6, 2, generator=g) * 2 - 0.5
    uv_da = torch.rand(2, 8, 6, 6 if cube else 4, generator=g) * 0.3
    bias = torch.rand(2, 8, 6, generator=g) - 0.5
    return {
        "tex": tex.to(device),
        "uv": uv.to(device),
        "uv_da": uv_da.to(device),
        "mip_level_bias": bias.to(device),
        "filter_mode": "linear-mipmap-linear",
        "boundary_mode": "cube" if cube else "wrap",
    }


def raw_args(device, cube=False):
    args = tex_args(device, cube)
    args["mip"] = prerast.texture_construct_mip(args["tex"], cube_mode=cube)._levels
    args["filter_mode"], args["boundary_mode"] = 3, 3 if cube else 0
    return args


def raw_bwd_args(device, cube=False):
    args = raw_args(device, cube)
    args["grad_out"] = torch.rand(2, 8, 6, 3, generator=rng("grad_out")).to(device)
    return args


def tex_grad(device, tex, uv, uv_da, mip_level_bias, **args):
    leaves = [leaf(t) for t in (tex, uv, uv_da, mip_level_bias)]
    return backward(prerast.texture(*leaves, **args), leaves)


def _chain(make):
    return Lazy(lambda a: make(a["tex"]))


MIPS = [
    ("empty_list", [], "ok"),
    ("string", "mip", "error"),
    ("wrong_shape", _chain(lambda t: [t[..., :5, :5, :]]), "error"),
    ("other_texture", _chain(lambda t: prerast.texture_construct_mip(t[:, :8])), "error"),
    ("float64", _chain(lambda t: [x.double() for x in prerast.texture_construct_mip(t)._levels]), "error"),
    (
        "noncontiguous",
        _chain(
            lambda t: [x.transpose(1, 2).contiguous().transpose(1, 2) for x in prerast.texture_construct_mip(t)._levels]
        ),
        "ok",
    ),
    ("too_many", _chain(lambda t: prerast.texture_construct_mip(t)._levels * 3), "error"),
    ("none_in_list", [None], "error"),
]
MAX_LEVEL = [
    ("-1", -1, "error"),
    ("0", 0, "ok"),
    ("100", 100, "ok"),
    ("2.5", 2.5, "error"),
    ("string", "1", "error"),
    ("bool", True, "error"),
    ("2^63", 2**63, "ok"),
    ("nan", float("nan"), "error"),
]
MODES = {
    "filter_mode": [(f, f, "ok") for f in FILTERS]
    + [("auto", "auto", "ok"), ("bogus", "bogus", "error"), ("none", None, "error"), ("int", 3, "error")],
    "boundary_mode": [(b, b, "ok") for b in ("wrap", "clamp", "zero")]
    + [("cube", "cube", "error"), ("bogus", "bogus", "error")],
    "mip": MIPS,
    "max_mip_level": MAX_LEVEL,
}
RAW_MODES = {
    "filter_mode": [("-1", -1, "error"), ("4", 4, "error"), ("2^62", 2**62, "error"), ("0", 0, "ok")],
    "boundary_mode": [("-1", -1, "error"), ("4", 4, "error"), ("cube", 3, "error"), ("2", 2, "ok")],
    "mip": MIPS[:1]
    + [
        (label, Lazy(lambda a, v=v: getattr(v.fn(a), "_levels", None) or v.fn(a)), "error") for label, v, _ in MIPS[2:7]
    ],
}


def mipped_args(device, cube=False):
    """texture_fwd_mipped: the chain is built inside the op."""
    args = raw_args(device, cube)
    del args["mip"]
    args["max_mip_level"] = -1
    return args


MIPPED_MODES = {
    "filter_mode": [("linear", 1, "error"), ("nearest", 0, "error"), ("4", 4, "error"), ("mip_nearest", 2, "ok")],
    "boundary_mode": RAW_MODES["boundary_mode"],
    "max_mip_level": [("-2", -2, "error"), ("0", 0, "ok"), ("2", 2, "ok"), ("2^62", 2**62, "ok")],
}


@family("texture")
def texture_cases(device):
    kinds = {"tex": "f", "uv": "f", "uv_da": "f", "mip_level_bias": "f"}
    yield from mutations("public", tex_args, lambda d, **a: prerast.texture(**a), kinds, WORDS, MODES)
    yield from mutations(
        "cube",
        lambda d: tex_args(d, True),
        lambda d, **a: prerast.texture(**a),
        kinds,
        WORDS,
        {"boundary_mode": [("wrap", "wrap", "error")]},
        combos=4,
    )
    yield from mutations("raw", raw_args, lambda d, **a: OPS.texture_fwd(**a), kinds, WORDS, RAW_MODES)
    yield from mutations(
        "raw_cube",
        lambda d: raw_args(d, True),
        lambda d, **a: OPS.texture_fwd(**a),
        {"uv": "f", "uv_da": "f"},
        WORDS,
        combos=0,
    )
    yield from mutations(
        "raw_mipped", mipped_args, lambda d, **a: OPS.texture_fwd_mipped(**a), kinds, WORDS, MIPPED_MODES
    )
    yield from mutations(
        "raw_mipped_cube",
        lambda d: mipped_args(d, True),
        lambda d, **a: OPS.texture_fwd_mipped(**a),
        {"tex": "f", "uv": "f"},
        WORDS,
        combos=0,
    )
    yield from uv_sweep()


@family("texture", "bwd")
def texture_bwd_cases(device):
    kinds = {"tex": "f", "uv": "f", "uv_da": "f", "mip_level_bias": "f"}
    yield from mutations(
        "public", tex_args, tex_grad, kinds, WORDS, {"filter_mode": MODES["filter_mode"][:5], "mip": MIPS[:1]}, combos=4
    )
    # The footprint of a direction of length 1e-30 changes like 1e60 with it: no float32 gradient.
    yield from mutations(
        "cube",
        lambda d: tex_args(d, True),
        tex_grad,
        {"uv": "f", "uv_da": "f"},
        WORDS,
        combos=0,
        unbounded=("uv=tiny",),
    )
    yield from mutations(
        "raw", raw_bwd_args, lambda d, **a: OPS.texture_bwd(**a), {**kinds, "grad_out": "f"}, WORDS, RAW_MODES
    )
    yield from mutations(
        "raw_folded",
        lambda d: {**raw_bwd_args(d), "fold_mip": True},
        lambda d, **a: OPS.texture_bwd(**a),
        {"tex": "f", "grad_out": "f"},
        WORDS,
        {"mip": RAW_MODES["mip"]},
    )
    yield from uv_sweep(grad=True)


# Texture coordinates far outside [0, 1], at the edge of float32 precision, or at integer boundaries.
UVS = [
    ("1e30", 1e30),
    ("-1e30", -1e30),
    ("3e38", 3.4e38),
    ("2^31", 2.0**31),
    ("-2^31-1", -(2.0**31) - 256),
    ("1e10", 1e10),
    ("2^24+0.5", 2.0**23 + 0.5),
    ("below_1", 0.99999994),
    ("-0", -0.0),
    ("1e-45", 1e-45),
]
DERIVS = [("da_1e30", 1e30), ("da_0", 0.0), ("da_1e-30", 1e-30), ("da_-3e38", -3.4e38)]
BIASES = [("bias_1e30", 1e30), ("bias_-1e30", -1e30), ("bias_3e38", 3.4e38)]
DIRECTIONS = [
    ("zero", (0, 0, 0)),
    ("diagonal", (1, 1, 1)),
    ("-diagonal", (-1, -1, -1)),
    ("edge", (1, 1, 0)),
    ("huge", (3e38, -3e38, 1e30)),
    ("tiny", (1e-38, -1e-38, 1e-39)),
    ("denormal", (1e-45, 0, -1e-45)),
    ("axis", (0, 0, -1)),
    ("mixed", (1e30, 1e-30, 0)),
]


def sweep_case(name, args_of, grad):
    """Sampling with extreme but valid input: the result (a blend of texels, or 0 outside with 'zero') lies within
    the texture's range."""

    def fn(device):
        args = args_of(device)
        if grad:
            return tex_grad(device, **args)
        return prerast.texture(**args), args["tex"]

    def check(result):
        if grad:
            return None
        out, tex = result
        lo, hi = min(float(tex.min()), 0.0), float(tex.max())
        if float(out.min()) < lo - 1e-6 or float(out.max()) > hi + 1e-6:
            return f"samples in [{float(out.min())}, {float(out.max())}] outside the texture's [{lo}, {hi}]"
        return None

    return Case(f"extreme/{name}", fn, "ok", True, WORDS, check=check)


def with_values(base, **fills):
    def args_of(device):
        args = base(device)
        for key, (index, value) in fills.items():
            t = args[key].clone()
            t.view(-1, t.shape[-1] if key != "mip_level_bias" else 1)[::3, index] = value
            args[key] = t
        return args

    return args_of


def uv_sweep(grad=False):
    for boundary in ("wrap", "clamp", "zero"):
        for f in FILTERS if not grad else FILTERS[1::2]:

            def base(device, f=f, boundary=boundary):
                return {**tex_args(device), "filter_mode": f, "boundary_mode": boundary}

            for label, v in UVS if not grad else UVS[:4]:
                yield sweep_case(f"{boundary}/{f}/u={label}", with_values(base, uv=(0, v)), grad)
    for label, v in DERIVS + BIASES:
        key = "uv_da" if label.startswith("da") else "mip_level_bias"
        yield sweep_case(f"mip/{label}", with_values(tex_args, **{key: (0, v)}), grad)
    for label, d in DIRECTIONS:

        def cube(device, d=d):
            args = tex_args(device, True)
            args["uv"] = args["uv"].clone()
            args["uv"][:, ::2] = torch.tensor(d, dtype=torch.float32, device=device)
            return args

        case = sweep_case(f"cube/{label}", cube, grad)
        case.finite = not grad or label not in ("tiny", "denormal")  # gradients ~ 1 / |direction|^2
        yield case
    for label, v in DERIVS:
        yield sweep_case(f"cube/{label}", with_values(lambda d: tex_args(d, True), uv_da=(1, v)), grad)
    for shape in ((1, 1, 1, 1), (1, 1, 4096, 2), (2, 3, 5, 1)):  # tiny, thin and odd textures

        def tiny(device, shape=shape):
            return {**tex_args(device), "tex": torch.rand(shape, generator=rng("t")).to(device)}

        yield sweep_case(f"tex_{'x'.join(map(str, shape))}", tiny, grad)

    def empty_huge(device):
        args = raw_args(device)
        args.update(
            tex=args["tex"][:1],
            uv=torch.zeros(*EMPTY_HUGE, 2, device=device),
            uv_da=None,
            mip_level_bias=None,
            mip=[m[:1] for m in args["mip"]],
        )
        if grad:
            return OPS.texture_bwd(**args, grad_out=torch.zeros(*EMPTY_HUGE, 3, device=device))
        return OPS.texture_fwd(**args)

    yield Case("extreme/empty_huge", empty_huge, "ok", True, WORDS)
    yield sweep_case(
        "3000_images",
        lambda d: {
            **tex_args(d),
            "tex": torch.rand(1, 8, 8, 2, device=d),
            "uv": torch.rand(3000, 1, 2, 2, device=d),
            "uv_da": None,
            "mip_level_bias": torch.rand(3000, 1, 2, device=d) * 3,
        },
        grad,
    )


# --- mip construction -------------------------------------------------------------------------------------------

MIP_SIDES = [
    ("0", 0, "error"),
    ("-1", -1, "error"),
    ("65537", 65537, "error"),
    ("2^31", 2**31, "error"),
    ("2^63-1", 2**63 - 1, "error"),
    ("-2^63", -(2**63), "error"),
    ("mismatch", 3, "error"),
    ("same", 8, "ok"),
    ("odd", 9, "ok"),
]


@family("mip")
def mip_cases(device):
    def base(device):
        return {"tex": torch.rand(2, 8, 7, 3, generator=rng("m")).to(device)}

    def construct(device, **args):
        return prerast.texture_construct_mip(**args)

    yield from mutations(
        "public",
        base,
        construct,
        {"tex": "f"},
        MWORDS,
        {"max_mip_level": MAX_LEVEL, "cube_mode": [("true", True, "error")]},
    )
    yield from mutations(
        "down", lambda d: {"level": base(d)["tex"]}, lambda d, **a: OPS.texture_mip_down(**a), {"level": "f"}, MWORDS
    )
    yield from mutations(
        "adjoint",
        lambda d: {"grad_next": base(d)["tex"][:, :4, :3].contiguous(), "height": 8, "width": 7},
        lambda d, **a: OPS.texture_mip_down_adjoint(**a),
        {"grad_next": "f"},
        MWORDS,
        {"height": MIP_SIDES, "width": MIP_SIDES[:4]},
    )
    yield Case(
        "shape/no_images_65536",
        lambda d: OPS.texture_mip_down(torch.ones(0, 65536, 65536, 3, device=d)),
        "ok",
        True,
        MWORDS,
    )
    yield Case(
        "shape/no_images_65536_adjoint",
        lambda d: OPS.texture_mip_down_adjoint(torch.ones(0, 32768, 32768, 3, device=d), 65536, 65536),
        "ok",
        True,
        MWORDS,
    )
    for shape, cube, expect in [
        ((1, 1, 1, 1), False, "ok"),
        ((1, 65536, 1, 1), False, "ok"),
        ((1, 1, 65537, 1), False, "error"),
        ((3, 7, 5, 2), False, "ok"),
        ((1, 6, 1, 1, 1), True, "ok"),
        ((1, 6, 5, 5, 2), True, "ok"),
        ((1, 6, 4, 5, 2), True, "error"),
        ((1, 5, 4, 4, 2), True, "error"),
    ]:
        name = "x".join(map(str, shape)) + ("_cube" if cube else "")
        yield Case(
            f"shape/{name}",
            lambda d, s=shape, c=cube: prerast.texture_construct_mip(torch.ones(s, device=d), cube_mode=c),
            expect,
            True,
            MWORDS + ("tex",),
        )
