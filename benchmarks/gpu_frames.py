"""The GPU check's programs (ci/gpu_check.py runs them with the installed wheel):

    python benchmarks/gpu_frames.py frame [op]         # one small frame of each op (or of one), forward and backward
    python benchmarks/gpu_frames.py compare out.json   # the same frame on CUDA and on the CPU: largest differences
    python benchmarks/gpu_frames.py nvdiffrast out.json   # prerast and nvdiffrast on the same scenes, same run

`frame` is what compute-sanitizer runs (memcheck, racecheck): small enough to finish under it in seconds.
"""

import json
import sys
import time

import torch

import prerast

OPS = ("rasterize", "interpolate", "texture", "antialias")


def scene(device, n=300, t=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(2, n, 4, generator=g) * 2 - 1
    pos[..., 3] = pos[..., 3].abs() + 0.2
    tri = torch.randint(0, n, (t, 3), generator=g, dtype=torch.int32)
    attr = torch.rand(2, n, 3, generator=g)
    tex = torch.rand(1, 64, 48, 3, generator=g)
    return [x.to(device) for x in (pos, tri, attr, tex)]


def frame(device, ops=OPS, size=(67, 45)):
    """{name: tensor} of one frame through `ops` (each needs those before it), with the gradients."""
    pos, tri, attr, tex = scene(device)
    pos, attr, tex = (x.requires_grad_(True) for x in (pos, attr, tex))
    ctx = prerast.RasterizeCudaContext(device) if device != "cpu" else prerast.RasterizeCpuContext()
    rast, db = prerast.rasterize(ctx, pos, tri, size)
    out, loss = {"rast": rast, "rast_db": db}, rast[..., :2].sum() + db.sum()
    if "interpolate" in ops or "texture" in ops or "antialias" in ops:
        uv, uv_da = prerast.interpolate(attr[..., :2], rast, tri, rast_db=db, diff_attrs="all")
        out.update(uv=uv, uv_da=uv_da)
        loss = loss + uv.sum()
        if "texture" in ops or "antialias" in ops:
            color = prerast.texture(tex, uv.contiguous(), uv_da, filter_mode="linear-mipmap-linear")
            out["color"] = color
            loss = loss + color.sum()
            if "antialias" in ops:
                aa = prerast.antialias(color, rast, pos, tri)
                out["antialiased"] = aa
                loss = loss + aa.sum()
    loss.backward()
    out.update(grad_pos=pos.grad, grad_attr=attr.grad, grad_tex=tex.grad)
    if device != "cpu":
        torch.cuda.synchronize()
    return {k: v.detach().cpu() for k, v in out.items() if v is not None}


def compare():
    """{output: largest |CUDA - CPU|, and relative to the output's largest value} of one frame."""
    cuda, cpu = frame("cuda"), frame("cpu")
    result = {}
    for k, v in cpu.items():
        diff = (cuda[k] - v).abs().max().item() if v.numel() else 0.0
        result[k] = {"max_abs": diff, "max_rel": diff / max(v.abs().max().item(), 1e-30) if v.numel() else 0.0}
    return result


def timed(fn, repeat=20):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat * 1e3


def times(lib, ctx, pos, tri, attr, tex, res):
    """ms per call of each op of `lib` (prerast or nvdiffrast.torch) on one scene."""
    rast, db = lib.rasterize(ctx, pos, tri, (res, res))
    uv, uv_da = lib.interpolate(attr[..., :2], rast, tri, rast_db=db, diff_attrs="all")
    uv, uv_da = uv.contiguous(), uv_da.contiguous()
    color = lib.texture(tex, uv, uv_da, filter_mode="linear-mipmap-linear")
    return {
        "rasterize_ms": timed(lambda: lib.rasterize(ctx, pos, tri, (res, res))),
        "interpolate_ms": timed(lambda: lib.interpolate(attr[..., :2], rast, tri, rast_db=db, diff_attrs="all")),
        "texture_ms": timed(lambda: lib.texture(tex, uv, uv_da, filter_mode="linear-mipmap-linear")),
        "antialias_ms": timed(lambda: lib.antialias(color, rast, pos, tri)),
    }


def side_by_side():
    """ms per call of rasterize / interpolate / texture / antialias in prerast and nvdiffrast, same inputs."""
    import nvdiffrast.torch as dr

    rows = []
    for n, res in ((10_000, 512), (100_000, 1024), (1_000_000, 2048)):
        pos, tri, attr, tex = scene("cuda", n=max(3, n // 2), t=n)
        for name, lib, ctx in (
            ("prerast", prerast, prerast.RasterizeCudaContext()),
            ("nvdiffrast", dr, dr.RasterizeCudaContext()),
        ):
            rows.append(
                {"library": name, "triangles": n, "resolution": res, **times(lib, ctx, pos, tri, attr, tex, res)}
            )
    return rows


def main(argv):
    what = argv[0] if argv else "frame"
    if what == "frame":
        frame("cuda", OPS if len(argv) < 2 else OPS[: OPS.index(argv[1]) + 1])
        print("ok")
    elif what == "compare":
        result = compare()
        json.dump(result, open(argv[1], "w"), indent=1)
        for k, v in result.items():
            print(f"{k:12} max |cuda - cpu| {v['max_abs']:.3g}  ({v['max_rel']:.3g} of the largest value)")
    elif what == "nvdiffrast":
        rows = side_by_side()
        json.dump(rows, open(argv[1], "w"), indent=1)
        for r in rows:
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    else:
        raise SystemExit(f"gpu_frames: unknown program {what!r} (frame, compare, nvdiffrast)")


if __name__ == "__main__":
    main(sys.argv[1:])
