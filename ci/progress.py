"""Progress for long builds: every step says what it is and how long it has run, and a quiet command gets a
heartbeat instead of silence. The full output of each command goes to a log file."""
import os
import subprocess
import sys
import threading
import time

HEARTBEAT_S = 30
_prefix = ["prerast"]  # the name in front of log lines: the cell being built, while one is


def clock(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def log(msg, prefix=None):
    print(f"[{prefix or _prefix[0]} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class CommandFailed(RuntimeError):
    """A command of a build step exited non-zero; the message names the step, the command and its log."""


def run_logged(cmd, log_path, label, env=None, cwd=None, show=None, prefix=None):
    """Run `cmd` with its output appended to `log_path`. Lines for which show(line) is true are echoed (a
    compiler's [3/7] lines, say); when nothing was echoed for HEARTBEAT_S seconds, a heartbeat line says the step
    is still running and how long it has taken. Raises CommandFailed with the log's tail on failure."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    start = time.time()
    last = [start]
    done = threading.Event()

    def heartbeat():
        while not done.wait(min(5, HEARTBEAT_S)):
            if time.time() - last[0] >= HEARTBEAT_S:
                log(f"  {label}: still running ({clock(time.time() - start)})", prefix)
                last[0] = time.time()

    with open(log_path, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                                errors="replace")
        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            for line in proc.stdout:
                out.write(line)
                if show and show(line):
                    log(f"  {label}: {line.strip()[:150]} ({clock(time.time() - start)})", prefix)
                    last[0] = time.time()
            rc = proc.wait()
        finally:
            done.set()
            beat.join()
    if rc != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-40:])
        raise CommandFailed(f"{label} failed (exit {rc}) after {clock(time.time() - start)}: {' '.join(cmd)}\n"
                            f"--- last lines of {log_path} ---\n{tail}")
    return time.time() - start


class Steps:
    """Numbered steps of one cell's build: `with steps("build"):` logs start, end and elapsed time."""

    def __init__(self, names, prefix):
        self.names, self.prefix, self.start, self.times = list(names), prefix, time.time(), {}
        _prefix[0] = prefix

    def __call__(self, name):
        return _Step(self, name)


class _Step:
    def __init__(self, steps, name):
        self.steps, self.name = steps, name

    def __enter__(self):
        s = self.steps
        n = s.names.index(self.name) + 1 if self.name in s.names else "-"
        log(f"step {n}/{len(s.names)} {self.name} (cell elapsed {clock(time.time() - s.start)})", s.prefix)
        self.t0 = time.time()
        return self

    def __exit__(self, kind, value, tb):
        took = time.time() - self.t0
        self.steps.times[self.name] = took
        state = "done" if kind is None else "FAILED"
        log(f"  {self.name} {state} in {clock(took)}", self.steps.prefix)
        return False


def echo_compiler(line):
    """Lines worth echoing from a verbose pip/ninja build: ninja's [n/m] progress and errors."""
    s = line.lstrip()
    return s.startswith("[") and "/" in s[:12] or " error" in s.lower()[:200]


if __name__ == "__main__":
    sys.exit("ci/progress.py is a library; see python -m ci --help")
