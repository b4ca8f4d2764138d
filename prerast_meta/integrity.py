"""Is a file the one that was built, and is it for this machine? Checked before a library is handed to the dynamic
loader, so that a copy cut short, a flipped bit or a binary for another architecture becomes an error message
instead of a SIGBUS or SIGSEGV in dlopen.

The build stamps each library's size and SHA-256 into _build_info.json ("libraries"); `problem` compares a file
with its stamp: size first (a truncated copy is found without reading it), then the ELF header against the
running interpreter's (class, byte order, machine; a Mach-O or PE file is foreign), then the hash. Standard
library only: setup.py loads this file by path to stamp what it built.
"""
import hashlib
import os
import stat
import struct
import sys

CHUNK = 1 << 20
ELF_MAGIC = b"\x7fELF"
# Other executable formats, named in the message when one is found where an ELF library belongs.
FOREIGN_MAGIC = {
    b"\xcf\xfa\xed\xfe": "a Mach-O (macOS) binary", b"\xce\xfa\xed\xfe": "a Mach-O (macOS) binary",
    b"\xfe\xed\xfa\xcf": "a Mach-O (macOS) binary", b"\xfe\xed\xfa\xce": "a Mach-O (macOS) binary",
    b"\xca\xfe\xba\xbe": "a universal Mach-O (macOS) binary", b"MZ": "a Windows (PE) binary",
}
ELF_CLASS = {1: "32-bit", 2: "64-bit"}
ELF_DATA = {1: "little-endian", 2: "big-endian"}
# e_machine values of the architectures one is likely to meet (the ELF specification and its processor supplements).
ELF_MACHINE = {3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390", 40: "ARM", 62: "x86-64",
               183: "AArch64", 243: "RISC-V", 258: "LoongArch"}


def digest(path):
    """(size, sha256 hex) of a file, read in chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def stamp(directory, names):
    """{name: {"size", "sha256"}} for the files `names` in directory: what _build_info.json records."""
    found = {}
    for name in names:
        size, sha = digest(os.path.join(directory, name))
        found[name] = {"size": size, "sha256": sha}
    return found


def elf_header(head):
    """(class, byte order, machine) of an ELF file's first 20 bytes, or None when they are no ELF header."""
    if len(head) < 20 or head[:4] != ELF_MAGIC or head[5] not in (1, 2):
        return None
    machine = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)[0]
    return head[4], head[5], machine


def describe_elf(header):
    cls, data, machine = header
    return (f"an ELF {ELF_CLASS.get(cls, f'class-{cls}')} {ELF_DATA.get(data, '?')} "
            f"{ELF_MACHINE.get(machine, f'e_machine {machine}')} file")


_running = []


def running_elf():
    """The ELF header fields of the running interpreter: what a library loaded into it must have."""
    if not _running:
        try:
            with open(os.path.realpath(sys.executable), "rb") as f:
                _running.append(elf_header(f.read(20)))
        except OSError:
            _running.append(None)
    return _running[0]


def foreign(head, running=None):
    """Why a library with these first bytes cannot be loaded here (None if it can, as far as its header says)."""
    running = running if running is not None else running_elf()
    for magic, what in FOREIGN_MAGIC.items():
        if head.startswith(magic):
            return f"{what}, not an ELF library"
    header = elf_header(head)
    if header is None:
        return "not an ELF library (first bytes %s)" % (head[:8].hex(" ") or "none: the file is empty")
    if running is not None and header != running:
        return f"{describe_elf(header)}, but this Python is {describe_elf(running)}"
    return None


def problem(path, expected):
    """What is wrong with the library at path, compared with its stamp {"size", "sha256"}; None when it is the
    file that was built. Never raises for a damaged or missing file."""
    if not isinstance(expected, dict) or not isinstance(expected.get("size"), int) \
            or not isinstance(expected.get("sha256"), str):
        return {"expected": "a size and SHA-256 in _build_info.json", "found": f"{expected!r}",
                "what": "its build metadata records no size and SHA-256 for it"}
    want = f"{expected['size']} bytes, SHA-256 {expected['sha256']}"
    try:
        st = os.stat(path)
    except OSError as e:
        return {"expected": want, "found": f"no readable file ({e.strerror})", "what": "the file is missing"}
    if not stat.S_ISREG(st.st_mode):
        return {"expected": want, "found": "not a regular file", "what": "the file is not a regular file"}
    if st.st_size != expected["size"]:
        what = "the file is truncated" if st.st_size < expected["size"] else "the file has the wrong size"
        return {"expected": want, "found": f"{st.st_size} bytes", "what": what}
    try:
        with open(path, "rb") as f:
            head = f.read(64)
        why = foreign(head)
        if why is not None:
            return {"expected": want + ", " + describe_elf(running_elf()) if running_elf() else want,
                    "found": why, "what": "the file is not a library for this machine"}
        size, sha = digest(path)
    except OSError as e:
        return {"expected": want, "found": f"an unreadable file ({e.strerror})", "what": "the file cannot be read"}
    if (size, sha) != (expected["size"], expected["sha256"]):
        return {"expected": want, "found": f"{size} bytes, SHA-256 {sha}", "what": "the file's content differs"}
    return None
