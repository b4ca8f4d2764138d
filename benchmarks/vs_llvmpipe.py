"""Forward rasterize on the CPU against Mesa's llvmpipe, interleaved over rounds of fresh processes.

    python benchmarks/vs_llvmpipe.py [--tris 1k 100k 1M] [--res 256 1024 4096] [--rounds 3] [--json out.json]

Both render the same random triangle soups (bench_rasterize.scene, batch 1) and write the same per-pixel values:
perspective-correct barycentrics, z/w and primitive ID + 1 into a float32 RGBA target with a depth test. llvmpipe
is driven through moderngl with a headless EGL context (`pip install moderngl`); without it, or without a usable
EGL, the llvmpipe column is skipped. llvmpipe's time is for drawing and finishing the frame, not reading it back.
prerast's is that of a context made with output_db=False, which writes the same values, and includes allocating
its output; "+ db" is the default context's, which also computes and writes rast_db (a second output as large).

A shared machine's load changes from second to second, so one timing says little. Every round runs each scene
once per renderer, each in a fresh process (its own page faults, caches and thread pool), alternating which goes
first; a run's time is its fastest of --reps calls. The table gives each renderer's fastest run over the rounds
and the spread (slowest run over fastest). The floor is what the memory system allows for the bytes the op must
move: in the prerast process, with the same threads, a fresh output-sized tensor filled (torch.empty + fill_,
for each output) plus one read of the inputs (sum); "x floor" is prerast's time over it. prerast's CPU outputs
reuse the memory of released ones (its output cache), so a run of calls writes into memory whose pages are already
there, as llvmpipe's kept framebuffer is: "x warm" is prerast's time over the same fill into a tensor kept from call
to call (the floor without the page faults and the kernel's zeroing). The last columns are
CPU time (the process's, all threads; a thread pool spinning while it waits counts too) for the same calls, which
a loaded machine inflates far less than wall time.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUFFIX = {"k": 1_000, "M": 1_000_000}
MEASURES = ("prerast", "prerast_db", "floor", "floor_db", "floor_warm", "llvmpipe")

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


def triangle_count(text):
    """'1k' -> 1000, '1M' -> 1000000, '12' -> 12."""
    try:
        return int(text[:-1]) * SUFFIX[text[-1]] if text[-1] in SUFFIX else int(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a triangle count such as 1k, 100k, 1M or 12") from None


def fastest_ms(fns, reps, warmup=1, min_time=0.5, max_reps=200):
    """The fastest call of each fn over at least reps calls and (up to max_reps) min_time seconds, in ms of wall
    time and, separately, of this process's CPU time (all its threads): a call of a few microseconds meets a busy
    machine's scheduling hiccups more often than not, and CPU time leaves out the time spent waiting for a core.
    Calls alternate between the fns so that a change in the machine's load affects all of them alike. The first
    calls pay for one-time allocations: not timed."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    wall, cpu = [float("inf")] * len(fns), [float("inf")] * len(fns)
    start, done = time.perf_counter(), 0
    while done < reps or (done < max_reps and time.perf_counter() - start < min_time):
        done += 1
        for i, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[i] = min(wall[i], 1000 * (time.perf_counter() - t0))
            cpu[i] = min(cpu[i], 1000 * (time.process_time() - c0))
    return wall, cpu


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
        self.ctx, self.reason, self.renderer = None, None, None
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
        """A callable drawing pos [V, 4] (a triangle soup) into a res x res target."""
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

        return draw


def scene_bytes(num_tris, res):
    """Bytes rasterize must read (pos [1, 3T, 4] float32, tri [T, 3] int32) and write (rast, and rast_db)."""
    return {"read": num_tris * (3 * 16 + 12), "write": res * res * 16, "write_db": 2 * res * res * 16}


def worker(renderer, num_tris, res, reps):
    """One run in this (fresh) process: a JSON line of fastest times in ms."""
    import torch

    import prerast

    sys.path.insert(0, HERE)
    import bench_rasterize

    pos, tri = bench_rasterize.scene(num_tris)
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    if renderer == "llvmpipe":
        gl = Llvmpipe()
        out["renderer"] = gl.renderer or gl.reason
        if gl.ctx:
            (out["llvmpipe"],), (out["llvmpipe_cpu"],) = fastest_ms([gl.frame(pos[0], res)], reps)
        print(json.dumps(out))
        return
    same = prerast.RasterizeCpuContext(output_db=False)  # the values llvmpipe writes, and no more
    with_db = prerast.RasterizeCpuContext()

    def floor(outputs):
        for _ in range(outputs):
            torch.empty(1, res, res, 4).fill_(0.0)
        pos.sum(), tri.sum()

    kept = torch.empty(1, res, res, 4)

    def floor_warm():
        kept.fill_(0.0)
        pos.sum(), tri.sum()

    with torch.no_grad():
        times, cpu = fastest_ms(
            [
                lambda: prerast.rasterize(same, pos, tri, (res, res)),
                lambda: prerast.rasterize(with_db, pos, tri, (res, res)),
                lambda: floor(1),
                lambda: floor(2),
                floor_warm,
            ],
            reps,
        )
    out.update(zip(("prerast", "prerast_db", "floor", "floor_db", "floor_warm"), times))
    out.update(zip(("prerast_cpu", "prerast_db_cpu", "floor_cpu", "floor_db_cpu", "floor_warm_cpu"), cpu))
    print(json.dumps(out))


def run_worker(renderer, tris, res, reps):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", renderer, "--tris", tris, "--res", str(res)]
    done = subprocess.run(cmd + ["--reps", str(reps)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{renderer} run for {tris} triangles at {res}^2 failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(tris, res, runs):
    """One table row from a scene's runs: fastest time and spread of each measure, bytes, rates and ratios."""
    row = {"scene": f"{tris} {res}^2", "triangles": triangle_count(tris), "res": res, "rounds": len(runs)}
    row["bytes"] = scene_bytes(row["triangles"], res)
    for m in MEASURES:
        ts = [r[m] for r in runs if m in r]
        row[m + "_ms"] = min(ts) if ts else None
        row[m + "_spread"] = max(ts) / min(ts) if ts else None
        cpu = [r[m + "_cpu"] for r in runs if m + "_cpu" in r]
        row[m + "_cpu_ms"] = min(cpu) if cpu else None
    b = row["bytes"]
    row["floor_gbps"] = (b["read"] + b["write"]) / row["floor_ms"] / 1e6
    row["floor_db_gbps"] = (b["read"] + b["write_db"]) / row["floor_db_ms"] / 1e6
    row["over_floor"] = row["prerast_ms"] / row["floor_ms"]
    row["over_warm_floor"] = row["prerast_ms"] / row["floor_warm_ms"]
    row["db_over_floor"] = row["prerast_db_ms"] / row["floor_db_ms"]
    row["vs_llvmpipe"] = row["prerast_ms"] / row["llvmpipe_ms"] if row["llvmpipe_ms"] else None
    row["cpu_vs_llvmpipe"] = row["prerast_cpu_ms"] / row["llvmpipe_cpu_ms"] if row["llvmpipe_cpu_ms"] else None
    return row


HEADER = (
    f"{'scene':<12} {'prerast ms':>10} {'spread':>6} {'llvmpipe ms':>11} {'spread':>6} {'ratio':>6} "
    f"{'MB moved':>8} {'floor ms':>8} {'GB/s':>5} {'x floor':>7} {'x warm':>6} {'+ db ms':>8} {'db x floor':>10} "
    f"{'cpu ms':>7} {'llvmpipe cpu':>12} {'ratio':>6}"
)


def format_row(r):
    def ms(v):
        return "-" if v is None else f"{v:.1f}" if v >= 1 else f"{v:.2f}"

    def x(v):
        return "-" if v is None else f"{v:.2f}"

    mb = (r["bytes"]["read"] + r["bytes"]["write"]) / 1e6
    return (
        f"{r['scene']:<12} {ms(r['prerast_ms']):>10} {x(r['prerast_spread']):>6} {ms(r['llvmpipe_ms']):>11} "
        f"{x(r['llvmpipe_spread']):>6} {x(r['vs_llvmpipe']):>6} {mb:8.1f} {ms(r['floor_ms']):>8} "
        f"{r['floor_gbps']:5.1f} {x(r['over_floor']):>7} {x(r['over_warm_floor']):>6} {ms(r['prerast_db_ms']):>8} {x(r['db_over_floor']):>10} "
        f"{ms(r['prerast_cpu_ms']):>7} {ms(r['llvmpipe_cpu_ms']):>12} {x(r['cpu_vs_llvmpipe']):>6}"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tris", nargs="+", default=["1k", "100k", "1M"], type=str, help="triangle counts: 1k, 100k, 12")
    p.add_argument("--res", nargs="+", type=int, default=[256, 1024, 4096])
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per renderer and scene (default 3)")
    p.add_argument("--reps", type=int, default=5, help="timed calls per process at least; a run is their fastest")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--worker", choices=["prerast", "llvmpipe"], help=argparse.SUPPRESS)
    a = p.parse_args()
    for t in a.tris:
        try:
            count = triangle_count(t)
        except argparse.ArgumentTypeError as e:
            p.error(f"--tris: {e}")
        if count < 1:
            p.error(f"--tris {t}: at least one triangle")
    if min(a.res) < 1 or a.rounds < 1 or a.reps < 1:
        p.error("--res, --rounds and --reps must be positive")
    if a.worker:
        worker(a.worker, triangle_count(a.tris[0]), a.res[0], a.reps)
        return
    scenes = [(t, r) for t in a.tris for r in a.res]
    runs = {s: [] for s in scenes}
    info = {}
    for rnd in range(a.rounds):
        for s in scenes:
            order = ["prerast", "llvmpipe"] if (rnd + scenes.index(s)) % 2 == 0 else ["llvmpipe", "prerast"]
            run = {}
            for renderer in order:
                got = run_worker(renderer, s[0], s[1], a.reps)
                info[renderer] = got.pop("renderer", None) or info.get(renderer)
                info["threads"], info["torch"] = got.pop("threads"), got.pop("torch")
                run.update(got)
            runs[s].append(run)
        print(f"round {rnd + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    print(f"cpu: {cpu_name()}, {os.cpu_count()} logical cores, torch {info['torch']} with {info['threads']} threads")
    print(f"llvmpipe: {info.get('llvmpipe')}; {a.rounds} rounds, each run the fastest of at least {a.reps} calls")
    print(HEADER)
    rows = [summarise(t, r, runs[(t, r)]) for t, r in scenes]
    for row in rows:
        print(format_row(row), flush=True)
    if a.json:
        meta = {"cpu": cpu_name(), "threads": info["threads"], "torch": info["torch"], "llvmpipe": info.get("llvmpipe")}
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rounds": a.rounds, "reps": a.reps, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
