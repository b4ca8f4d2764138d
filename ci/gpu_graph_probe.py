"""Captures each op, forward and backward, in a CUDA graph and replays it against an eager run: an op that waits for
the GPU on the host (a synchronize, a blocking copy) cannot be captured. Prints one line per op; exit 1 if any failed."""
import sys

import torch

import prerast


def scene():
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(2, 200, 4, generator=g) * 2 - 1
    pos[..., 3] = pos[..., 3].abs() + 0.5
    tri = torch.randint(0, 200, (300, 3), generator=g, dtype=torch.int32)
    return pos.cuda(), tri.cuda()


def steps(ctx, pos, tri, tex):
    rast, db = prerast.rasterize(ctx, pos, tri, (64, 48))
    uv, uv_da = prerast.interpolate(pos[..., :2].contiguous(), rast, tri, rast_db=db, diff_attrs="all")
    color = prerast.texture(tex, uv.contiguous(), uv_da, filter_mode="linear-mipmap-linear", max_mip_level=3)
    return {"rasterize": rast, "interpolate": uv, "texture": color,
            "antialias": prerast.antialias(color, rast, pos, tri)}


def capture(name, fn):
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            eager = fn()  # warm-up off the default stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static = fn()
        graph.replay()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - report every op, not only the first failure
        print(f"{name:<28} NOT capturable: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return False
    same = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(eager, static))
    print(f"{name:<28} captured, replay {'matches eager' if same else 'DIFFERS from eager'}")
    return same


def main():
    ctx = prerast.RasterizeCudaContext()
    pos, tri = scene()
    tex = torch.rand(1, 32, 32, 3, device="cuda")
    ok = True
    for name in ("rasterize", "interpolate", "texture", "antialias"):
        ok &= capture(name + " forward", lambda n=name: [steps(ctx, pos, tri, tex)[n]])
    p = pos.clone().requires_grad_(True)
    t = tex.clone().requires_grad_(True)

    def backward():
        p.grad = t.grad = None
        out = steps(ctx, p, tri, t)["antialias"]
        g_p, g_t = torch.autograd.grad(out.sum(), (p, t))
        return [g_p, g_t]

    ok &= capture("all four, backward", backward)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
