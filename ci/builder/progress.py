"""Progress for long builds: every step says what it is and how long it has run, and a quiet command gets a
heartbeat instead of silence. The full output of each command goes to a log file."""

import sys
import time

# The runner is shared with the first-use build of the package (prerast_meta.progress).
from prerast_meta import progress as _shared  # noqa: E402

clock = _shared.clock
HEARTBEAT_S = _shared.HEARTBEAT_S
_prefix = ["prerast"]  # the name in front of log lines: the cell being built, while one is


def log(msg, prefix=None):
    print(f"[{prefix or _prefix[0]} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class CommandFailed(RuntimeError):
    """A command of a build step exited non-zero; the message names the step, the command and its log."""


def run_logged(cmd, log_path, label, env=None, cwd=None, show=None, prefix=None):
    """Run `cmd` with its output appended to `log_path`. Lines for which show(line) is true are echoed (a
    compiler's [3/7] lines, say); when nothing was echoed for HEARTBEAT_S seconds, a heartbeat line says the step
    is still running and how long it has taken. Raises CommandFailed with the log's tail on failure."""
    rc, took = _shared.run_logged(
        cmd,
        log_path,
        label,
        lambda text: log("  " + text, prefix),
        show=lambda line: line.strip()[:150] if show and show(line) else None,
        env=env,
        cwd=cwd,
        heartbeat_s=HEARTBEAT_S,
    )
    if rc != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-40:])
        raise CommandFailed(
            f"{label} failed (exit {rc}) after {clock(took)}: {' '.join(cmd)}\n--- last lines of {log_path} ---\n{tail}"
        )
    return took


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
    sys.exit("ci/builder/progress.py is a library; see python -m ci --help")
