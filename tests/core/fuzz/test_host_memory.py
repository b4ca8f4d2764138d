"""A CPU request that cannot fit in memory fails at once with a clear error that says what it needs
(torch.OutOfMemoryError, as tests/support/out_of_memory.py says), not with std::bad_alloc or the OOM killer. Run in a child process, which must neither take long nor grow."""

import json
import os
import subprocess
import sys

import pytest

from out_of_memory import out_of_memory_problem

CHILD = r"""
import json, math, resource, time
import torch, prerast
available = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable:"))
image = 32768 * 32768 * 4 * 4 * 2  # rast and rast_db of one 32768 x 32768 image
n = max(8, math.ceil(2 * available / image))  # at least twice what the machine has
pos = torch.tensor([[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]]).expand(n, 3, 4).contiguous()
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
ctx = prerast.RasterizeCpuContext()
calls = {
    "rasterize": lambda: prerast.rasterize(ctx, pos, tri, (32768, 32768)),
    "raw rasterize_fwd": lambda: torch.ops.prerast.rasterize_fwd(pos, tri, 32768, 32768, None, None, True),
    "DepthPeeler": lambda: prerast.DepthPeeler(ctx, pos, tri, (32768, 32768)).__enter__().rasterize_next_layer(),
    "interpolate": lambda: prerast.interpolate(torch.zeros(0, 2**40), torch.zeros(1, 1, 1, 4), tri[:0]),
}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {}
for name, call in calls.items():
    start = time.monotonic()
    try:
        call()
        out[name] = ["returned", "", 0.0]
    except Exception as e:
        out[name] = [type(e).__name__, str(e), time.monotonic() - start]
out["grown_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads MemAvailable from /proc/meminfo")
def test_request_that_cannot_fit_fails_before_allocating():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    grown = out.pop("grown_kib")
    for name, (kind, message, seconds) in out.items():
        op = "interpolate" if name == "interpolate" else "rasterize"
        assert out_of_memory_problem(kind, message, [op], public=not name.startswith("raw")) is None, name
        assert message.startswith(f"{op}: the outputs need ") and "GiB" in message and "available" in message, message
        assert "split the batch" in message, message
        assert seconds < 2.0, f"{name} took {seconds:.1f} s to refuse"
    assert grown < 256 * 1024, f"the process grew by {grown // 1024} MiB while refusing"
