"""The build cache: one folder per build holding a plain loadable plugin and its _build_info.json, so that a later
process, or another image the folder was copied into, loads it directly with no compiler, nvcc, ninja or
torch.utils.cpp_extension.

Layout of the cache folder (PRERAST_CACHE_DIR, default $XDG_CACHE_HOME/prerast or ~/.cache/prerast):
    <key>/                    a finished build: _C.abi3.so, _build_info.json, build.log. It appears whole, by
                              renaming a finished .partial folder, so a reader never sees half of one.
    <key>.lock                held with flock(2) while a process builds <key>. The kernel drops the lock when
                              the holder exits in any way, so a killed build cannot leave it held.
    .partial-<key>-<pid>/     a build in progress; the next builder of <key> removes it if its builder died.

Looking up a finished build writes nothing, so a copied cache works on a read-only file system. Standard
library only.
"""
import fcntl
import os
import re
import shutil
import time

ENV_DIR = "PRERAST_CACHE_DIR"


def cache_dir():
    if os.environ.get(ENV_DIR):
        return os.path.abspath(os.path.expanduser(os.environ[ENV_DIR]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "prerast")


def _token(text):
    return re.sub(r"[^A-Za-z0-9.+]", "_", text)


def key_prefix(prerast_version, torch_version, cuda_version):
    """The part of a key that every build usable here shares."""
    cuda = "cu" + cuda_version.replace(".", "") if cuda_version else "cpu"
    return f"prerast-{_token(prerast_version)}_torch-{_token(torch_version)}_{cuda}_"


def make_key(prerast_version, torch_version, cuda_version, archs, source_hash):
    """'prerast-0.1.0_torch-2.14.1+cu130_cu130_arch-8.0.9.0+PTX_src-<hash>': readable, one folder name."""
    arch = "arch-" + ".".join(_token(a) for a in archs) if archs else "noarch"
    return key_prefix(prerast_version, torch_version, cuda_version) + f"{arch}_src-{source_hash}"


def entries(root, prefix, source_hash=None):
    """Finished builds in root whose key starts with prefix (and names source_hash, when given), newest first."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = [os.path.join(root, n) for n in names
             if n.startswith(prefix) and not n.endswith(".lock")
             and (source_hash is None or n.endswith(f"_src-{source_hash}"))
             and os.path.isdir(os.path.join(root, n))]
    return sorted(found, key=os.path.getmtime, reverse=True)


class BuildLock:
    """An exclusive flock on <key>.lock. Waiting polls, so that a caller can report whom it waits for."""

    def __init__(self, path):
        self.path = path
        self.fd = None

    def holder(self):
        """The pid the holder wrote, if that process is alive."""
        try:
            with open(self.path) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except PermissionError:  # alive, someone else's
            pass
        except OSError:
            return None
        return pid

    def acquire(self, timeout=None, on_wait=None, poll=0.1):
        """Take the lock; returns False if timeout (seconds) passed first. on_wait(holder_pid) is called once
        when the lock is busy."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited by the compiler processes
        deadline = None if timeout is None else time.monotonic() + timeout
        reported, busy_since = False, None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # The holder writes its pid just after it takes the lock (or a dead holder's pid is still
                # there), so give it a second to appear before reporting whom we wait for.
                busy_since = busy_since or time.monotonic()
                if not reported and on_wait:
                    pid = self.holder()
                    if pid is not None or time.monotonic() - busy_since >= 1.0:
                        on_wait(pid)
                        reported = True
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return True

    def release(self):
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # so that the next waiter never reads our pid as its holder's
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def remove_partials(root, key):
    """Unfinished builds of key. The caller holds key's lock, so no live process is writing them: each was left
    by a build that was killed."""
    for name in os.listdir(root):
        if name.startswith(f".partial-{key}-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def build_once(root, key, build_into, is_usable, on_wait=None):
    """The finished build `root/key`, making it with build_into(folder) unless it exists. Concurrent callers
    build once: the others wait for the lock, then find the finished build. Returns (path, built_here)."""
    entry = os.path.join(root, key)
    if is_usable(entry):
        return entry, False
    os.makedirs(root, exist_ok=True)
    lock = BuildLock(entry + ".lock")
    lock.acquire(on_wait=on_wait)
    try:
        if is_usable(entry):  # built by the process we waited for
            return entry, False
        remove_partials(root, key)
        partial = os.path.join(root, f".partial-{key}-{os.getpid()}")
        os.makedirs(partial)
        try:
            build_into(partial)
            if os.path.isdir(entry):  # an unusable leftover, e.g. half of a copied cache
                shutil.rmtree(entry)
            os.rename(partial, entry)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return entry, True
    finally:
        lock.release()
