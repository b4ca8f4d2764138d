"""The fuzz suite (fuzz_cases.py): every op, public and raw, with thousands of bad and extreme inputs, run by the
crash-resilient runner (fuzz_runner.py): one child process per op family, replaced only when a case crashes or
hangs. A failing test lists its failing cases by name."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fuzz_cases  # noqa: E402

# Imported to register their families.
import fuzz_raster  # noqa: E402,F401
import fuzz_runner  # noqa: E402
import fuzz_shade  # noqa: E402,F401
import fuzz_texture  # noqa: E402,F401

pytestmark = pytest.mark.slow  # thousands of cases, about 50 s on 2 cores


@pytest.mark.parametrize("family", list(fuzz_cases.FAMILIES))
def test_fuzz(family, device):
    results, extra = fuzz_runner.run(device, [family], env=dict(os.environ))
    assert results, f"no {family} case ran: {extra}"
    failed = [f"{name}: {problem}" for name, problem in results.items() if problem]
    assert not failed and not extra, f"{len(failed)} of {len(results)} cases failed:\n" + "\n".join(failed + extra)
