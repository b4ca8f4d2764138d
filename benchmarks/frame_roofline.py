"""The differentiable frame a user trains with, op by op, against what the memory system allows (CPU).

    python benchmarks/frame_roofline.py [--res 512 2048] [--rounds 3] [--json frame.json] [--plot frame.png]

The frame: rasterize a closed mesh (a 128 x 128-quad wavy sphere, 32k triangles, in perspective) with rast_db,
interpolate its uv with derivatives, sample a 1024^2 RGB texture with linear-mipmap-linear (the mip chain built
in the call, as when the texture is being trained), antialias the colour; then each op's backward from fixed
random gradients of its outputs. Every op is timed on its own (forward: the op called on the previous op's
outputs; backward: torch.autograd.grad of that op's outputs alone), as the fastest of its calls in a process;
each round is a fresh process and the table keeps the fastest round and the spread.

Each op's bytes are those it must read (every input once) and write (every output once): the floor is a plain
fill of a fresh tensor of the written size plus a sum over a buffer of the read size, timed in the same process
with the same threads. "x floor" is the op's time over that floor; on the plot, time against bytes moved with
the bandwidth the fill reached as the roof, both in CPU time. The cpu columns are the same calls' process CPU time (all threads),
which a loaded machine inflates far less than wall time.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ["rasterize", "interpolate", "texture", "antialias"]
TEX_SIZE, CHANNELS, GRID = 1024, 3, 128


def sphere(grid=GRID):
    """pos [1, V, 4] clip space, tri [T, 3] int32, uv [1, V, 2]: a wavy sphere of grid x grid quads filling about
    two thirds of the screen, seen in perspective (w in [2.2, 3.8])."""
    import torch

    th = torch.linspace(0.02, math.pi - 0.02, grid + 1)
    ph = torch.linspace(0.0, 2 * math.pi, grid + 1)
    t, p = torch.meshgrid(th, ph, indexing="ij")
    r = 1.0 + 0.05 * torch.sin(7 * t) * torch.cos(5 * p)
    x, y, z = r * torch.sin(t) * torch.cos(p), r * torch.cos(t), r * torch.sin(t) * torch.sin(p)
    w = z + 3.0  # camera at z = -3 looking along +z, focal length 2
    pos = torch.stack([2 * x, 2 * y, (w - 0.1) * 1.02, w], -1).reshape(1, -1, 4)
    uv = torch.stack([p / (2 * math.pi), t / math.pi], -1).reshape(1, -1, 2)
    i = torch.arange(grid).view(-1, 1) * (grid + 1) + torch.arange(grid).view(1, -1)
    quads = torch.stack([i, i + 1, i + grid + 1, i + 1, i + grid + 2, i + grid + 1], -1).reshape(-1, 3)
    return pos.contiguous(), quads.to(torch.int32).contiguous(), uv.contiguous()


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def fastest_ms(fn, reps=3, min_time=0.5, max_reps=50):
    """The fastest call's wall time and, separately, the least process CPU time (all threads) of a call, in ms."""
    fn()  # warm-up: allocator, caches, the thread pool
    wall, cpu, start, done = float("inf"), float("inf"), time.perf_counter(), 0
    while done < reps or (done < max_reps and time.perf_counter() - start < min_time):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, 1000 * (time.perf_counter() - t0)), min(cpu, 1000 * (time.process_time() - c0))
        done += 1
    return wall, cpu


def floor_ms(read, write):
    """A fresh fill of `write` bytes plus a sum over `read` bytes (an existing buffer)."""
    import torch

    src = torch.ones(max(read // 4, 1))

    def run():
        torch.empty(max(write // 4, 1)).fill_(0.0)
        src.sum()

    return fastest_ms(run)


def frame_ops(res):
    """(op, pass, callable, bytes read, bytes written) for every op of the frame at res x res."""
    import torch

    import prerast

    gen = torch.Generator().manual_seed(0)
    pos, tri, uv_attr = sphere()
    tex = torch.rand(1, TEX_SIZE, TEX_SIZE, CHANNELS, generator=gen)
    ctx = prerast.RasterizeCpuContext()
    topo = prerast.antialias_construct_topology_hash(tri)
    mips = nbytes(tex) // 3  # levels 1.. of the chain: a quarter, a sixteenth, ... of level 0

    def leaf(t):
        return t.detach().clone().requires_grad_(True)

    with torch.no_grad():
        rast, db = prerast.rasterize(ctx, pos, tri, (res, res))
        uv, uv_da = prerast.interpolate(uv_attr, rast, tri, db, "all")
        color = prerast.texture(tex, uv, uv_da, filter_mode="linear-mipmap-linear")
        out = prerast.antialias(color, rast, pos, tri, topo)
    rows = []

    def add(op, fwd, inputs, read, write):
        """The op's forward, then its backward: autograd.grad of its outputs from fixed random gradients."""
        rows.append((op, "forward", lambda: fwd(*(t.detach() for t in inputs)), read, write))
        leaves = [leaf(t) for t in inputs]
        outs = fwd(*leaves)
        outs = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if o.requires_grad]
        grads = [torch.randn(o.shape, generator=gen) for o in outs]
        wants = [t for t in leaves if t.dtype == torch.float32]
        # The gradients in and what the forward read, again; rasterize's backward also reads the IDs in rast.
        bwd_read = nbytes(*grads) + read + (nbytes(rast) if op == "rasterize" else 0)
        bwd_write = nbytes(*wants) + (mips if op == "texture" else 0)
        rows.append(
            (op, "backward", lambda: torch.autograd.grad(outs, wants, grads, retain_graph=True), bwd_read, bwd_write)
        )

    add("rasterize", lambda p: prerast.rasterize(ctx, p, tri, (res, res)), [pos], nbytes(pos, tri), nbytes(rast, db))
    add(
        "interpolate",
        lambda a, r, d: prerast.interpolate(a, r, tri, d, "all"),
        [uv_attr, rast, db],
        nbytes(uv_attr, rast, db, tri),
        nbytes(uv, uv_da),
    )
    add(
        "texture",
        lambda t, u, d: prerast.texture(t, u, d, filter_mode="linear-mipmap-linear"),
        [tex, uv, uv_da],
        nbytes(tex, uv, uv_da) + mips,
        nbytes(color) + mips,
    )
    add(
        "antialias",
        lambda c, p: prerast.antialias(c, rast, p, tri, topo),
        [color, pos],
        nbytes(color, rast, pos, tri),
        nbytes(out),
    )
    return rows


def worker(resolutions, threads):
    import torch

    if threads:
        torch.set_num_threads(threads)
    rows = []
    for res in resolutions:
        for op, kind, fn, read, write in frame_ops(res):
            ms, cpu_ms = fastest_ms(fn)
            floor, floor_cpu = floor_ms(read, write)
            rows.append(
                {"res": res, "op": op, "pass": kind, "read": read, "write": write, "ms": ms, "cpu_ms": cpu_ms}
                | {"floor_ms": floor, "floor_cpu_ms": floor_cpu}
            )
    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__, "rows": rows}))


def summarise(runs):
    rows = []
    for i, first in enumerate(runs[0]["rows"]):
        times = [r["rows"][i]["ms"] for r in runs]
        row = dict(first, ms=min(times), spread=max(times) / min(times))
        for m in ("cpu_ms", "floor_ms", "floor_cpu_ms"):
            row[m] = min(r["rows"][i][m] for r in runs)
        row["gbps"] = (row["read"] + row["write"]) / row["ms"] / 1e6
        row["floor_gbps"] = (row["read"] + row["write"]) / row["floor_ms"] / 1e6
        row["over_floor"] = row["ms"] / row["floor_ms"]
        row["cpu_over_floor"] = row["cpu_ms"] / row["floor_cpu_ms"]
        rows.append(row)
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"rasterize": "o", "interpolate": "s", "texture": "^", "antialias": "D"}
    colours = {512: "tab:blue", 2048: "tab:orange"}
    for r in rows:
        mb = (r["read"] + r["write"]) / 1e6
        ax.scatter(
            mb,
            r["cpu_ms"],
            marker=markers[r["op"]],
            facecolors=colours.get(r["res"], "tab:gray") if r["pass"] == "forward" else "none",
            edgecolors=colours.get(r["res"], "tab:gray"),
            s=50,
        )
    # The rate the fill and sum reached on the most bytes (smaller ones partly stay in cache).
    big = max(rows, key=lambda r: r["read"] + r["write"])
    rate = (big["read"] + big["write"]) / big["floor_cpu_ms"] / 1e6
    xs = [min((r["read"] + r["write"]) / 1e6 for r in rows) / 2, max((r["read"] + r["write"]) / 1e6 for r in rows) * 2]
    ax.plot(xs, [x / rate for x in xs], "k--", lw=1, label=f"memory roof ({rate:.1f} GB/s, fill + sum)")
    ax.plot(xs, [3 * x / rate for x in xs], "k:", lw=1, label="3x the roof")
    for op, m in markers.items():
        ax.scatter([], [], marker=m, color="gray", label=op)
    for res, c in colours.items():
        ax.scatter([], [], marker="s", color=c, label=f"{res}^2 (filled: forward, open: backward)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="MB the op must read and write",
        ylabel="process CPU ms, all threads (fastest round)",
    )
    ax.set_title("prerast CPU: the differentiable frame against the memory roof")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: the same numbers, the same bytes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--res", nargs="+", type=int, default=[512, 2048])
    p.add_argument("--rounds", type=int, default=3, help="fresh processes (default 3)")
    p.add_argument("--threads", type=int, help="torch's intra-op threads for the ops and the floor (default: torch's)")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--plot", help="also draw time against bytes with the memory roof into this PNG (matplotlib)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if min(a.res) < 8 or a.rounds < 1 or (a.threads is not None and a.threads < 1):
        p.error("--res must be at least 8, --rounds and --threads positive")
    if a.plot:
        try:
            import matplotlib  # noqa: F401  (checked before the rounds, drawn after them)
        except ImportError:
            print("frame_roofline.py: --plot needs matplotlib: pip install matplotlib", file=sys.stderr)
            sys.exit(2)
    if a.worker:
        worker(a.res, a.threads)
        return
    runs = []
    for rnd in range(a.rounds):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--res", *map(str, a.res)]
        cmd += ["--threads", str(a.threads)] if a.threads else []
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"round {rnd + 1} failed:\n{done.stderr.strip()}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"round {rnd + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    rows = summarise(runs)
    print(f"torch {runs[0]['torch']} with {runs[0]['threads']} threads, {a.rounds} rounds, fastest of each")
    print(
        f"{'res':>5} {'op':<12} {'pass':<9} {'MB read':>8} {'MB written':>10} {'ms':>8} {'spread':>6} "
        f"{'GB/s':>6} {'floor ms':>8} {'x floor':>7} {'cpu ms':>8} {'floor cpu':>9} {'x floor':>7}"
    )
    for r in rows:
        print(
            f"{r['res']:>5} {r['op']:<12} {r['pass']:<9} {r['read'] / 1e6:8.1f} {r['write'] / 1e6:10.1f} "
            f"{r['ms']:8.2f} {r['spread']:6.2f} {r['gbps']:6.1f} {r['floor_ms']:8.2f} {r['over_floor']:7.2f} "
            f"{r['cpu_ms']:8.2f} {r['floor_cpu_ms']:9.2f} {r['cpu_over_floor']:7.2f}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": runs[0]["threads"], "torch": runs[0]["torch"], "rows": rows}, f, indent=2)
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
