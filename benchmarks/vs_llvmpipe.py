"""Forward rasterize on the CPU against Mesa's llvmpipe, side by side in one run.

    python benchmarks/vs_llvmpipe.py [--tris 1k 100k 1M] [--res 256 1024 4096] [--json out.json]

Both render the same random triangle soups (bench_rasterize.scene, batch 1) and write the same per-pixel values:
perspective-correct barycentrics, z/w and primitive ID + 1 into a float32 RGBA target with a depth test. llvmpipe
is driven through moderngl with a headless EGL context (`pip install moderngl`); without it, or without a usable
EGL, the llvmpipe column is skipped. llvmpipe's time is for drawing and finishing the frame, not reading it back.
prerast's is that of a context made with output_db=False, which writes the same values, and includes allocating
its output; the "+ rast_db" column is the default context's, which also computes and writes the image-space
derivatives (a second output of the same size). The floor column is allocating and writing one output alone.
"""

import argparse
import json
import os
import platform
import sys
import time

import torch

import prerast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rasterize  # noqa: E402  (its scenes)

TRIS = {"1k": 1_000, "100k": 100_000, "1M": 1_000_000}

VERTEX = """
#version 330
in vec4 pos;
out vec2 bary;
void main() {
    int k = gl_VertexID % 3;  // the soup has tri[t] = (3t, 3t+1, 3t+2)
    bary = vec2(k == 0 ? 1.0 : 0.0, k == 1 ? 1.0 : 0.0);
    gl_Position = pos;
}
"""
FRAGMENT = """
#version 330
in vec2 bary;
out vec4 rast;
void main() {
    rast = vec4(bary, gl_FragCoord.z * 2.0 - 1.0, float(gl_PrimitiveID + 1));
}
"""


def timeit(*fns, min_time=2.0, max_reps=20, warmup=2):
    """Median ms per call of each fn, in steady state. Calls alternate between the fns so that a change in the
    machine's load (other processes) affects all of them alike."""
    times = [[] for _ in fns]
    for _ in range(warmup):  # first calls pay for one-time allocations and page faults
        for fn in fns:
            fn()
    start = time.perf_counter()
    while len(times[0]) < 3 or (len(times[0]) < max_reps and time.perf_counter() - start < min_time):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1000 * sorted(ts)[len(ts) // 2] for ts in times]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Llvmpipe:
    """A headless OpenGL context on Mesa's llvmpipe, or unavailable (with the reason)."""

    def __init__(self):
        self.ctx, self.reason = None, None
        try:
            import moderngl
        except ImportError:
            self.reason = "moderngl is not installed (pip install moderngl)"
            return
        os.environ.setdefault("GALLIUM_DRIVER", "llvmpipe")
        os.environ.setdefault("LIBGL_ALWAYS_SOFTWARE", "1")
        try:
            self.ctx = moderngl.create_standalone_context(backend="egl")
        except Exception as e:  # no EGL, no Mesa: skip cleanly
            self.reason = f"no EGL context: {str(e).splitlines()[0]}"
            return
        self.renderer = self.ctx.info["GL_RENDERER"]
        if "llvmpipe" not in self.renderer:
            self.reason, self.ctx = f"EGL gave {self.renderer!r}, not llvmpipe", None
            return
        self.moderngl = moderngl
        self.prog = self.ctx.program(vertex_shader=VERTEX, fragment_shader=FRAGMENT)

    def frame(self, pos, res):
        """A callable drawing pos [V, 4] (a triangle soup) into a fresh res x res target, and the framebuffer."""
        ctx = self.ctx
        vbo = ctx.buffer(pos.detach().cpu().numpy().astype("f4").tobytes())
        vao = ctx.vertex_array(self.prog, [(vbo, "4f", "pos")])
        fbo = ctx.framebuffer(
            color_attachments=[ctx.texture((res, res), 4, dtype="f4")], depth_attachment=ctx.depth_texture((res, res))
        )

        def draw():
            fbo.use()
            ctx.enable_only(self.moderngl.DEPTH_TEST)  # no culling, no blending
            ctx.depth_func = "<"
            fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
            vao.render(self.moderngl.TRIANGLES)
            ctx.finish()

        return draw, fbo


def floor_ms(res):
    return timeit(lambda: torch.empty(1, res, res, 4).fill_(0.0))[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tris", nargs="+", default=list(TRIS), choices=list(TRIS))
    p.add_argument("--res", nargs="+", type=int, default=[256, 1024, 4096])
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    gl = Llvmpipe()
    print(
        f"cpu: {cpu_name()}, {os.cpu_count()} logical cores, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )
    print(f"llvmpipe: {gl.renderer if gl.ctx else 'skipped, ' + gl.reason}")
    same = prerast.RasterizeCpuContext(output_db=False)  # the values llvmpipe writes, and no more
    with_db = prerast.RasterizeCpuContext()
    rows = []
    print(f"{'scene':<16} {'prerast ms':>11} {'llvmpipe ms':>12} {'ratio':>7} {'floor ms':>9} {'+ rast_db ms':>13}")
    for tname in a.tris:
        for res in a.res:
            pos, tri = bench_rasterize.scene(TRIS[tname])
            fns = [
                lambda pos=pos, tri=tri, res=res: prerast.rasterize(same, pos, tri, (res, res)),
                lambda pos=pos, tri=tri, res=res: prerast.rasterize(with_db, pos, tri, (res, res)),
            ]
            if gl.ctx:
                fns.append(gl.frame(pos[0], res)[0])
            with torch.no_grad():
                ours, ours_db, theirs = (timeit(*fns) + [None])[:3]
            row = {
                "scene": f"{tname} {res}^2",
                "prerast_ms": ours,
                "llvmpipe_ms": theirs,
                "floor_ms": floor_ms(res),
                "prerast_with_rast_db_ms": ours_db,
            }
            rows.append(row)
            ratio = f"{ours / theirs:7.2f}" if theirs else f"{'-':>7}"
            print(
                f"{row['scene']:<16} {ours:11.1f} {'-' if theirs is None else f'{theirs:.1f}':>12} {ratio} "
                f"{row['floor_ms']:9.1f} {ours_db:13.1f}",
                flush=True,
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_name(), "threads": torch.get_num_threads(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
