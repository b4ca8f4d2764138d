"""Progress of a long command, such as a compile: its whole output goes to a log file, the lines worth showing
are echoed, and while the command is quiet a heartbeat line says that it still runs and for how long.

Standard library only and free of prerast imports: the wheel builder (ci/builder/progress.py) and the first-use build
share it, and importing it loads no plugin.
"""

import os
import re
import subprocess
import threading
import time

HEARTBEAT_S = 30


def clock(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def run_logged(cmd, log_path, label, say, show=None, env=None, cwd=None, heartbeat_s=None):
    """Run `cmd`, appending its output to `log_path`. For each line, show(line) returns the text to echo or None;
    say(text) prints it. When nothing was said for heartbeat_s seconds (default HEARTBEAT_S), a heartbeat is.
    Returns (exit code, seconds)."""
    heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    # A Python child writing to a pipe buffers 8 KB at a time: its lines would arrive late, in bursts.
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    start = time.time()
    last = [start]
    done = threading.Event()

    def heartbeat():
        while not done.wait(min(5, heartbeat_s)):
            if time.time() - last[0] >= heartbeat_s:
                say(f"{label}: still running ({clock(time.time() - start)})")
                last[0] = time.time()

    with open(log_path, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
            errors="replace",
        )
        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            for line in proc.stdout:
                out.write(line)
                text = show(line) if show else None
                if text:
                    say(f"{label}: {text} ({clock(time.time() - start)})")
                    last[0] = time.time()
            rc = proc.wait()
        finally:
            done.set()
            beat.join()
    return rc, time.time() - start


_SOURCE = re.compile(r"\s-c\s+(\S+\.(?:cpp|cc|cxx|cu|c))(?:\s|$)")
_COUNTER = re.compile(r"\s*\[(\d+/\d+)\]")


def compile_step(line):
    """'compiling csrc/core/rasterize.cpp [3/7]' for a compiler command in a build's output (ninja's or
    setuptools'), 'linking _C.abi3.so' for the link, else None."""
    counter = _COUNTER.match(line)
    suffix = f" [{counter.group(1)}]" if counter else ""
    source = _SOURCE.search(line)
    if source:
        path = source.group(1)
        return "compiling " + (path[path.rindex("csrc/") :] if "csrc/" in path else os.path.basename(path)) + suffix
    if " -shared " in line:
        target = re.search(r"\s-o\s+(\S+)", line)
        return "linking " + (os.path.basename(target.group(1)) if target else "the plugin") + suffix
    return None
