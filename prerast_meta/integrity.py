"""Is a file the one that was built, and is it for this machine? Checked before a library is handed to the dynamic
loader, so that a copy cut short, a flipped bit or a binary for another architecture becomes an error message
instead of a SIGBUS or SIGSEGV in dlopen.

The build stamps each library's size and SHA-256 into _build_info.json ("libraries"); `problem` compares a file
with its stamp: size first (a truncated copy is found without reading it), then the binary's header against
what the running interpreter loads (ELF class, byte order and machine on Linux, Mach-O cputype on macOS, PE
machine on Windows; a library of another OS is named as such), then the hash. Standard
library only: setup.py imports it to stamp what it built.
"""

import hashlib
import os
import stat
import struct
import sys

from . import platforms

CHUNK = 1 << 20
HEAD = 4096  # enough for a PE file's header, which starts where its DOS stub says (e_lfanew)
ELF_MAGIC = b"\x7fELF"
ELF_CLASS = {1: "32-bit", 2: "64-bit"}
ELF_DATA = {1: "little-endian", 2: "big-endian"}
# e_machine values of the architectures one is likely to meet (the ELF specification and its processor supplements).
ELF_MACHINE = {
    3: "x86",
    8: "MIPS",
    20: "PowerPC",
    21: "PowerPC64",
    22: "s390",
    40: "ARM",
    62: "x86-64",
    183: "AArch64",
    243: "RISC-V",
    258: "LoongArch",
}
# Mach-O (<mach-o/loader.h>): the magic in the file's byte order, and cputype values (<mach/machine.h>).
MACHO_MAGIC = {b"\xcf\xfa\xed\xfe": "<", b"\xce\xfa\xed\xfe": "<", b"\xfe\xed\xfa\xcf": ">", b"\xfe\xed\xfa\xce": ">"}
MACHO_FAT_MAGIC = b"\xca\xfe\xba\xbe"  # a universal binary: big-endian fat_header, then 20-byte fat_arch entries
MACHO_CPU = {
    7: "x86",
    0x01000007: "x86-64",
    12: "ARM",
    0x0100000C: "arm64",
    0x0200000C: "arm64_32",
    18: "PowerPC",
    0x01000012: "PowerPC64",
}
# PE/COFF (Microsoft's PE format specification): IMAGE_FILE_HEADER.Machine and the DLL characteristic.
PE_MACHINE = {0x14C: "x86", 0x8664: "x86-64", 0xAA64: "arm64", 0x1C4: "ARM", 0xA641: "arm64EC"}
PE_DLL = 0x2000
# The binary format of each OS's libraries, named by the OS that loads it (platforms.PLATFORMS).
FORMAT_OS = {p.binary_format: p.name for p in platforms.PLATFORMS.values()}


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


def stamp_bytes(data):
    """The stamp of a library's contents, as `stamp` records it."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def elf_header(head):
    """(class, byte order, machine) of an ELF file's first 20 bytes, or None when they are no ELF header."""
    if len(head) < 20 or head[:4] != ELF_MAGIC or head[5] not in (1, 2):
        return None
    machine = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)[0]
    return head[4], head[5], machine


def describe_elf(header):
    cls, data, machine = header
    return (
        f"a Linux {ELF_MACHINE.get(machine, f'e_machine {machine}')} library (ELF {ELF_CLASS.get(cls, f'class-{cls}')} "
        f"{ELF_DATA.get(data, '?')})"
    )


def _macho(head):
    """The architectures of a Mach-O file (several for a universal one), or None when head is no Mach-O header."""
    order = MACHO_MAGIC.get(head[:4])
    if order is not None and len(head) >= 8:
        return (MACHO_CPU.get(struct.unpack_from(order + "i", head, 4)[0], "unknown CPU"),)
    if head[:4] == MACHO_FAT_MAGIC and len(head) >= 8:
        count = struct.unpack_from(">I", head, 4)[0]
        if 0 < count <= 32 and len(head) >= 8 + 20 * count:  # a Java class file shares the magic: its count is huge
            return tuple(
                MACHO_CPU.get(struct.unpack_from(">i", head, 8 + 20 * i)[0], "unknown CPU") for i in range(count)
            )
    return None


def _pe(head):
    """(machine, is a DLL) of a PE file; (None, None) when its header lies past head; None when it is no PE file."""
    if head[:2] != b"MZ":
        return None
    if len(head) < 0x40:
        return None, None
    at = struct.unpack_from("<I", head, 0x3C)[0]
    if at + 24 > len(head) or head[at : at + 4] != b"PE\0\0":
        return None, None
    (machine,) = struct.unpack_from("<H", head, at + 4)
    (characteristics,) = struct.unpack_from("<H", head, at + 22)
    return PE_MACHINE.get(machine, f"machine 0x{machine:04X}"), bool(characteristics & PE_DLL)


def identify(head):
    """(key, description) of a binary's first bytes, None for no format a dynamic loader takes. key is what a
    library must share with the running interpreter: ("ELF", (class, byte order, e_machine)), ("Mach-O",
    architectures) or ("PE", machine)."""
    elf = elf_header(head)
    if elf is not None:
        return ("ELF", elf), describe_elf(elf)
    cpus = _macho(head)
    if cpus is not None:
        if len(cpus) > 1:
            return ("Mach-O", cpus), f"a universal macOS library (Mach-O: {', '.join(cpus)})"
        return ("Mach-O", cpus), f"a macOS {cpus[0]} library (Mach-O)"
    fat_count = struct.unpack_from(">I", head, 4)[0] if head[:4] == MACHO_FAT_MAGIC and len(head) >= 8 else None
    if head[:4] in MACHO_MAGIC or (fat_count is not None and 0 < fat_count <= 32):
        return ("Mach-O", ()), "a macOS library (Mach-O) cut short in its header"
    pe = _pe(head)
    if pe is not None:
        machine, dll = pe
        if machine is None:
            return ("PE", None), "a Windows binary (PE) whose header is not where its DOS stub points"
        return ("PE", machine), f"a Windows {machine} {'DLL' if dll else 'executable'} (PE)"
    return None


def describe_running(running):
    """'Linux x86-64 (it loads ELF 64-bit little-endian x86-64 libraries)' for a running key (see `identify`)."""
    fmt, what = running
    if fmt == "ELF":
        cls, data, machine = what
        return (
            f"Linux {ELF_MACHINE.get(machine, f'e_machine {machine}')} (it loads ELF "
            f"{ELF_CLASS.get(cls, f'class-{cls}')} {ELF_DATA.get(data, '?')} libraries)"
        )
    return f"{FORMAT_OS.get(fmt, fmt)} {what} (it loads {fmt} {what} libraries)"


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


def running_binary():
    """The key (see `identify`) a library must have to load here; None when it cannot be told (an unreadable
    interpreter on an ELF system)."""
    row = platforms.current()
    if row.binary_format == "ELF":
        elf = running_elf()
        return ("ELF", elf) if elf is not None else None
    return row.binary_format, platforms.machine()


def _fits(found, running):
    if found[0] != running[0]:
        return False
    if found[0] == "Mach-O":
        return running[1] in found[1]  # a universal binary serves each of its architectures
    return found[1] == running[1]


def foreign(head, running=None):
    """Why a library with these first bytes cannot be loaded here (None if it can, as far as its header says).
    running: the key of what runs (default: this interpreter); an ELF header tuple is taken as ("ELF", it)."""
    if running is None:
        running = running_binary()
    elif isinstance(running[0], int):
        running = ("ELF", tuple(running))
    found = identify(head)
    if found is None:  # named by the format this OS loads: "not an ELF library", "not a PE library"
        fmt = running[0] if running is not None else platforms.current().binary_format
        return "not %s %s library (first bytes %s)" % (
            "an" if fmt[0] in "AEIOU" else "a",
            fmt,
            head[:8].hex(" ") or "none: the file is empty",
        )
    key, what = found
    if running is None:
        return f"{what}, not an ELF library" if key[0] != "ELF" else None
    if not _fits(key, running):
        return f"{what}, but this Python runs on {describe_running(running)}"
    return None


def problem(path, expected):
    """What is wrong with the library at path, compared with its stamp {"size", "sha256"}; None when it is the
    file that was built. Never raises for a damaged or missing file."""
    if (
        not isinstance(expected, dict)
        or not isinstance(expected.get("size"), int)
        or not isinstance(expected.get("sha256"), str)
    ):
        return {
            "expected": "a size and SHA-256 in _build_info.json",
            "found": f"{expected!r}",
            "what": "its build metadata records no size and SHA-256 for it",
        }
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
            head = f.read(HEAD)
        why = foreign(head)
        if why is not None:
            running = running_binary()
            return {
                "expected": want + (f", a library for {describe_running(running)}" if running else ""),
                "found": why,
                "what": "the file is not a library for this machine",
            }
        size, sha = digest(path)
    except OSError as e:
        return {"expected": want, "found": f"an unreadable file ({e.strerror})", "what": "the file cannot be read"}
    if (size, sha) != (expected["size"], expected["sha256"]):
        return {"expected": want, "found": f"{size} bytes, SHA-256 {sha}", "what": "the file's content differs"}
    return None
