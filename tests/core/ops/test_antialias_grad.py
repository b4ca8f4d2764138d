"""antialias gradients to pos: central differences of the antialiased image, the exact rate at which a moving
edge uncovers pixels, and optimisation through rasterize -> interpolate -> antialias."""

import numpy as np
import pytest
import torch
from test_antialias import clip_pos, grid_mesh, vars_of

import prerast
from conftest import make_ctx, per_thread_count


def crossing_of(color, rast, pos, tri):
    topo = prerast.antialias_construct_topology_hash(tri)
    return torch.ops.prerast.antialias_fwd(color, rast, pos, tri, *vars_of(topo))[1]


@pytest.mark.parametrize("seed", range(2))
def test_pos_gradient_matches_finite_differences(ctx, seed):
    # Full pipeline rasterize -> antialias with colours constant per triangle, so pos acts through where the
    # silhouettes cross the pixel pairs alone. A coordinate is checked where its perturbation changes no pixel's
    # triangle and moves no crossing across a pixel boundary (where the blend switches pixels).
    H, W = 20, 20
    pos, tri = grid_mesh(np.random.default_rng(seed), n=3, jitter=0.2, images=1)
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(1, H, W, 3, generator=g).to(ctx.device)
    palette = torch.rand(tri.shape[0] + 1, 3, generator=g).to(ctx.device)  # per triangle, background first

    def run(p):
        rast, _ = prerast.rasterize(ctx, p, tri, (H, W))
        color = palette[rast[..., 3].long()]
        return prerast.antialias(color, rast, p, tri), rast, color

    def loss(p):
        return (run(p)[0].double() * weight).sum()

    p = pos.clone().requires_grad_(True)
    loss(p).backward()
    analytic = p.grad.cpu().double()
    h = 1e-3
    checked = moving = 0
    for v in range(pos.shape[1]):
        for c in (0, 1, 3):
            d = torch.zeros_like(pos)
            d[0, v, c] = h
            with torch.no_grad():
                states = []
                for q in (pos + d, pos - d):
                    _, rast, color = run(q)
                    cross = crossing_of(color, rast, q, tri)
                    states.append((rast[..., 3], cross >= 0, cross > 0.5))
                if not all(torch.equal(a, b) for a, b in zip(*states)):
                    continue
                numeric = ((loss(pos + d) - loss(pos - d)) / (2 * h)).item()
            checked += 1
            moving += abs(numeric) > 1e-2
            assert analytic[0, v, c].item() == pytest.approx(numeric, rel=2e-2, abs=2e-2), (v, c)
    assert checked >= 30 and moving >= 10


@pytest.mark.parametrize("boost", [1.0, 3.0])
def test_moving_edge_uncovers_pixels_at_the_exact_rate(ctx, boost):
    # A vertical silhouette at NDC x = e over H rows: the antialiased brightness is H * (pixel position of the
    # edge + 1/2), so moving the edge by dx (NDC) changes it by H * W / 2 * dx, shared by the edge's two ends.
    H, W = 10, 14
    pos = clip_pos([[0.21, -3.0], [0.21, 3.0], [-3.0, 0.0]]).to(ctx.device).requires_grad_(True)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (H, W))
    color = (rast[..., 3:] > 0).float()
    out = prerast.antialias(color, rast, pos, tri, pos_gradient_boost=boost)
    assert out.sum().item() == pytest.approx(H * ((0.21 + 1) * W / 2), rel=1e-5)
    out.sum().backward()
    g = pos.grad[0].cpu()
    torch.testing.assert_close(g[:2, 0], torch.full((2,), boost * H * W / 4), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g[:2, 1], torch.zeros(2), atol=1e-4, rtol=0)
    assert (g[2] == 0).all() and (g[:, 2] == 0).all()


def test_gradients_reach_every_input_kind(ctx):
    pos, tri = grid_mesh(np.random.default_rng(3), images=2)
    pos, tri = pos.to(ctx.device).requires_grad_(True), tri.to(ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (16, 16))
    color = torch.rand(2, 16, 16, 3, device=ctx.device, requires_grad=True)
    out = prerast.antialias(color, rast, pos, tri)
    out.square().sum().backward()
    assert color.grad.shape == color.shape and pos.grad.shape == pos.shape
    assert pos.grad[0].abs().sum() > 0 and pos.grad[1].abs().sum() > 0
    # Without requires_grad on pos no pos gradient is computed.
    color2 = color.detach().clone().requires_grad_(True)
    prerast.antialias(color2, rast.detach(), pos.detach(), tri).sum().backward()
    assert color2.grad is not None


def test_deterministic(ctx):
    pos, tri = grid_mesh(np.random.default_rng(4), images=2, jitter=0.25)
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (32, 32))
    color = torch.rand(2, 32, 32, 4, generator=torch.Generator().manual_seed(0)).to(ctx.device)
    runs = []
    for _ in range(2):
        p = pos.clone().requires_grad_(True)
        c = color.clone().requires_grad_(True)
        out = prerast.antialias(c, rast, p, tri)
        (out * out).sum().backward()
        runs.append((out, c.grad, p.grad))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    if ctx.device.type == "cpu":
        assert torch.equal(runs[0][2], runs[1][2])
    else:  # pos gradients are summed with atomics on the GPU
        torch.testing.assert_close(runs[0][2], runs[1][2])


def test_cpu_and_cuda_agree(device):
    if device == "cpu":
        pytest.skip("compares the CUDA result with the CPU one")
    pos, tri = grid_mesh(np.random.default_rng(8), images=2, jitter=0.25)
    color = torch.rand(2, 40, 36, 3, generator=torch.Generator().manual_seed(1))
    weight = torch.randn(2, 40, 36, 3, generator=torch.Generator().manual_seed(2))
    runs = []
    for dev in ("cpu", device):
        p, c = (t.detach().to(dev).clone().requires_grad_(True) for t in (pos, color))
        rast, _ = prerast.rasterize(make_ctx(dev), p.detach(), tri.to(dev), (40, 36))
        out = prerast.antialias(c, rast, p, tri.to(dev))
        (out * weight.to(dev)).sum().backward()
        runs.append([x.cpu() for x in (rast, out, c.grad, p.grad)])
    (rast0, out0, gc0, gp0), (rast1, out1, gc1, gp1) = runs
    assert torch.equal(rast0, rast1) and torch.equal(out0, out1) and torch.equal(gc0, gc1)
    torch.testing.assert_close(gp0, gp1, rtol=1e-5, atol=1e-4)


def shade(ctx, pos, tri, colours, res):
    rast, _ = prerast.rasterize(ctx, pos, tri, res)
    img, _ = prerast.interpolate(colours, rast, tri)
    return prerast.antialias(img, rast, pos, tri)


def test_fit_vertex_colours(ctx):
    res = (24, 24)
    pos, tri = grid_mesh(np.random.default_rng(5), n=3, jitter=0.08, images=1)
    pos, tri = pos[0].to(ctx.device), tri.to(ctx.device)
    g = torch.Generator().manual_seed(5)
    target = shade(ctx, pos[None], tri, torch.rand(pos.shape[0], 3, generator=g).to(ctx.device), res)
    colours = torch.full((pos.shape[0], 3), 0.5, device=ctx.device, requires_grad=True)
    opt = torch.optim.Adam([colours], lr=0.05)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = (shade(ctx, pos[None], tri, colours, res) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 100, (losses[0], losses[-1])


def test_fit_mesh_offset_through_silhouettes(ctx):
    # With one flat colour on the mesh, only the antialiased silhouettes tell where the mesh is: recovering its
    # offset checks the pos gradients end to end.
    res = (32, 32)
    pos, tri = grid_mesh(np.random.default_rng(6), n=2, jitter=0.0, images=1)
    pos, tri = (pos[0] * torch.tensor([0.6, 0.6, 1.0, 1.0])).to(ctx.device), tri.to(ctx.device)
    white = torch.ones(pos.shape[0], 1, device=ctx.device)

    def render(offset):
        shifted = pos.clone()
        shifted[:, :2] = pos[:, :2] + offset * pos[:, 3:]
        return shade(ctx, shifted[None], tri, white, res)

    true_offset = torch.tensor([0.13, -0.08], device=ctx.device)
    target = render(true_offset)
    offset = torch.zeros(2, device=ctx.device, requires_grad=True)
    opt = torch.optim.Adam([offset], lr=0.01)
    first = None
    for _ in range(150):
        opt.zero_grad()
        loss = (render(offset) - target).square().mean()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert (offset.detach() - true_offset).abs().max() < 0.01, offset
    assert loss.item() < first / 100


def test_pos_gradient_of_many_unused_vertices():
    """A pos far larger than the image (a mesh followed by 300k vertices no triangle uses) is split into one band
    of vertices per thread on the CPU: the same bits on any thread count (every element gets its additions in pixel
    order), the gradient the mesh alone gets for its vertices, and zero for the rest."""
    mesh, tri = grid_mesh(np.random.default_rng(6), n=8, jitter=0.25, images=2)
    unused = torch.rand(2, 300_000, 4, generator=torch.Generator().manual_seed(1)) + 1.0
    rast, _ = prerast.rasterize(make_ctx("cpu"), mesh, tri, (40, 48))
    color = torch.rand(2, 40, 48, 5, generator=torch.Generator().manual_seed(2))
    weight = torch.randn(2, 40, 48, 5, generator=torch.Generator().manual_seed(3))

    def pos_grad(pos):
        p = pos.clone().requires_grad_(True)
        (prerast.antialias(color, rast, p, tri) * weight).sum().backward()
        return p.grad

    (alone,) = per_thread_count(lambda: pos_grad(mesh), (1,))
    assert (alone.abs().sum(-1) > 0).sum() > 20
    grads = per_thread_count(lambda: pos_grad(torch.cat([mesh, unused], 1)), (1, 2, 3))
    for grad in grads:
        assert torch.equal(grad, grads[0])
    # The mesh alone is summed in double (few elements, many additions each), the large pos in float.
    torch.testing.assert_close(grads[0][:, : mesh.shape[1]], alone, rtol=1e-5, atol=1e-4)
    assert not grads[0][:, mesh.shape[1] :].any()
