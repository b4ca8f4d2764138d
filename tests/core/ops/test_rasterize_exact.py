"""The CPU rasterizer is bit-for-bit the arithmetic of rasterize.h (modelled in tests/support/exact_raster.py).

Scenes that stress what a faster rasterizer could get subtly wrong: many tiny triangles, meshes with shared
edges, vertices exactly on pixel centres (edges through centres, decided by the double-precision path and the
tie rules), huge triangles crossing w = 0 and the clip planes, and depth ties; at resolutions that are and are
not multiples of the tile size, and with one thread or several; and on every SIMD path of the CPU rasterizer
(scalar, AVX2, AVX-512: PRERAST_CPU_SIMD picks one, in a process of its own since the library reads it once).
"""

import functools
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

import prerast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
import exact_raster  # noqa: E402


def soup(g, num_tris, size, batch=2):
    centre = torch.rand(batch, num_tris, 1, 2, generator=g) * 2.2 - 1.1
    corner = centre + (torch.rand(batch, num_tris, 3, 2, generator=g) - 0.5) * 2 * size
    z = torch.rand(batch, num_tris, 3, 1, generator=g) * 1.8 - 0.9
    w = 1.0 + torch.rand(batch, num_tris, 3, 1, generator=g)
    pos = torch.cat([corner * w, z * w, w], -1).reshape(batch, 3 * num_tris, 4)
    return pos, torch.arange(3 * num_tris, dtype=torch.int32).reshape(num_tris, 3)


def grid_mesh(coords_x, coords_y):
    """Two triangles per cell of the grid, both diagonals (overlapping) so that edges are shared."""
    yy, xx = torch.meshgrid(coords_y, coords_x, indexing="ij")
    mx, my = len(coords_x), len(coords_y)
    idx = torch.arange(mx * my).reshape(my, mx)
    a, b = idx[:-1, :-1].reshape(-1), idx[:-1, 1:].reshape(-1)
    c, d = idx[1:, :-1].reshape(-1), idx[1:, 1:].reshape(-1)
    tri = torch.cat([torch.stack(t, 1) for t in [(a, b, d), (a, d, c), (b, c, a), (b, d, c)]]).int()
    return torch.stack([xx, yy], -1).reshape(-1, 2), tri


def scene(name, H, W, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "tiny":
        return soup(g, 3000, 0.02)
    if name == "small":
        return soup(g, 400, 0.2)
    if name == "huge_and_w_crossing":
        pos = (torch.rand(2, 60, 4, generator=g) - 0.5) * 6
        pos[..., 3] = torch.rand(2, 60, generator=g) * 3 - 1  # w in [-1, 2]
        return pos, torch.arange(60, dtype=torch.int32).reshape(20, 3)
    if name == "depth_ties":
        pos, tri = soup(g, 300, 0.4)
        pos[..., 2] = 0.0
        return pos, tri
    if name == "shared_edges":
        xy, tri = grid_mesh(torch.linspace(-1.1, 1.1, 9), torch.linspace(-1.1, 1.1, 7))
        xy = xy + (torch.rand(xy.shape, generator=g) - 0.5) * 0.1
        w = 1 + torch.rand(len(xy), 1, generator=g)
        z = torch.rand(len(xy), 1, generator=g) - 0.5
        return torch.cat([xy * w, z * w, w], -1)[None].contiguous(), tri
    if name == "vertices_on_pixel_centres":
        cx = (2 * torch.arange(1, W, 5) + 1).float() / W - 1
        cy = (2 * torch.arange(1, H, 4) + 1).float() / H - 1
        xy, tri = grid_mesh(cx, cy)
        return torch.cat([xy, torch.zeros(len(xy), 2)], -1)[None].index_fill(2, torch.tensor([3]), 1.0), tri
    raise ValueError(name)


SCENES = ["tiny", "small", "huge_and_w_crossing", "depth_ties", "shared_edges", "vertices_on_pixel_centres"]


RESOLUTIONS = [(48, 40), (64, 64), (37, 81)]


@functools.cache
def exact_model(name, res):
    H, W = res
    pos, tri = scene(name, H, W)
    return exact_raster.rasterize(pos.numpy(), tri.numpy(), H, W)


def assert_same_bits(got, want, what):
    bad = got.view(np.uint32) != want.view(np.uint32)
    assert not bad.any(), f"{bad.any(-1).sum()} pixels differ in {what}, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("name", SCENES)
@pytest.mark.parametrize("res", RESOLUTIONS)
def test_bit_identical_to_the_exact_model(name, res):
    H, W = res
    pos, tri = scene(name, H, W)
    rast, db = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (H, W))
    ref, ref_db = exact_model(name, res)
    assert (ref[..., 3] > 0).any()
    assert_same_bits(rast.numpy(), ref, "rast")
    assert_same_bits(db.numpy(), ref_db, "rast_db")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_count_does_not_change_bits(threads):
    pos, tri = scene("tiny", 64, 64, seed=1)
    ctx = prerast.RasterizeCpuContext()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = prerast.rasterize(ctx, pos, tri, (200, 136))
        torch.set_num_threads(threads)
        got = prerast.rasterize(ctx, pos, tri, (200, 136))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def path_outputs():
    """Every output the SIMD paths must agree on, by name: the exact scenes, rast without rast_db (its own write
    path), depth peeling (scalar drawing, SIMD writing), and triangle IDs past 2^24 (their float encoding)."""
    out = {}
    for name in SCENES:
        for H, W in RESOLUTIONS:
            pos, tri = scene(name, H, W)
            out[f"{name}_{H}x{W}"], out[f"{name}_{H}x{W}_db"] = prerast.rasterize(
                prerast.RasterizeCpuContext(), pos, tri, (H, W)
            )
    pos, tri = scene("small", 64, 64)
    out["no_db"] = prerast.rasterize(prerast.RasterizeCpuContext(output_db=False), pos, tri, (80, 96))[0]
    with prerast.DepthPeeler(prerast.RasterizeCpuContext(), pos, tri, (64, 80)) as peeler:
        for layer in range(3):
            out[f"peel{layer}"], out[f"peel{layer}_db"] = peeler.rasterize_next_layer()
    big = torch.zeros(2**24 + 40, 3, dtype=torch.int32)  # triangles 2^24 + 8 on: IDs in the high encoding
    big[-32:] = tri[:32]
    ranges = torch.tensor([[2**24 + 8, 32]], dtype=torch.int32)
    out["big_ids"], out["big_ids_db"] = prerast.rasterize(prerast.RasterizeCpuContext(), pos[0], big, (48, 64), ranges)
    return {k: v.numpy() for k, v in out.items()}


def cpu_lacks(path):
    """Why this machine cannot run a SIMD path (None where it can, or where its CPU flags cannot be read: the
    library then takes the widest path it has, whose bits must match as well)."""
    needs = {"scalar": [], "avx2": ["avx2"], "avx512": ["avx512f", "avx512bw", "avx512dq", "avx512vl"]}[path]
    if needs and platform.machine().lower() not in ("x86_64", "amd64"):
        return f"{path} is x86-64 only"
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return None
    missing = [flag for flag in needs if flag not in flags]
    return f"this CPU lacks {', '.join(missing)}" if missing else None


PATHS = ["avx512", "avx2", "scalar"]
UNKNOWN = "sse9"
# The path of this process, with PRERAST_CPU_SIMD unset: the widest the CPU has (no process of its own).
HERE = None if os.environ.get("PRERAST_CPU_SIMD") else next(p for p in PATHS if not cpu_lacks(p))


@pytest.fixture(scope="module")
def path_runs(tmp_path_factory):
    """One process per other PRERAST_CPU_SIMD value (the library reads it once), all started at once: each dumps
    path_outputs() to a file; the unknown value's process only tries to rasterize."""
    runs = {}
    for path in [p for p in PATHS if not cpu_lacks(p) and p != HERE] + [UNKNOWN]:
        dump = tmp_path_factory.mktemp(path) / "outputs.npz"
        code = f"import sys; sys.path[:0] = {[os.path.dirname(os.path.abspath(__file__))]!r}; import numpy, "
        code += f"test_rasterize_exact as t; numpy.savez({str(dump)!r}, **t.path_outputs())"
        env = dict(os.environ, PRERAST_CPU_SIMD=path)
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
        runs[path] = dump, proc
    yield runs
    for _, proc in runs.values():
        proc.kill()
        proc.communicate()


def finished(run):
    dump, proc = run
    _, err = proc.communicate(timeout=300)
    return dump, proc.returncode, err


@pytest.mark.parametrize("path", PATHS)
def test_every_simd_path_gives_the_same_bits(path, path_runs):
    if cpu_lacks(path):
        pytest.skip(cpu_lacks(path))
    want = path_outputs_here()
    if path == HERE:
        got = want
    else:
        dump, returncode, err = finished(path_runs[path])
        assert returncode == 0, err
        got = dict(np.load(dump))
    assert got.keys() == want.keys()
    for key in want:
        assert_same_bits(got[key], want[key], f"{key} on {path}")
    for name in SCENES:
        for H, W in RESOLUTIONS:
            ref, ref_db = exact_model(name, (H, W))
            assert_same_bits(got[f"{name}_{H}x{W}"], ref, f"rast of {name} at {H}x{W} on {path}")
            assert_same_bits(got[f"{name}_{H}x{W}_db"], ref_db, f"rast_db of {name} at {H}x{W} on {path}")
    assert (got["big_ids"][..., 3] > 2**24).sum() > 100 and got["peel2"][..., 3].any()


@functools.cache
def path_outputs_here():
    return path_outputs()


def test_an_unknown_simd_path_is_refused(path_runs):
    _, returncode, err = finished(path_runs[UNKNOWN])
    assert returncode != 0
    assert "RuntimeError" in err and f"PRERAST_CPU_SIMD='{UNKNOWN}' is not understood" in err
