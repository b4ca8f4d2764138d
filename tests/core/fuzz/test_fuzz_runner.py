"""The fuzz runner survives what it is there to catch: a case that crashes, aborts, hangs or exits is recorded as
a failure by name, and a fresh child goes on with the next case; an error line of a tool the child runs under
(compute-sanitizer) fails the case in progress."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import fuzz_runner  # noqa: E402


def test_runner_records_crashes_and_hangs_and_goes_on():
    results, extra = fuzz_runner.run(prefix=["env"], case_timeout=2.0, cases="fuzz_selftest", env=dict(os.environ))
    assert list(results) == ["ok", "segfault", "fails", "abort", "hang", "exits", "tool_error", "last"], results
    assert results["ok"] is None and results["last"] is None
    assert results["fails"] == "wrong"
    assert results["segfault"].startswith("crash (exit status -11)"), results["segfault"]
    assert results["abort"].startswith("crash (exit status -6)"), results["abort"]
    assert results["hang"].startswith("hang (no result within 2 s)"), results["hang"]
    assert results["exits"].startswith("crash (exit status 3)"), results["exits"]
    assert "Invalid __global__ read" in results["tool_error"], results["tool_error"]
    assert not extra, extra
