"""Cases that crash, abort, hang or break the process, for the runner's own test (test_fuzz_runner.py); no torch."""

import os
import signal
import time


class Case:
    def __init__(self, name, fn):
        self.name, self.fn = name, fn


def _exit_now():
    os._exit(3)


def _report():
    """What compute-sanitizer prints for a bad access."""
    print("========= Invalid __global__ read of size 4 bytes", flush=True)


CASES = [
    Case("ok", lambda: None),
    Case("segfault", lambda: os.kill(os.getpid(), signal.SIGSEGV)),
    Case("fails", lambda: "wrong"),
    Case("abort", os.abort),
    Case("hang", lambda: time.sleep(600)),
    Case("exits", _exit_now),
    Case("tool_error", _report),
    Case("last", lambda: None),
]


def cases(device, families=None, skip_device_asserts=False):
    return CASES


def run_case(case, device):
    return case.fn(), "returned", False
