"""Fuzz cases of the ops that shade a rasterized image: interpolate and antialias (public functions, their backward,
the raw *_fwd / *_bwd ops) and antialias_construct_topology_hash."""

import numpy
import torch

import prerast
from fuzz_cases import EMPTY_HUGE, OPS, Case, Lazy, backward, ctx_for, family, leaf, mutations, rng
from fuzz_raster import geometry

IWORDS = ("interpolate",)
AWORDS = ("antialias",)


def scene(device, n=2, res=(8, 6)):
    pos, tri = geometry(device, n)
    rast, db = OPS.rasterize_fwd(pos, tri, *res, None, None, True)
    return pos, tri, rast, db


# --- interpolate ------------------------------------------------------------------------------------------------


def interp_args(device):
    pos, tri, rast, db = scene(device)
    attr = torch.rand(2, 6, 3, generator=rng("attr")).to(device)
    return {"attr": attr, "rast": rast, "tri": tri, "rast_db": db, "diff_attrs": "all"}


def interp_raw_args(device):
    args = interp_args(device)
    args["diff"] = [0, 2]
    del args["diff_attrs"]
    return args


def interp_bwd_args(device):
    args = interp_raw_args(device)
    g = rng("interp_bwd")
    args["grad_out"] = torch.rand(2, 8, 6, 3, generator=g).to(device)
    args["grad_da"] = torch.rand(2, 8, 6, 4, generator=g).to(device)
    return args


def interp_grad(device, attr, rast, rast_db, **args):
    attr, rast, rast_db = leaf(attr), leaf(rast), leaf(rast_db)
    return backward(prerast.interpolate(attr, rast, rast_db=rast_db, **args), [attr, rast, rast_db])


DIFF = [
    ("negative", [-1], "ok"),
    ("past_end", [3], "error"),
    ("int_max", [2**31 - 1], "error"),
    ("int_min", [-(2**63)], "error"),
    ("bogus", "bogus", "error"),
    ("fraction", [0.5], "error"),
    ("bool", [True], "error"),
    ("int", 5, "error"),
    ("1000_times", [0] * 1000, "ok"),
    ("empty", [], "ok"),
    ("none", None, "ok"),
    ("tensor", torch.tensor([0, 1]), "ok"),
    ("numpy", numpy.array([2]), "ok"),
    ("2d_tensor", torch.tensor([[0]]), "error"),
    ("float_tensor", torch.tensor([0.0]), "error"),
]
RAW_DIFF = [
    ("negative", [-1], "error"),
    ("past_end", [3], "error"),
    ("int_max", [2**31 - 1], "error"),
    ("int_min", [-(2**63)], "error"),
    ("2^31", [2**31], "error"),
    ("1000_times", [1] * 1000, "ok"),
    ("empty", [], "ok"),
]


@family("interpolate")
def interpolate_cases(device):
    yield from mutations(
        "public",
        interp_args,
        lambda d, **a: prerast.interpolate(**a),
        {"attr": "f", "rast": "r", "tri": "i", "rast_db": "f"},
        IWORDS,
        {"diff_attrs": DIFF},
    )
    yield from mutations(
        "raw",
        interp_raw_args,
        lambda d, **a: OPS.interpolate_fwd(**a),
        {"attr": "f", "rast": "r", "tri": "i", "rast_db": "f"},
        IWORDS,
        {"diff": RAW_DIFF, "rast_db": [("none", None, "ok")]},
    )
    yield from interp_extreme()


@family("interpolate", "bwd")
def interpolate_bwd_cases(device):
    yield from mutations(
        "public",
        interp_args,
        interp_grad,
        {"attr": "f", "rast": "r", "rast_db": "f"},
        IWORDS,
        {"diff_attrs": DIFF[:4]},
        combos=4,
    )
    yield from mutations(
        "raw",
        interp_bwd_args,
        lambda d, **a: OPS.interpolate_bwd(**a),
        {"attr": "f", "rast": "r", "tri": "i", "rast_db": "f", "grad_out": "f", "grad_da": "f"},
        IWORDS,
        {"diff": RAW_DIFF[:5] + [("1000_times", [1] * 1000, "error")], "grad_da": [("none", None, "ok")]},
    )


def within(lo_hi_of_input):
    """The output lies within the range of the input (a convex combination of its values)."""

    def check(result):
        lo, hi = lo_hi_of_input
        out = result[0]
        if out.numel() and (float(out.min()) < lo or float(out.max()) > hi):
            return f"output in [{float(out.min())}, {float(out.max())}] outside the input's [{lo}, {hi}]"
        return None

    return check


def interp_extreme():
    def case(name, make, check=None):
        return Case(f"extreme/{name}", make, "ok", True, IWORDS, check=check)

    def scaled(scale):
        def fn(device):
            pos, tri, rast, db = scene(device)
            attr = torch.rand(2, 6, 3, generator=rng("x")).to(device) * scale
            return prerast.interpolate(attr, rast, tri, db, "all")

        return fn

    yield case("attr_1e30", scaled(1e30), within((0.0, 1e30)))
    yield case("attr_3e38", scaled(3e38), within((0.0, 3e38)))
    yield case("attr_1e-38", scaled(1e-38), within((0.0, 1e-38)))
    yield case("shared_attr", lambda d: prerast.interpolate(torch.ones(1, 6, 2, device=d), *scene(d)[2:0:-1]))
    yield case("range_attr", lambda d: prerast.interpolate(torch.ones(6, 2, device=d), *scene(d)[2:0:-1]))
    yield case("no_attributes", lambda d: prerast.interpolate(torch.ones(2, 6, 0, device=d), *scene(d)[2:0:-1]))
    yield case("1x1", lambda d: prerast.interpolate(torch.ones(2, 6, 2, device=d), *scene(d, 2, (1, 1))[2:0:-1]))
    yield case(
        "3000_images", lambda d: prerast.interpolate(torch.ones(1, 6, 2, device=d), *scene(d, 3000, (1, 2))[2:0:-1])
    )
    yield Case(
        "extreme/empty_huge",
        lambda d: OPS.interpolate_fwd(
            torch.ones(6, 3, device=d),
            torch.zeros(*EMPTY_HUGE, 4, device=d),
            geometry(d)[1],
            torch.zeros(*EMPTY_HUGE, 4, device=d),
            [0, 1],
        ),
        "any",
        True,
        IWORDS,
    )
    yield Case(
        "extreme/empty_huge_bwd",
        lambda d: OPS.interpolate_bwd(
            torch.ones(6, 3, device=d),
            torch.zeros(*EMPTY_HUGE, 4, device=d),
            geometry(d)[1],
            torch.zeros(*EMPTY_HUGE, 4, device=d),
            [0, 1],
            torch.zeros(*EMPTY_HUGE, 3, device=d),
            torch.zeros(*EMPTY_HUGE, 4, device=d),
        ),
        "any",
        True,
        IWORDS,
    )
    yield Case(
        "extreme/4TiB_request",
        lambda d: prerast.interpolate(
            torch.zeros(0, 2**40, device=d),
            torch.zeros(1, 1, 1, 4, device=d),
            torch.zeros(0, 3, dtype=torch.int32, device=d),
        ),
        "error",
        True,
        IWORDS,
    )
    yield case(
        "background_only",
        lambda d: prerast.interpolate(torch.ones(2, 6, 2, device=d), torch.zeros(2, 4, 4, 4, device=d), geometry(d)[1]),
        lambda r: None if not r[0].any() else "background pixels are not zero",
    )
    yield case(
        "no_triangles",
        lambda d: prerast.interpolate(
            torch.ones(2, 6, 2, device=d),
            torch.zeros(2, 4, 4, 4, device=d),
            torch.zeros(0, 3, dtype=torch.int32, device=d),
        ),
    )


# --- antialias --------------------------------------------------------------------------------------------------


def aa_args(device):
    pos, tri, rast, db = scene(device)
    color = torch.rand(2, 8, 6, 3, generator=rng("color")).to(device)
    return {
        "color": color,
        "rast": rast,
        "pos": pos,
        "tri": tri,
        "topology_hash": prerast.antialias_construct_topology_hash(tri),
    }


def aa_raw_args(device):
    args = aa_args(device)
    h = args.pop("topology_hash")
    args.update(half_edges=h.half_edges, group_of=h.group_of, group_start=h.group_start, pos_gradient_boost=1.0)
    return args


def aa_bwd_args(device):
    args = aa_raw_args(device)
    args["crossing"] = OPS.antialias_fwd(**args)[1]
    args["grad_out"] = torch.rand(args["color"].shape, generator=rng("grad_out")).to(device)
    args["with_pos"] = True
    return args


def aa_grad(device, color, pos, **args):
    color, pos = leaf(color), leaf(pos)
    return backward(prerast.antialias(color, pos=pos, **args), [color, pos])


TABLES = {
    "half_edges": [
        ("reversed", Lazy(lambda a: a["half_edges"].flip(0)), "any"),
        ("zeros", Lazy(lambda a: torch.zeros_like(a["half_edges"])), "any"),
    ],
    "group_of": [
        ("reversed", Lazy(lambda a: a["group_of"].flip(0)), "any"),
        ("last_group", Lazy(lambda a: torch.full_like(a["group_of"], len(a["group_start"]) - 2)), "any"),
    ],
    "group_start": [
        ("decreasing", Lazy(lambda a: a["group_start"].flip(0)), "any"),
        ("zeros", Lazy(lambda a: torch.zeros_like(a["group_start"])), "any"),
        ("one_entry", Lazy(lambda a: a["group_start"][:1].clone()), "any"),
        ("too_long", Lazy(lambda a: torch.cat([a["group_start"], a["group_start"][-1:]])), "any"),
    ],
}


BOOST = [
    ("nan", float("nan"), "error"),
    ("inf", float("inf"), "error"),
    ("negative", -2.0, "ok"),
    ("1e30", 1e30, "ok"),
    ("zero", 0.0, "ok"),
    ("string", "1", "error"),
    ("none", None, "error"),
    ("tensor", torch.tensor(2.0), "ok"),
    ("bool", True, "error"),
]
HASHES = [
    ("none", None, "ok"),
    ("string", "hash", "error"),
    ("other_count", Lazy(lambda a: prerast.antialias_construct_topology_hash(a["tri"][:2])), "error"),
    ("other_mesh", Lazy(lambda a: prerast.antialias_construct_topology_hash(a["tri"].flip(0).roll(1, 1))), "ok"),
    ("corrupt", Lazy(lambda a: corrupt_hash(a["topology_hash"])), "error"),
]


def corrupt_hash(h):
    return prerast.TopologyHash(h.num_triangles, h.half_edges + 100, h.group_of, h.group_start)


@family("antialias")
def antialias_cases(device):
    yield from mutations(
        "public",
        aa_args,
        lambda d, **a: prerast.antialias(**a),
        {"color": "f", "rast": "r", "pos": "f", "tri": "i"},
        AWORDS,
        {"topology_hash": HASHES, "pos_gradient_boost": BOOST},
    )
    yield from mutations(
        "raw",
        aa_raw_args,
        lambda d, **a: OPS.antialias_fwd(**a),
        {"color": "f", "rast": "r", "pos": "f", "tri": "i", "half_edges": "i", "group_of": "i", "group_start": "i"},
        AWORDS + ("topology_hash",),
        TABLES,
    )
    yield from aa_extreme()


@family("antialias", "bwd")
def antialias_bwd_cases(device):
    yield from mutations(
        "public",
        aa_args,
        aa_grad,
        {"color": "f", "rast": "r", "pos": "f"},
        AWORDS,
        {"pos_gradient_boost": BOOST[2:5]},
        combos=4,
    )
    yield from mutations(
        "raw",
        aa_bwd_args,
        lambda d, **a: OPS.antialias_bwd(**a),
        {
            "color": "f",
            "rast": "r",
            "pos": "f",
            "tri": "i",
            "half_edges": "i",
            "group_start": "i",
            "crossing": "f",
            "grad_out": "f",
        },
        AWORDS + ("topology_hash",),
        {
            "crossing": [
                (
                    "random",
                    Lazy(lambda a: torch.randn(a["crossing"].shape, generator=rng("c")).to(a["crossing"].device) * 1e6),
                    "any",
                )
            ],
            "with_pos": [("false", False, "ok")],
            "pos_gradient_boost": [("nan", float("nan"), "any")],
        },
        unbounded=("pos_gradient_boost=nan",),
    )


def scaled_like_plain(scale):
    """Scaling pos (all four coordinates) changes neither the antialiased image nor, but for the scale, the
    gradient of pos: [(out, scale * grad) of the scaled scene, (out, grad) of the plain one]."""

    def fn(device):
        pos, tri, _, _ = scene(device)
        color = torch.rand(2, 8, 6, 3, generator=rng("x")).to(device)
        results = []
        for s in (scale, 1.0):
            p = leaf(pos * s)
            rast = prerast.rasterize(ctx_for(device), p.detach(), tri, (8, 6))[0]
            grad, out = backward(prerast.antialias(color, rast, p, tri), [p])
            results.append((out, grad * s))
        return results

    return fn


def same_as_plain(result):
    (out, grad), (want, want_grad) = result
    if not torch.allclose(out, want, atol=1e-4):
        return "the scaled scene's image differs from the plain one's"
    if not torch.allclose(grad, want_grad, rtol=1e-3, atol=1e-3 * float(want_grad.abs().max())):
        return "the scaled scene's gradient (times the scale) differs from the plain one's"
    return None


def aa_extreme():
    def case(name, make, check=None):
        return Case(f"extreme/{name}", make, "ok", True, AWORDS, check=check)

    def render(n=2, res=(8, 6), color_scale=1.0, pos_scale=1.0, range_mode=False):
        def fn(device):
            pos, tri, rast, _ = scene(device, n, res)
            color = torch.rand(n, *res, 3, generator=rng("x")).to(device) * color_scale
            if range_mode:
                pos, rast = pos[0], rast[:1].expand(2, *rast.shape[1:]).contiguous()
                color = color[:1].expand(2, *color.shape[1:]).contiguous()
            return prerast.antialias(color, rast, pos * pos_scale, tri)

        return fn

    yield case("color_3e38", render(color_scale=3e38), within((0.0, 3e38)))
    yield case("color_1e-38", render(color_scale=1e-38), within((0.0, 1e-38)))
    for s in (1e30, 1e-30, 2.0**100, 2.0**-100):
        yield case(f"pos_scaled_{s:g}", scaled_like_plain(s), same_as_plain)
    yield case("1x1", render(res=(1, 1)))
    yield case("1x4096", render(res=(1, 4096)))
    yield case("3000_images", render(n=3000, res=(1, 2)))
    yield case("range_mode", render(range_mode=True))
    yield case(
        "no_triangles",
        lambda d: prerast.antialias(
            torch.ones(1, 4, 4, 3, device=d),
            torch.zeros(1, 4, 4, 4, device=d),
            torch.ones(1, 0, 4, device=d),
            torch.zeros(0, 3, dtype=torch.int32, device=d),
        ),
    )

    def empty_huge(bwd):
        def fn(device):
            args = aa_raw_args(device)
            args.update(
                color=torch.zeros(*EMPTY_HUGE, 3, device=device),
                rast=torch.zeros(*EMPTY_HUGE, 4, device=device),
                pos=args["pos"][0],
            )
            if not bwd:
                return OPS.antialias_fwd(**args)
            return OPS.antialias_bwd(
                **args, crossing=torch.zeros(*EMPTY_HUGE, 2, device=device), grad_out=args["color"], with_pos=True
            )

        return fn

    yield Case("extreme/empty_huge", empty_huge(False), "any", True, AWORDS)
    yield Case("extreme/empty_huge_bwd", empty_huge(True), "any", True, AWORDS)

    def w_mixed(device):  # vertices on both sides of the camera plane, one on it
        pos = torch.tensor(
            [[[-1, -1, 0, 1], [1, -1, 0, -1], [1, 1, 0, 0], [-1, 1, 0, 2]]] * 2, dtype=torch.float32, device=device
        )
        tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32, device=device)
        rast = prerast.rasterize(ctx_for(device), pos, tri, (8, 8))[0]
        return prerast.antialias(torch.rand(2, 8, 8, 1, device=device), rast, pos, tri)

    yield case("w_mixed", w_mixed)


# --- topology hash ----------------------------------------------------------------------------------------------


@family("antialias", "topology_hash")
def topology_cases(device):
    def base(device):
        return {"tri": geometry(device)[1]}

    def build(device, tri):
        h = prerast.antialias_construct_topology_hash(tri)
        return [h.half_edges, h.group_of, h.group_start]

    yield from mutations(
        "public",
        base,
        build,
        {"tri": "n"},
        ("antialias_construct_topology_hash", "tri"),
        {
            "tri": [
                (label, Lazy(lambda a, rows=rows: ints(rows, a["tri"].device)), expect) for label, rows, expect in TRIS
            ]
            + [
                (
                    "100000",
                    Lazy(
                        lambda a: torch.randint(0, 50, (100_000, 3), generator=rng("t"), dtype=torch.int32).to(
                            a["tri"].device
                        )
                    ),
                    "ok",
                )
            ]
        },
    )


def ints(rows, device):
    return torch.tensor(rows, dtype=torch.int32, device=device)


TRIS = [
    ("-1", [[0, -1, 2]], "any"),
    ("int_max", [[0, 2**31 - 1, 2]], "ok"),
    ("int_min", [[-(2**31), 1, 2]], "any"),
    ("same_vertex", [[1, 1, 1]], "ok"),
]
