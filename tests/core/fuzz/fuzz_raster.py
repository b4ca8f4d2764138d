"""Fuzz cases of rasterize: the public rasterize (instanced and range mode), DepthPeeler, their backward, and the raw
rasterize_fwd / rasterize_bwd ops."""

import numpy
import torch

import prerast
from fuzz_cases import EMPTY_HUGE, OPS, Case, backward, ctx_for, family, leaf, mutations, rng

WORDS = ("rasterize", "DepthPeeler")
POS0 = [
    [-0.8, -0.8, 0.1, 1],
    [0.8, -0.7, 0.2, 1],
    [0.1, 0.9, 0.3, 1],
    [-0.9, 0.6, -0.2, 1],
    [0.9, 0.8, 0.5, 1],
    [0.0, 0.0, 0.9, 1],
]
TRI0 = [[0, 1, 2], [0, 2, 3], [1, 4, 2], [3, 2, 4], [0, 1, 5]]


def geometry(device, n=2):
    """pos [n, 6, 4] (each image a little narrower) and tri [5, 3]: triangles that share edges and overlap."""
    p = torch.tensor(POS0)
    pos = torch.stack([p * torch.tensor([1 - 0.1 * k, 1, 1, 1]) for k in range(n)])
    return pos.to(device), torch.tensor(TRI0, dtype=torch.int32, device=device)


def ranges_of(*pairs):
    return torch.tensor(pairs, dtype=torch.int32)


SIDES = [
    ("0", 0, "error"),
    ("-1", -1, "error"),
    ("1", 1, "ok"),
    ("32769", 32769, "error"),
    ("2^31", 2**31, "error"),
    ("2^40", 2**40, "error"),
    ("2^63-1", 2**63 - 1, "error"),
    ("-2^63", -(2**63), "error"),
]
RESOLUTIONS = [(f"({label},8)", (v, 8), e) for label, v, e in SIDES] + [
    ("(8,-1)", (8, -1), "error"),
    ("(1,32768)", (1, 32768), "ok"),
    ("(32768,1)", (32768, 1), "ok"),
    ("float", (8.0, 8), "error"),
    ("fraction", (8.5, 8), "error"),
    ("string", "8x8", "error"),
    ("none", None, "error"),
    ("one", (8,), "error"),
    ("three", (8, 8, 8), "error"),
    ("bool", (True, 8), "error"),
    ("tensor", torch.tensor([8, 6]), "ok"),
    ("numpy", numpy.array([8, 6]), "ok"),
    ("numpy_int", (numpy.int64(8), 6), "ok"),
    ("float_tensor", torch.tensor([8.0, 6.0]), "error"),
    ("2d_tensor", torch.tensor([[8, 6]]), "error"),
]
CONTEXTS = [("none", None, "error"), ("string", "cpu", "error"), ("object", object(), "error")]
GRAD_DB = [("false", False, "ok"), ("none", None, "any"), ("string", "yes", "any")]
RANGES = [
    ("first_-1", ranges_of([-1, 2], [0, 5]), "error"),
    ("count_-1", ranges_of([0, -1], [0, 5]), "error"),
    ("past_end", ranges_of([4, 2], [0, 5]), "error"),
    ("sum_overflows", ranges_of([2**31 - 1, 2**31 - 1]), "error"),
    ("int_min", ranges_of([-(2**31), 2**31 - 1]), "error"),
    ("count_0", ranges_of([0, 0], [5, 0]), "ok"),
    ("300_images", ranges_of(*[[k % 5, 1] for k in range(300)]), "ok"),
    ("no_images", ranges_of([0, 0])[:0], "any"),
    ("three_columns", ranges_of([0, 2, 0]), "error"),
    ("int64", ranges_of([0, 2]).long(), "error"),
    ("flat", ranges_of([0, 2]).reshape(-1), "error"),
    ("noncontiguous", ranges_of([0, 2], [1, 2]).t().contiguous().t(), "any"),
]


def instanced(device):
    pos, tri = geometry(device)
    return {"pos": pos, "tri": tri, "resolution": (8, 6)}


def range_mode(device):
    pos, tri = geometry(device, 1)
    return {"pos": pos[0], "tri": tri, "resolution": (8, 6), "ranges": ranges_of([0, 3], [2, 3])}


def public(device, glctx="ctx", **args):
    return prerast.rasterize(ctx_for(device) if glctx == "ctx" else glctx, **args)


def peel(device, **args):
    """Four layers (more than the mesh has) of a DepthPeeler."""
    with prerast.DepthPeeler(ctx_for(device), **args) as p:
        return [p.rasterize_next_layer() for _ in range(4)]


def public_grad(device, pos, **args):
    pos = leaf(pos)
    rast, db = prerast.rasterize(ctx_for(device), pos, **args)
    return backward((rast[..., :2], db), [pos])


def raw(device):
    pos, tri = geometry(device)
    return {"pos": pos, "tri": tri, "height": 8, "width": 6, "ranges": None, "peel_prev": None, "grad_db": True}


def raw_peel(device):
    args = raw(device)
    args["peel_prev"] = OPS.rasterize_fwd(*list(args.values())[:6], True)[0]
    return args


def raw_fwd(device, **args):
    return OPS.rasterize_fwd(**args)


def raw_bwd_args(device):
    pos, tri = geometry(device)
    rast, db = OPS.rasterize_fwd(pos, tri, 8, 6, None, None, True)
    g = rng("raw_bwd")
    return {
        "pos": pos,
        "tri": tri,
        "rast": rast,
        "grad_rast": torch.rand(rast.shape, generator=g).to(device),
        "grad_db": torch.rand(rast.shape, generator=g).to(device),
    }


def raw_bwd(device, **args):
    return OPS.rasterize_bwd(**args)


@family("rasterize")
def rasterize_cases(device):
    yield from mutations(
        "public",
        instanced,
        public,
        {"pos": "f", "tri": "i"},
        WORDS,
        {"resolution": RESOLUTIONS, "glctx": CONTEXTS, "grad_db": GRAD_DB},
    )
    yield from mutations("range", range_mode, public, {"pos": "f", "tri": "i"}, WORDS, {"ranges": RANGES})
    yield from mutations(
        "peeler", instanced, peel, {"pos": "f", "tri": "i"}, WORDS, {"resolution": RESOLUTIONS[:6]}, combos=4
    )
    yield from mutations(
        "raw",
        raw,
        raw_fwd,
        {"pos": "f", "tri": "i"},
        WORDS,
        {
            "height": SIDES,
            "width": SIDES[:3],
            "ranges": [("given", ranges_of([0, 2]), "error")],
            "grad_db": [("false", False, "ok")],
        },
    )
    yield from mutations(
        "raw_peel", raw_peel, raw_fwd, {"peel_prev": "r"}, WORDS, {"height": [("1", 1, "error")]}, combos=4
    )
    yield from extreme_cases()


@family("rasterize", "bwd")
def rasterize_bwd_cases(device):
    yield from mutations("public", instanced, public_grad, {"pos": "f", "tri": "i"}, WORDS, combos=4)
    yield from mutations("range", range_mode, public_grad, {"pos": "f"}, WORDS, {"ranges": RANGES[:6]}, combos=0)
    yield from mutations(
        "raw",
        raw_bwd_args,
        raw_bwd,
        {"pos": "f", "tri": "i", "rast": "r", "grad_rast": "f", "grad_db": "f"},
        WORDS,
        {"grad_db": [("none", None, "ok")]},
    )
    yield from extreme_cases(grad=True)


# --- extreme but valid input ----------------------------------------------------------------------------------


def render(device, pos, tri, res=(8, 6), ranges=None, grad=False):
    if grad:
        pos = leaf(pos)
        rast, db = prerast.rasterize(ctx_for(device), pos, tri, res, ranges=ranges)
        backward((rast[..., :2], db), [pos])
        return rast.detach(), db.detach(), pos.grad
    return prerast.rasterize(ctx_for(device), pos, tri, res, ranges=ranges)


def same_as_plain(scale):
    """Scaling all four clip coordinates leaves the image unchanged."""

    def fn(device, grad):
        pos, tri = geometry(device)
        got, want = render(device, pos * scale, tri, grad=grad), render(device, pos, tri)
        return got, want

    return fn


def check_same(result):
    got, want = result
    if not torch.equal(got[0][..., 3], want[0][..., 3]):
        return "triangle IDs differ from the unscaled scene"
    if not torch.allclose(got[0][..., :3], want[0][..., :3], atol=1e-4):
        return "u, v or depth differ from the unscaled scene"
    return None


def check_empty(result):
    return None if not result[0].any() else "something was drawn"


def quad(device, xyzw):
    """Two triangles over four given clip-space vertices, two images."""
    pos = torch.tensor(xyzw, dtype=torch.float32, device=device).expand(2, 4, 4).contiguous()
    return pos, torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32, device=device)


def extreme(name, make, grad, check=None, res=(8, 6), ranges=None):
    def fn(device):
        pos, tri = make(device)
        return render(device, pos, tri, res, ranges, grad)

    return Case(f"extreme/{name}", fn, "ok", True, WORDS, check=check)


def extreme_cases(grad=False):
    for s in ("1e30", "1e-30", "1e20", "1e-20", "2^100", "2^-100"):
        scale = float(s) if "^" not in s else 2.0 ** int(s[2:])
        scaled = same_as_plain(scale)
        yield Case(f"extreme/scaled_{s}", lambda d, f=scaled: f(d, grad), "ok", True, WORDS, check=check_same)
    yield extreme(
        "w_negative",
        lambda d: quad(d, [[-1, -1, 0, -1], [1, -1, 0, -1], [1, 1, 0, -1], [-1, 1, 0, -1]]),
        grad,
        check_empty,
    )
    yield extreme("w_zero", lambda d: quad(d, [[-1, -1, 0, 0], [1, -1, 0, 0], [1, 1, 0, 0], [-1, 1, 0, 0]]), grad)
    yield extreme("w_mixed", lambda d: quad(d, [[-1, -1, 0, 1], [1, -1, 0, -1], [1, 1, 0, 0], [-1, 1, 0, 2]]), grad)
    yield extreme(
        "w_tiny", lambda d: quad(d, [[-1, -1, 0, 1e-30], [1, -1, 0, 1], [1, 1, 0, 1e-38], [-1, 1, 0, 1]]), grad
    )
    denormal = extreme(
        "w_denormal",
        lambda d: quad(d, [[-1e-40, -1e-40, 0, 1e-40], [1, -1, 0, 1], [1, 1, 0, 1], [-1, 1, 0, 1e-45]]),
        grad,
    )
    denormal.finite = not grad  # gradients grow like 1 / w^2
    yield denormal
    yield extreme(
        "x_huge",
        lambda d: quad(d, [[-1e30, -1e30, 0, 1], [1e30, -1e30, 0, 1], [1e30, 1e30, 0, 1], [-1e30, 1e30, 0, 1]]),
        grad,
    )
    yield extreme(
        "x_largest",
        lambda d: quad(d, [[-3e38, -3e38, 0, 1], [3e38, -3e38, 0, 1], [3e38, 3e38, 0, 1], [-3e38, 3e38, 0, 1]]),
        grad,
    )
    yield extreme("z_outside", lambda d: quad(d, [[-1, -1, -5, 1], [1, -1, 5, 1], [1, 1, 2, 1], [-1, 1, -2, 1]]), grad)
    yield extreme(
        "z_huge", lambda d: quad(d, [[-1, -1, -1e30, 1], [1, -1, 1e30, 1], [1, 1, 0, 1], [-1, 1, 3e38, 1]]), grad
    )
    yield extreme("collinear", lambda d: quad(d, [[-1, -1, 0, 1], [0, 0, 0, 1], [1, 1, 0, 1], [0.5, 0.5, 0, 1]]), grad)
    yield extreme("one_point", lambda d: quad(d, [[0.1, 0.1, 0, 1]] * 4), grad)
    yield extreme(
        "sliver", lambda d: quad(d, [[-1, -1, 0, 1], [1, 1, 0, 1], [1, 1 + 1e-7, 0, 1], [-1, -1 + 1e-7, 0, 1]]), grad
    )
    yield extreme(
        "on_pixel_centres",
        lambda d: quad(d, [[-0.75, -0.75, 0, 1], [0.25, -0.75, 0, 1], [0.25, 0.25, 0, 1], [-0.75, 0.25, 0, 1]]),
        grad,
        res=(8, 8),
    )
    yield extreme("1x1", lambda d: geometry(d), grad, res=(1, 1))
    yield extreme("1x4096", lambda d: geometry(d), grad, res=(1, 4096))
    yield extreme("3000_images", lambda d: geometry(d, 3000), grad, res=(1, 1))
    yield extreme(
        "600_ranges",
        lambda d: (geometry(d, 1)[0][0], geometry(d)[1]),
        grad,
        ranges=ranges_of(*[[k % 3, k % 3] for k in range(600)]),
    )
    yield extreme(
        "no_triangles", lambda d: (geometry(d)[0], torch.zeros(0, 3, dtype=torch.int32, device=d)), grad, check_empty
    )
    yield extreme(
        "no_vertices",
        lambda d: (torch.zeros(2, 0, 4, device=d), torch.zeros(0, 3, dtype=torch.int32, device=d)),
        grad,
        check_empty,
    )
    yield extreme("many_small", lambda d: many_small(d, 3000), grad, res=(64, 64))
    yield extreme(
        "same_triangle_4096",
        lambda d: (geometry(d)[0], torch.tensor([[0, 1, 2]] * 4096, dtype=torch.int32, device=d)),
        grad,
    )
    if grad:
        yield Case(
            "extreme/empty_huge_raw",
            lambda d: OPS.rasterize_bwd(
                geometry(d)[0][0],
                geometry(d)[1],
                torch.zeros(*EMPTY_HUGE, 4, device=d),
                torch.zeros(*EMPTY_HUGE, 4, device=d),
                torch.zeros(*EMPTY_HUGE, 4, device=d),
            ),
            "any",
            True,
            WORDS,
        )
    else:
        yield Case(
            "extreme/no_images_32768",
            lambda d: OPS.rasterize_fwd(geometry(d)[0][:0], geometry(d)[1], 32768, 32768, None, None, True),
            "ok",
            True,
            WORDS,
        )
    # Requests that fit no machine (2 TiB of output): refused before anything is allocated.
    yield Case(
        "extreme/2TiB_request",
        lambda d: OPS.rasterize_fwd(geometry(d, 64)[0], geometry(d)[1], 32768, 32768, None, None, True),
        "error",
        True,
        WORDS,
    )
    yield Case(
        "extreme/2TiB_request_public", lambda d: render(d, *geometry(d, 64), (32768, 32768)), "error", True, WORDS
    )
    if not grad:  # a batch rasterized in several chunks (2^21 image-triangle pairs each)
        one = [[0, 1, 2]]
        yield extreme(
            "chunked_batch",
            lambda d: (geometry(d, 3)[0], torch.tensor(one * 800_000, dtype=torch.int32, device=d)),
            grad,
            res=(2, 2),
        )


def many_small(device, n):
    g = rng("many_small")
    centre = torch.rand(2, n, 1, 2, generator=g) * 2.2 - 1.1
    xy = (centre + torch.rand(2, n, 3, 2, generator=g) * 0.05).reshape(2, 3 * n, 2)
    pos = torch.cat([xy, torch.rand(2, 3 * n, 1, generator=g), torch.ones(2, 3 * n, 1)], -1)
    return pos.to(device), torch.arange(3 * n, dtype=torch.int32, device=device).reshape(n, 3)
