"""How an out-of-memory failure must reach a caller: the one rule that the fuzz judge (tests/core/fuzz) and the
out-of-memory tests apply, and the calls that make prerast run out of memory on a CPU, for a child process.

A public function raises torch.OutOfMemoryError. A raw torch.ops.prerast op raises it too under the classic
binding; under the stable binding, which can raise only ValueError, IndexError and RuntimeError, it raises a
RuntimeError whose message carries OUT_OF_MEMORY_MARKER. Either way the message names the op."""

from prerast._constants import OUT_OF_MEMORY_MARKER


def is_out_of_memory(kind, message):
    """Whether an exception (its type's name and its message) reports memory that could not be had."""
    return kind == "OutOfMemoryError" or (kind == "RuntimeError" and OUT_OF_MEMORY_MARKER in message)


def out_of_memory_problem(kind, message, words, public):
    """What is wrong with an out-of-memory failure as it reached the caller (None: nothing). words: what its
    message must name one of (the op); public: raised by a public function, not a raw op."""
    if not is_out_of_memory(kind, message):
        return f"not an out-of-memory error: {kind}: {message[:300]}"
    if public and kind != "OutOfMemoryError":
        return f"a public function raised {kind}, not torch.OutOfMemoryError: {message[:300]}"
    if not any(w in message for w in words):
        return f"the message names none of {list(words)}: {message[:300]}"
    return None


# A child's calls that run out of memory on the CPU, each under an address-space limit a little above what the
# process holds, so that an allocation fails for real (torch's allocator, the kernel library's std::bad_alloc)
# without the machine running short. `ops` is torch.ops.prerast; `public` (optional) the prerast module. Prints
# {name: [exception type, message] or ["returned", ""]} as JSON.
CHILD = r"""
import json, resource, sys
import torch

torch.set_num_threads(1)  # no pool thread (stack, malloc arena) is started under the limit
ops = torch.ops.prerast


def held():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))


def limited(extra, call):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (held() + extra, hard))
    try:
        call()
        return ["returned", ""]
    except Exception as e:
        return [type(e).__name__, str(e)]
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run(ops, public=None):
    # 3000 triangles over the whole image: the CPU rasterizer's bins (a triangle per tile: ~200 MB) outgrow the
    # outputs (32 MB), so the kernel library's own allocation fails, inside the library. Before any other
    # rasterize call: the library keeps its scratch from call to call.
    n = 3000
    pos = torch.tensor([[-1.0, -1.0, 0.5, 1.0], [3.0, -1.0, 0.5, 1.0], [-1.0, 3.0, 0.5, 1.0]]).repeat(n, 1)[None]
    tri = torch.arange(3 * n, dtype=torch.int32).view(n, 3)
    one = pos[:, :3].contiguous(), tri[:1].contiguous()
    calls = {
        "raw scratch": (64 << 20, lambda: ops.rasterize_fwd(pos, tri, 1024, 1024, None, None, True, True)),
        "raw outputs": (16 << 20, lambda: ops.rasterize_fwd(*one, 2048, 2048, None, None, True, True)),
        "raw bad input": (None, lambda: ops.rasterize_fwd(*one, 0, 8, None, None, True, True)),
    }
    if public is not None:
        ctx = public.RasterizeCpuContext()
        calls["public scratch"] = (64 << 20, lambda: public.rasterize(ctx, pos, tri, (1024, 1024)))
        calls["public outputs"] = (16 << 20, lambda: public.rasterize(ctx, *one, (2048, 2048)))
        calls["public interpolate outputs"] = (
            16 << 20,
            lambda: public.interpolate(torch.zeros(3, 64), torch.zeros(1, 512, 512, 4), one[1]),
        )
    return {name: limited(extra, call) if extra else limited(1 << 40, call) for name, (extra, call) in calls.items()}
"""
