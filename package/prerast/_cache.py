"""The build cache: one folder per build holding a plain loadable plugin and its _build_info.json, so that a later
process, or another image the folder was copied into, loads it directly with no compiler, nvcc, ninja or
torch.utils.cpp_extension.

Layout of the cache folder (PRERAST_CACHE_DIR; by default $XDG_CACHE_HOME/prerast or ~/.cache/prerast on Linux,
~/Library/Caches/prerast on macOS, %LOCALAPPDATA%\\prerast\\Cache on Windows: prerast_meta.platforms):
    <key>/                    a finished build: _C.abi3.so (_C.pyd on Windows), _build_info.json, build.log. It
                              appears whole, by renaming a finished .partial folder, so a reader never sees half
                              of one.
    <key>.lock                locked while a process builds <key> (flock(2) on Unix, a byte-range lock with
                              msvcrt.locking on Windows); it holds the builder's pid. The OS drops the lock when
                              the holder exits in any way, so a killed build cannot leave it held.
    .partial-<key>-<pid>/     a build in progress; the next build (of any key) removes it if its builder died.

Looking up a finished build writes nothing, so a copied cache works on a read-only file system. Standard
library only.

The cache holds native code that prerast loads into every process that reads it, so it is trusted only when
nobody else can write it: the folder and each entry (and the files in it) must belong to the user or to root
and must not be writable by group or others, save a sticky folder (like /tmp) whose entries are the user's.
Windows has no such mode bits (its access lists decide, and the default folder is in the user's own profile), so
there the check is left to them.

Why not the `filelock` package, although torch depends on it: what this lock must do (a waiter that never
erases the holder's pid, a lock file that stays in place, polling that reports whom it waits for) differs across
its releases (3.x opens the file with O_TRUNC and deletes it on release on Windows; 4.x adds fallbacks of its
own), while the two system calls it wraps are in the standard library.
"""

import os
import re
import shutil
import stat
import sys
import time

from prerast_meta import compat, platforms

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

ENV_DIR = "PRERAST_CACHE_DIR"


def cache_dir():
    if os.environ.get(ENV_DIR):
        return os.path.abspath(os.path.expanduser(os.environ[ENV_DIR]))
    return platforms.default_cache_dir()


def _user(uid):
    try:
        import pwd  # Unix only

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def untrusted(path, folder_of_entries=False, uid=None):
    """Why the cache folder or entry at path may have been written by someone else (None when it cannot).
    folder_of_entries: path is the cache folder, which may be writable by others when it is sticky. On Windows,
    whose st_mode carries no owner's or group's bits, nothing is checked (see the module's note)."""
    if not platforms.current().posix_permissions:
        return None
    uid = os.getuid() if uid is None else uid
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{path} cannot be examined ({e.strerror})", f"check that you may read '{path}'"
    if st.st_uid not in (uid, 0):
        return (
            f"{path} is owned by {_user(st.st_uid)} (uid {st.st_uid}), not by you ({_user(uid)}, uid {uid}) or "
            f"root, so its owner can put code in it that your Python would run",
            f"delete it (rm -rf '{path}'), or as root hand it over: chown -R {_user(uid)} '{path}'",
        )
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    sticky = folder_of_entries and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if writable and not sticky:
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if writable & bit)
        fix = f"chmod go-w '{path}'"
        if folder_of_entries:
            fix += f"   (or, for a folder users share, make it sticky like /tmp: chmod +t '{path}')"
        elif stat.S_ISDIR(st.st_mode):
            fix = f"chmod -R go-w '{path}'"
        return (
            f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}), so they can put code in it "
            f"that your Python would run",
            fix,
        )
    return None


def entry_untrusted(root, entry, files=()):
    """(why, fix) when the entry, its cache folder or one of its files could have been written by another user;
    None when only the user (or root) could have."""
    for path, is_root in [(root, True), (entry, False)] + [(os.path.join(entry, f), False) for f in files]:
        found = untrusted(path, is_root)
        if found is not None:
            return found
    return None


def drop_group_write(folder):
    """Make a freshly built entry writable by its owner only, whatever the umask, so that it is trusted."""
    for parent, _dirs, files in os.walk(folder):
        for name in [parent] + [os.path.join(parent, n) for n in files]:
            mode = stat.S_IMODE(os.lstat(name).st_mode)
            if mode & 0o022 and not os.path.islink(name):
                os.chmod(name, mode & ~0o022)


def _token(text):
    return re.sub(r"[^A-Za-z0-9.+]", "_", text)


def key_prefix(prerast_version, torch_version, cuda_version):
    """The part of a key that every build usable here shares."""
    cuda = compat.compute_platform(cuda_version)
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
    found = [
        os.path.join(root, n)
        for n in names
        if n.startswith(prefix)
        and not n.endswith(".lock")
        and (source_hash is None or n.endswith(f"_src-{source_hash}"))
        and os.path.isdir(os.path.join(root, n))
    ]
    return sorted(found, key=os.path.getmtime, reverse=True)


# Windows locks a byte range, and a locked range cannot be read by another process: the lock is taken on one
# byte far past the pid the holder writes at the start, so waiters can read it.
LOCK_OFFSET = 1 << 20


def _try_lock(fd):
    """Take the exclusive lock on fd without waiting; False when another holds it."""
    if sys.platform == "win32":
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd):
    if sys.platform == "win32":
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _alive(pid):
    """Whether process pid exists. (On Windows os.kill(pid, 0) would send it Ctrl+C, so it is asked there.)"""
    if sys.platform == "win32":
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 5  # ERROR_ACCESS_DENIED: alive, someone else's
        code = ctypes.c_ulong()
        ok = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return bool(ok) and code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


class BuildLock:
    """An exclusive lock on <key>.lock. Waiting polls, so that a caller can report whom it waits for."""

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
        return pid if _alive(pid) else None

    def acquire(self, timeout=None, on_wait=None, poll=0.1):
        """Take the lock; returns False if timeout (seconds) passed first. on_wait(holder_pid) is called once
        when the lock is busy."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited by the compiler processes
        deadline = None if timeout is None else time.monotonic() + timeout
        reported, busy_since = False, None
        while not _try_lock(fd):
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
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return True

    def release(self):
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # so that the next waiter never reads our pid as its holder's
            _unlock(self.fd)
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


def remove_stale_partials(root, but=None):
    """Unfinished builds of any key whose lock nobody holds: what killed builds, a full disk or a power cut left.
    (A live build holds its key's lock, so its folder is never touched.)"""
    keys = {n[len(".partial-") :].rsplit("-", 1)[0] for n in os.listdir(root) if n.startswith(".partial-")}
    for key in keys - {but}:
        lock = BuildLock(os.path.join(root, key + ".lock"))
        try:
            if not lock.acquire(timeout=0):
                continue
        except OSError:
            continue
        try:
            remove_partials(root, key)
        finally:
            lock.release()


def make_root(root):
    """Create the cache folder unless it exists. Racing first uses may both find it missing: the one that
    loses the race finds it made, which is what it wanted."""
    if os.path.isdir(root):
        return
    try:
        os.makedirs(root)
    except FileExistsError:
        if not os.path.isdir(root):
            raise
        return
    # A group-writable umask must not make the new cache untrusted; only the folder itself is ours to fix:
    # a racer may already be building inside it.
    os.chmod(root, stat.S_IMODE(os.stat(root).st_mode) & ~0o022)


def build_once(root, key, build_into, is_usable, on_wait=None, explain=None):
    """The finished build `root/key`, making it with build_into(folder) unless it exists. Concurrent callers
    build once: the others wait for the lock, then find the finished build. Returns (path, built_here).

    The build goes into a temporary folder beside the entry (same file system), which must pass is_usable
    before it is renamed into place: an interrupted or broken build never leaves an entry behind. explain(folder)
    says why a build did not pass."""
    entry = os.path.join(root, key)
    if is_usable(entry):
        return entry, False
    make_root(root)
    lock = BuildLock(entry + ".lock")
    lock.acquire(on_wait=on_wait)
    try:
        if is_usable(entry):  # built by the process we waited for
            return entry, False
        remove_partials(root, key)
        remove_stale_partials(root, but=key)
        partial = os.path.join(root, f".partial-{key}-{os.getpid()}")
        os.makedirs(partial)
        try:
            build_into(partial)
            drop_group_write(partial)
            if not is_usable(partial):
                why = explain(partial) if explain else None
                raise RuntimeError(
                    f"the build in {partial} finished but did not pass its checks; nothing was kept"
                    + (f":\n{why}" if why else "")
                )
            if os.path.isdir(entry):  # an unusable leftover, e.g. half of a copied cache
                shutil.rmtree(entry)
            os.rename(partial, entry)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return entry, True
    finally:
        lock.release()
