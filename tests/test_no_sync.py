"""No op waits for the GPU: every op, forward and backward, runs under torch.cuda.set_sync_debug_mode("error"),
which raises on any synchronization torch makes (reading a CUDA tensor on the host, a blocking copy). Index checks
of CUDA tensors run on the device instead: a bad index raises a device-side assert, reported at the next
synchronizing call, as torch's own indexing does. Needs a GPU."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import prerast
from conftest import requires_cuda
from render_scene import grid_scene, render

pytestmark = requires_cuda


@pytest.fixture
def no_sync():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_render_forward_and_backward_never_synchronize(no_sync):
    ctx = prerast.RasterizeCudaContext()
    pos, tri, uv, tex = grid_scene(n=5, images=2, device="cuda")
    pos.requires_grad_(True), uv.requires_grad_(True), tex.requires_grad_(True)
    target = torch.rand(2, 23, 29, 3, device="cuda")
    color, loss = render(ctx, pos, tri, uv, tex, target)
    loss.backward()
    mip = prerast.texture_construct_mip(tex)
    out = prerast.texture(tex, uv[..., None, :].expand(2, -1, 3, 2).contiguous(), mip=mip,
                          filter_mode="linear-mipmap-nearest", mip_level_bias=torch.ones(2, pos.shape[1], 3,
                                                                                          device="cuda"))
    out.sum().backward()
    topo = prerast.antialias_construct_topology_hash(tri)
    rast, _ = prerast.rasterize(ctx, pos, tri, (23, 29))
    prerast.antialias(color.detach(), rast, pos, tri, topo, pos_gradient_boost=2.0).sum().backward()


def test_range_mode_and_depth_peeling_never_synchronize(no_sync):
    ctx = prerast.RasterizeCudaContext()
    pos, tri, uv, _ = grid_scene(n=4, device="cuda")
    ranges = torch.tensor([[0, 20], [10, 22]], dtype=torch.int32)  # stays on the CPU, as in nvdiffrast
    with prerast.DepthPeeler(ctx, pos[0], tri, (17, 19), ranges=ranges) as peeler:
        for _ in range(2):
            rast, db = peeler.rasterize_next_layer()
            prerast.interpolate(uv[0], rast, tri, rast_db=db, diff_attrs=[0])


@pytest.mark.parametrize("case", ["tri", "rast"])
def test_bad_index_is_a_device_side_assert(case):
    # A device-side assert leaves the process's CUDA context unusable: run it in a process of its own.
    script = textwrap.dedent(f"""
        import sys, torch, prerast
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from render_scene import grid_scene
        pos, tri, uv, _ = grid_scene(n=3, device="cuda")
        ctx = prerast.RasterizeCudaContext()
        torch.cuda.set_sync_debug_mode("error")
        if {case!r} == "tri":
            prerast.rasterize(ctx, pos, tri + 100, (8, 8))
        else:
            rast, _ = prerast.rasterize(ctx, pos, tri, (8, 8))
            prerast.interpolate(uv, rast + 1000.0, tri)
        print("queued without a sync", flush=True)
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "queued without a sync" in run.stdout
    assert run.returncode != 0 and "device-side assert" in run.stderr, run.stderr[-2000:]
