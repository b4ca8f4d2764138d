"""Benchmarks: ms per call, forward and backward, on CPU and (when present) CUDA. Prints a table, writes JSON.

    python benchmarks/run.py [--device cpu cuda] [--quick] [--only rasterize] [--scenes vs-llvmpipe] [--json out.json]

--scenes vs-llvmpipe keeps the nine scenes of vs_llvmpipe.py (1k / 100k / 1M triangles at 256², 1024², 4096²,
batch 1) for every op built on the rasterize scenes.

Each benchmarks/bench_<op>.py defines cases(device, quick) yielding dicts with keys
    name      row label, e.g. "rasterize 100k tris 1024^2 b1"
    forward   callable running the op once and returning its outputs
    inputs    tensors requiring grad (backward is timed only when present)
The forward is timed in a loop of forward calls. The backward is timed on its own inside a loop of training steps
(forward, then torch.autograd.backward(float outputs, fixed random gradients of their shapes)): what a loss hands
the op, so that the time is the op's backward and not that of building a loss's gradient (the gradient of
out.sum() is a broadcast scalar that must first be written out in full, as large as the output). Each figure is
the median over at least 1 s of calls (0.2 s with --quick).
"""

import argparse
import glob
import importlib.util
import json
import os
import platform
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timeit(fn, device, min_time=1.0, max_reps=50):
    """Median ms of fn's calls, repeated for at least min_time s (and three calls): on the CPU a call that takes
    fresh memory from the kernel sometimes waits for it to find huge pages, so a few calls' median is not enough.
    fn returns None (the call is timed) or a tuple of seconds it timed itself (the median of each is returned)."""
    t0 = time.perf_counter()
    fn()  # warm-up (allocator, caches)
    sync(device)
    if time.perf_counter() - t0 > 2.0:  # slow case: one more timed call is enough
        max_reps = 1
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time or len(times) < min(3, max_reps)):
        t0 = time.perf_counter()
        parts = fn()
        sync(device)
        times.append((time.perf_counter() - t0,) if parts is None else parts)
    medians = tuple(1000 * sorted(column)[len(column) // 2] for column in zip(*times))
    return medians[0] if len(medians) == 1 else medians


def differentiable(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]


def run_case(case, device, min_time=1.0):
    def forward():
        case["forward"]()

    row = {"name": case["name"], "device": device, "forward_ms": timeit(forward, device, min_time)}
    inputs = case.get("inputs")
    if inputs:
        gen = torch.Generator(device=inputs[0].device).manual_seed(0)
        grads = [torch.randn(o.shape, generator=gen, device=o.device) for o in differentiable(case["forward"]())]

        def step():
            for t in inputs:
                t.grad = None
            t0 = time.perf_counter()
            outs = differentiable(case["forward"]())
            sync(device)
            t1 = time.perf_counter()
            torch.autograd.backward(outs, grads)
            sync(device)
            return time.perf_counter() - t0, time.perf_counter() - t1

        row["forward_backward_ms"], row["backward_ms"] = timeit(step, device, min_time)
    return row


def modules(only):
    for path in sorted(glob.glob(os.path.join(HERE, "bench_*.py"))):
        name = os.path.basename(path)[6:-3]
        if only and name not in only:
            continue
        if f"bench_{name}" in sys.modules:  # already imported (bench_rasterize): share its settings
            yield name, sys.modules[f"bench_{name}"]
            continue
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"bench_{name}"] = mod
        spec.loader.exec_module(mod)
        yield name, mod


def restrict_scenes(which):
    """Narrows the rasterize scenes that bench_rasterize and the ops built on it use."""
    sys.path.insert(0, HERE)
    import bench_rasterize

    if which == "vs-llvmpipe":
        bench_rasterize.TRIS = {k: v for k, v in bench_rasterize.TRIS.items() if k in ("1k", "100k", "1M")}
        bench_rasterize.BATCH = [1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", nargs="+", default=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    p.add_argument("--quick", action="store_true", help="smaller scenes only (for a fast check)")
    p.add_argument("--only", nargs="*", help="op names, e.g. rasterize texture")
    p.add_argument("--scenes", choices=["all", "vs-llvmpipe"], default="all")
    p.add_argument("--json", default="benchmark.json")
    a = p.parse_args()
    restrict_scenes(a.scenes)
    rows = []
    print(f"{'case':<52} {'device':<6} {'fwd ms':>9} {'bwd ms':>9}")
    for _, mod in modules(a.only):
        for device in a.device:
            for case in mod.cases(device, a.quick):
                try:
                    row = run_case(case, device, 0.2 if a.quick else 1.0)
                except (RuntimeError, MemoryError) as e:  # e.g. out of memory on the largest scenes
                    row = {"name": case["name"], "device": device, "error": str(e).splitlines()[0]}
                rows.append(row)
                bwd = row.get("backward_ms")
                fwd = row.get("forward_ms")
                print(
                    f"{row['name']:<52} {device:<6} {fwd if fwd is None else f'{fwd:9.2f}':>9} "
                    f"{'-' if bwd is None else f'{bwd:9.2f}':>9}" + (f"  {row['error']}" if "error" in row else ""),
                    flush=True,
                )
    meta = {
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    with open(a.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
