"""Large CPU outputs reuse the memory of released ones (csrc/bindings/output_cache.h): only once no tensor, view
or autograd graph refers to it; the results are those of fresh memory (every block handed out NaN-filled first,
against the cache turned off); the bound, empty_cache() and PRERAST_CPU_OUTPUT_CACHE_MB hold; outputs made from
the cache still share, pickle, save and refuse to grow as torch's own do."""

import gc
import io
import json
import os
import pickle
import subprocess
import sys
import threading

import pytest
import torch

import prerast
from prerast import _output_cache
from render_scene import grid_scene

MIB = 1 << 20
RES = 512  # a [1, 512, 512, 4] rast: 4 MiB, served by the cache


def wraps():
    """Whether this torch lets the binding make tensors over its own memory (the stable ABI needs torch 2.11)."""
    before = _output_cache._stats()["allocated"] + _output_cache._stats()["reused"]
    prerast.rasterize(prerast.RasterizeCpuContext(), *grid_scene()[:2], (RES, RES))
    return _output_cache._stats()["allocated"] + _output_cache._stats()["reused"] > before


needs_cache = pytest.mark.skipif(not wraps(), reason="torch_from_blob is missing (stable binding under torch 2.10)")


@pytest.fixture
def cache():
    """The cache emptied, at its default bound, no poison; the same afterwards. Earlier tests' garbage is collected
    first, so that no output of theirs is released in the middle of a test."""
    gc.collect()
    _output_cache._configure()
    prerast.empty_cache()
    yield _output_cache
    _output_cache._configure()
    prerast.empty_cache()


def draw(res=RES, **kw):
    pos, tri = grid_scene()[:2]
    return prerast.rasterize(prerast.RasterizeCpuContext(**kw), pos, tri, (res, res))


def pointers(*tensors):
    return {t.untyped_storage().data_ptr() for t in tensors}


@needs_cache
def test_a_released_output_is_reused_and_a_live_one_is_not(cache):
    first = draw()
    second = draw()  # the first is alive: fresh blocks
    assert not pointers(*first) & pointers(*second)
    held = pointers(*first)
    del first
    assert cache._stats()["held_blocks"] == 2
    third = draw()
    assert pointers(*third) == held
    assert cache._stats()["held_blocks"] == 0
    del second, third


@needs_cache
def test_a_view_keeps_its_block(cache):
    rast, rast_db = draw()
    view = rast[0, 10:20, :, 3]
    kept, released = pointers(rast), pointers(rast_db)
    del rast, rast_db
    assert cache._stats()["held_blocks"] == 1  # rast_db only
    again = draw()
    assert not pointers(*again) & kept
    assert pointers(*again) & released
    del view, again
    assert cache._stats()["held_blocks"] == 3


@needs_cache
def test_autograd_keeps_the_blocks_it_saved(cache):
    pos, tri, uv, tex = grid_scene()
    pos.requires_grad_(True)
    rast, rast_db = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (RES, RES))
    out, _ = prerast.interpolate(uv, rast, tri)  # saves rast for its backward
    saved = pointers(rast)
    del rast, rast_db
    assert all(not pointers(t) & saved for t in draw())
    out.sum().backward()
    assert pos.grad is not None and pos.grad.abs().sum() > 0
    del out
    taken = [draw() for _ in range(4)]  # every held block of rast's size, rast's among them
    assert any(pointers(*t) & saved for t in taken)


@needs_cache
def test_a_tensor_may_die_on_another_thread(cache):
    rast, rast_db = draw()
    held = pointers(rast)
    box = [rast]
    del rast
    thread = threading.Thread(target=box.clear)
    thread.start()
    thread.join()
    assert cache._stats()["held_blocks"] == 1
    assert pointers(draw()[0]) == held


def frame(poison=None):
    """Every op's CPU outputs and gradients of a frame at 512^2 (each output of 1 MiB and more comes from the
    cache), drawn twice so that the second draws into released blocks; the cache is poisoned or turned off."""
    _output_cache._configure(limit=0 if poison is None else None, poison=bool(poison))
    results = []
    for _ in range(2):
        pos, tri, uv, tex = grid_scene(n=12, images=2)
        tex = torch.rand(1, 512, 512, 3, generator=torch.Generator().manual_seed(0))
        pos.requires_grad_(True)
        tex.requires_grad_(True)
        ctx = prerast.RasterizeCpuContext()
        rast, rast_db = prerast.rasterize(ctx, pos, tri, (RES, RES))
        texc, texd = prerast.interpolate(uv, rast, tri, rast_db=rast_db, diff_attrs="all")
        color = prerast.texture(tex, texc, texd, filter_mode="linear-mipmap-linear", max_mip_level=4)
        aa = prerast.antialias(color, rast, pos, tri)
        (aa * torch.linspace(0, 1, 3)).sum().backward()
        plain, no_db = prerast.rasterize(prerast.RasterizeCpuContext(output_db=False), pos.detach(), tri, (RES, RES))
        with prerast.DepthPeeler(ctx, pos.detach(), tri, (RES, RES)) as peeler:
            peeled = [peeler.rasterize_next_layer()[0] for _ in range(3)]
        flat = pos.detach()[0]
        ranges = torch.tensor([[0, tri.shape[0]], [tri.shape[0] // 2, tri.shape[0] // 2]], dtype=torch.int32)
        ranged, ranged_db = prerast.rasterize(ctx, flat, tri, (RES, RES), ranges=ranges)
        results = [rast, rast_db, texc, texd, color, aa, pos.grad, tex.grad, plain, no_db, ranged, ranged_db]
        results += peeled
        results = [t.detach().clone() for t in results]
    return results


def test_outputs_in_reused_memory_equal_those_in_fresh_memory(cache):
    fresh = frame()
    poisoned = frame(poison=True)
    stats = cache._stats()
    if stats["allocated"]:  # a torch whose tensors can wrap the cache's blocks
        assert stats["reused"] >= 10, stats
    for a, b in zip(fresh, poisoned):
        assert torch.equal(a, b)


@needs_cache
def test_the_bound_keeps_the_newest_released_blocks(cache):
    block = RES * RES * 4 * 4
    cache._configure(limit=3 * block)
    first, second, third = draw(), draw(), draw()
    order = [pointers(*o) for o in (first, second, third)]
    del first, second, third  # released in this order: the first pair and one block of the second are dropped
    stats = cache._stats()
    assert (stats["held_blocks"], stats["held_bytes"], stats["limit"]) == (3, 3 * block, 3 * block)
    newest = draw()
    assert pointers(*newest) == order[2]
    before = cache._stats()
    older = draw()  # the block kept of the second pair, and a new one (which may lie where a freed one did)
    assert pointers(*older) & order[1]
    after = cache._stats()
    assert (after["reused"] - before["reused"], after["allocated"] - before["allocated"]) == (1, 1)


@needs_cache
def test_empty_cache_frees_every_released_block(cache):
    in_use = cache._stats()["live_blocks"]  # outputs that other tests keep
    outputs = [draw() for _ in range(2)]
    live = draw()
    del outputs
    stats = cache._stats()
    assert stats["held_blocks"] == 4 and stats["live_blocks"] == in_use + 2
    assert prerast.empty_cache() == stats["held_bytes"] > 0
    assert cache._stats()["held_blocks"] == cache._stats()["held_bytes"] == 0
    allocated = cache._stats()["allocated"]
    draw()
    assert cache._stats()["allocated"] == allocated + 2
    del live


@needs_cache
def test_shared_pickled_and_saved_outputs(cache):
    rast, _ = draw()
    want = rast.clone()
    loaded = pickle.loads(pickle.dumps(rast))
    buffer = io.BytesIO()
    torch.save(rast, buffer)
    buffer.seek(0)
    assert torch.equal(loaded, want) and torch.equal(torch.load(buffer), want)
    held = cache._stats()["held_blocks"]
    rast.share_memory_()  # moves the data to shared memory: the block is released
    assert rast.is_shared() and torch.equal(rast, want)
    assert cache._stats()["held_blocks"] == held + 1


@needs_cache
def test_an_output_does_not_grow(cache):
    rast, _ = draw()
    rast.resize_(1, RES // 2, RES, 4)  # within its storage
    with pytest.raises(RuntimeError, match="not resizable"):
        rast.resize_(1, 2 * RES, RES, 4)


def test_fake_tensors_take_nothing_from_the_cache(cache):
    from torch._subclasses.fake_tensor import FakeTensorMode

    before = cache._stats()
    pos, tri = grid_scene()[:2]
    with FakeTensorMode() as mode:
        rast, _ = torch.ops.prerast.rasterize_fwd(mode.from_tensor(pos), mode.from_tensor(tri), 2048, 2048, None, None)
    assert rast.shape == (1, 2048, 2048, 4)
    assert cache._stats() == before


CHILD = """
import json, sys, torch, prerast
from prerast import _output_cache
sys.path.insert(0, {support!r})
from render_scene import grid_scene
pos, tri = grid_scene()[:2]
try:
    for _ in range(3):
        prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (512, 512))
    print(json.dumps(_output_cache._stats()))
except ValueError as e:
    print(json.dumps({{"ValueError": str(e)}}))
"""


@pytest.mark.parametrize("value", ["0", "24", "lots"])
def test_the_variable_sets_the_bound(value):
    support = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "support")
    env = dict(os.environ, PRERAST_CPU_OUTPUT_CACHE_MB=value)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(support=support)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if value == "lots":
        assert "PRERAST_CPU_OUTPUT_CACHE_MB='lots'" in got["ValueError"] and "rasterize" in got["ValueError"]
    elif value == "0":
        assert (got["limit"], got["allocated"], got["reused"], got["held_blocks"]) == (0, 0, 0, 0)
    elif got["allocated"]:  # a torch the cache serves
        assert got["limit"] == 24 * MIB and got["reused"] == 4 and got["held_blocks"] == 2, got
