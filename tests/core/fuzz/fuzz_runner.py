"""Crash-resilient runner of the fuzz cases (fuzz_cases.py).

A child process imports torch and prerast once and runs the cases one after another, printing a line before and
after each. When the child dies (a signal, an abort, an exit in C++) or a case runs past its time limit, the case in
progress is recorded as a crash or a hang and a fresh child continues with the next case. A case that leaves the CUDA
context unusable (a device-side assert, expected where an index check fires on a GPU) also ends its child.

    python tests/core/fuzz/fuzz_runner.py --device cuda [--families rasterize,texture] [--prefix "compute-sanitizer
        --tool memcheck --error-exitcode 9"] [--skip-device-asserts]

prints every failing case and exits with 1 if there is one. Under a command prefix, output lines of the tool that
report an error (compute-sanitizer's '========= ' lines) fail the case in progress.
"""

import argparse
import collections
import faulthandler
import importlib
import json
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

TAG = "@@FUZZ "
RESTART = 75  # the child's exit status after a case that left CUDA unusable
TIMEOUT = object()


def _child(args):
    faulthandler.enable()  # a crash prints the Python stack to stderr, which the report quotes
    module = importlib.import_module(args.cases)  # fuzz_cases imports torch and prerast
    cases = module.cases(args.device, args.families, args.skip_device_asserts)
    if args.shuffle:  # any first part of the run samples every family
        random.Random(0).shuffle(cases)
    emit = lambda **kw: print(TAG + json.dumps(kw), flush=True)  # noqa: E731
    emit(event="ready", total=len(cases))
    for i in range(args.start, len(cases)):
        case = cases[i]
        emit(event="start", index=i, name=case.name)
        problem, outcome, broken = module.run_case(case, args.device)
        emit(event="end", index=i, name=case.name, problem=problem, outcome=outcome)
        if broken:
            sys.stdout.flush()
            os._exit(RESTART)
    emit(event="done")


def _reader(stream, lines):
    for line in stream:
        lines.put(line)
    lines.put(None)


def _tool_error(line):
    """A line of compute-sanitizer (or a like tool) that reports an error."""
    if not line.startswith("========="):
        return False
    text = line.lower()
    return "error summary: 0 errors" not in text and any(
        w in text for w in ("invalid", "error", "out of bounds", "misaligned", "leak", "hazard")
    )


def run(
    device="cpu",
    families=None,
    prefix=(),
    case_timeout=60.0,
    start_timeout=300.0,
    skip_device_asserts=False,
    env=None,
    outcomes=None,
    cases="fuzz_cases",
    budget=None,
):
    """Runs the cases; returns ({case name: problem or None}, [failures not tied to a case]). outcomes, a dict,
    receives {case name: 'returned' or the type of the exception raised}. cases names the module that makes and
    judges the cases (cases() and run_case(), as fuzz_cases). With a budget (seconds), the cases run in a seeded
    random order and no case starts after the budget is spent: the cases left are not in the results."""
    results, extra = {}, []
    start, total = 0, None
    script = os.path.abspath(__file__)
    stop = time.monotonic() + budget if budget else None
    while (total is None or start < total) and not (stop and time.monotonic() > stop):
        first = start
        cmd = [*prefix, sys.executable, script, "--child", "--cases", cases, "--device", device, "--start", str(start)]
        if families:
            cmd += ["--families", ",".join(families)]
        if skip_device_asserts:
            cmd.append("--skip-device-asserts")
        if budget:
            cmd.append("--shuffle")
        with tempfile.TemporaryFile(mode="w+") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace", env=env, start_new_session=True
            )
            lines = queue.Queue()
            threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
            current, tool_lines, finished = None, [], False
            deadline = time.monotonic() + start_timeout
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    line = TIMEOUT
                if line is None or line is TIMEOUT:
                    break
                if not line.startswith(TAG):
                    if _tool_error(line):
                        if current is not None:
                            tool_lines.append(line.strip())
                        else:
                            extra.append(f"reported between cases, before case {start}: {line.strip()}")
                    continue
                msg = json.loads(line[len(TAG) :])
                if msg["event"] == "ready":
                    total = msg["total"]
                elif msg["event"] == "start":
                    current, tool_lines = msg, []
                    deadline = time.monotonic() + case_timeout
                elif msg["event"] == "end":
                    problem = msg["problem"]
                    if tool_lines:
                        problem = (problem + "; " if problem else "") + " | ".join(tool_lines[:5])
                    results[msg["name"]] = problem
                    if outcomes is not None:
                        outcomes[msg["name"]] = msg["outcome"]
                    start, current = msg["index"] + 1, None
                    if stop and time.monotonic() > stop:
                        os.killpg(proc.pid, signal.SIGKILL)
                        finished = True
                        break
                elif msg["event"] == "done":
                    finished = True
            hung = line is TIMEOUT
            if hung:
                os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            err.seek(0)
            stderr = err.read()[-1500:].strip()
        if current is not None:  # died or hung inside a case
            what = f"hang (no result within {case_timeout:.0f} s)" if hung else f"crash (exit status {code})"
            results[current["name"]] = f"{what}; stderr: {stderr}" + (f"; tool: {tool_lines[:5]}" if tool_lines else "")
            start = current["index"] + 1
        elif total is None:  # the child never started its cases
            extra.append(f"the fuzz child did not start (exit status {code}, hung: {hung}): {stderr}")
            break
        elif finished:
            if code != 0 and not (stop and time.monotonic() > stop):
                extra.append(f"the child exited with status {code} after its last case: {stderr}")
            break
        elif code != RESTART or start == first:  # died between two cases, or made no progress
            extra.append(f"the child stopped before case {start} (exit status {code}, hung: {hung}): {stderr}")
            if start == first:
                break
    return results, extra


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--families", type=lambda s: [f for f in s.split(",") if f], default=None)
    p.add_argument("--prefix", type=shlex.split, default=[], help="command line to run the child under")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one case may take")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds: run the cases in a seeded random order and start none after this long",
    )
    p.add_argument(
        "--skip-device-asserts",
        action="store_true",
        help="leave out the cases that end in a device-side assert on a GPU (each needs a fresh process)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", default="fuzz_cases", help=argparse.SUPPRESS)
    p.add_argument("--shuffle", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args)
    t0 = time.monotonic()
    outcomes = {}
    results, extra = run(
        args.device,
        args.families,
        args.prefix,
        args.timeout,
        max(300.0, 10 * args.timeout),
        args.skip_device_asserts,
        outcomes=outcomes,
        budget=args.budget,
    )
    failed = {name: problem for name, problem in results.items() if problem}
    for name, problem in failed.items():
        print(f"FAIL {name}: {problem}")
    for problem in extra:
        print(f"FAIL {problem}")
    print("outcomes:", dict(collections.Counter(outcomes.values()).most_common()))
    print(f"{len(results)} cases on {args.device}, {len(failed) + len(extra)} failures, {time.monotonic() - t0:.1f} s")
    return 1 if failed or extra else 0


if __name__ == "__main__":
    sys.exit(main())
