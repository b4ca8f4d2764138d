"""No op waits for the GPU: every op, forward and backward, runs under torch.cuda.set_sync_debug_mode("error"),
which raises on any synchronization torch makes (reading a CUDA tensor on the host, a blocking copy). Index checks
of CUDA tensors run on the device instead: a bad index raises a device-side assert, reported at the next
synchronizing call, as torch's own indexing does. Needs a GPU."""

import contextlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import prerast
from conftest import requires_cuda
from render_scene import grid_scene, render

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")  # render_scene.py

pytestmark = requires_cuda


@contextlib.contextmanager
def no_sync():
    """Any synchronization torch makes inside raises (inputs are made before: creating them copies to the GPU)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_render_forward_and_backward_never_synchronize():
    ctx = prerast.RasterizeCudaContext()
    pos, tri, uv, tex = grid_scene(n=5, images=2, device="cuda")
    pos.requires_grad_(True), uv.requires_grad_(True), tex.requires_grad_(True)
    target = torch.rand(2, 23, 29, 3, device="cuda")
    bias = torch.ones(2, pos.shape[1], 3, device="cuda")
    with no_sync():
        render_every_op(ctx, pos, tri, uv, tex, target, bias)


def render_every_op(ctx, pos, tri, uv, tex, target, bias):
    color, loss = render(ctx, pos, tri, uv, tex, target)
    loss.backward()
    mip = prerast.texture_construct_mip(tex)
    out = prerast.texture(
        tex,
        uv[..., None, :].expand(2, -1, 3, 2).contiguous(),
        mip=mip,
        filter_mode="linear-mipmap-nearest",
        mip_level_bias=bias,
    )
    out.sum().backward()
    topo = prerast.antialias_construct_topology_hash(tri)
    rast, _ = prerast.rasterize(ctx, pos, tri, (23, 29))
    prerast.antialias(color.detach(), rast, pos, tri, topo, pos_gradient_boost=2.0).sum().backward()


def test_range_mode_and_depth_peeling_never_synchronize():
    ctx = prerast.RasterizeCudaContext()
    pos, tri, uv, _ = grid_scene(n=4, device="cuda")
    ranges = torch.tensor([[0, 20], [10, 22]], dtype=torch.int32)  # stays on the CPU, as in nvdiffrast
    with no_sync(), prerast.DepthPeeler(ctx, pos[0], tri, (17, 19), ranges=ranges) as peeler:
        for _ in range(2):
            rast, db = peeler.rasterize_next_layer()
            prerast.interpolate(uv[0], rast, tri, rast_db=db, diff_attrs=[0])


@pytest.mark.parametrize("case", ["tri", "rast", "rast inf"])
def test_bad_index_is_a_device_side_assert(case):
    # A device-side assert leaves the process's CUDA context unusable: run it in a process of its own. The assert
    # reaches Python at the next call that synchronizes, or at a later CUDA call of the op itself if the check has
    # failed by then; never through a synchronization of the op's own.
    script = textwrap.dedent(f"""
        import sys, torch, prerast
        sys.path.insert(0, {SUPPORT!r})
        from render_scene import grid_scene
        pos, tri, uv, _ = grid_scene(n=3, device="cuda")
        ctx = prerast.RasterizeCudaContext()
        rast, _ = prerast.rasterize(ctx, pos, tri, (8, 8))
        bad = {{"tri": tri + 100, "rast": rast + 1000.0, "rast inf": rast * float("inf")}}[{case!r}]
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            if {case!r} == "tri":
                prerast.rasterize(ctx, pos, bad, (8, 8))
            else:
                prerast.interpolate(uv, bad, tri)
        except RuntimeError as e:
            print("raised by the op" + (" at a sync" if "synchroniz" in str(e) else ""), flush=True)
            raise
        print("queued without a sync", flush=True)
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "at a sync" not in run.stdout
    assert "queued without a sync" in run.stdout or "raised by the op" in run.stdout, run.stderr[-2000:]
    assert run.returncode != 0 and "device-side assert" in run.stderr, run.stderr[-2000:]


CAPTURE = """
import sys, torch, prerast
sys.path.insert(0, {here!r})
from render_scene import grid_scene, render
ctx = prerast.RasterizeCudaContext()
pos, tri, uv, tex = grid_scene(n=5, images=2, device="cuda")
pos.requires_grad_(True), uv.requires_grad_(True), tex.requires_grad_(True)
target = torch.rand(2, 23, 29, 3, device="cuda")

def step():
    color, loss = render(ctx, pos, tri, uv, tex, target)
    return [color, loss] + list(torch.autograd.grad(loss, (pos, uv, tex)))

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(2):
        eager = step()  # warm-up off the default stream, as torch.cuda.graphs asks
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static = step()
with torch.no_grad():
    pos.add_(0.01 * torch.randn_like(pos))  # new data in the same tensors: the replay must follow it
graph.replay()
fresh = step()
for name, a, b in zip(["color", "loss", "grad pos", "grad uv", "grad tex"], fresh, static):
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m: name + ": " + m)
print("replayed", flush=True)
"""


def test_a_whole_render_with_gradients_is_captured_in_a_cuda_graph():
    # A host synchronization inside an op makes capture fail; a capture failure can leave the CUDA context unusable,
    # hence a process of its own.
    script = CAPTURE.format(here=SUPPORT)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "replayed" in run.stdout, run.stderr[-3000:]


OVERFLOW = """
import sys, torch, prerast
sys.path.insert(0, {here!r})
from render_scene import grid_scene
pos, tri, _, _ = grid_scene(n=12, images=3, device="cuda")
big = torch.tensor([[[-3.0, -3.0, 0.5, 1.0], [3.0, -3.0, 0.5, 1.0], [0.0, 3.0, 0.5, 1.0]]], device="cuda")
pos = torch.cat([pos, big.expand(3, -1, -1)], 1)  # one screen-filling triangle behind the grid
tri = torch.cat([tri, torch.tensor([[169, 170, 171]], dtype=torch.int32, device="cuda")])
for res in [(67, 45), (128, 128)]:
    rast, db = prerast.rasterize(prerast.RasterizeCudaContext(), pos, tri, res)
    ref, ref_db = prerast.rasterize(prerast.RasterizeCpuContext(), pos.cpu(), tri.cpu(), res)
    assert torch.equal(rast.cpu(), ref), res
    torch.testing.assert_close(db.cpu(), ref_db, rtol=1e-5, atol=1e-6)
    ranges = torch.tensor([[0, 100], [50, 200], [0, tri.shape[0]]], dtype=torch.int32)
    rast, _ = prerast.rasterize(prerast.RasterizeCudaContext(), pos[0], tri, res, ranges=ranges)
    ref, _ = prerast.rasterize(prerast.RasterizeCpuContext(), pos[0].cpu(), tri.cpu(), res, ranges=ranges)
    assert torch.equal(rast.cpu(), ref), ("ranges", res)
print("same as the CPU", flush=True)
"""


@pytest.mark.parametrize("capacity", ["0", "100", ""])
def test_tile_lists_that_overflow_their_capacity_give_the_same_image(capacity):
    # The CUDA rasterizer sizes its per-tile lists before their length is known (no sync); tiles whose list did not
    # fit are shaded from every triangle of the image. PRERAST_CUDA_PAIR_CAPACITY forces that path.
    env = dict(os.environ, PRERAST_CUDA_PAIR_CAPACITY=capacity)
    script = OVERFLOW.format(here=SUPPORT)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0 and "same as the CPU" in run.stdout, run.stderr[-3000:]
