"""The guard behind the wheels' py3-none tag: no library of a wheel may use Python's C API.

A py3-none wheel claims that one binary serves every CPython from Requires-Python on, free-threaded ones included
(compat.WHEEL_TAG). That holds only while no library imports a Python C-API symbol (Py*, _Py*: their layout and
their presence differ between versions and between the GIL and free-threaded builds), defines a module init
function (PyInit_*: it would be imported as an extension module, built for one ABI), or links libpython. Every
library of the wheel is read, the classic bindings and the kernel libraries too: ELF (.so) with nm and objdump,
PE (.pyd) with objdump -p, Mach-O with nm -g (Apple's, or llvm-nm).

    python -m ci symbols dist/prerast-*.whl      # runs this guard after the import audit (ci/repair/symbols.py)
"""

import re
import shutil
import subprocess
import tempfile
import zipfile

# The C API's names: Py_*, Py<Upper>* (PyLong_FromLong, PyExc_TypeError, PyInit_x) and the private _Py*.
PYTHON_API = re.compile(r"_?Py(_|[A-Z])\w*")
MODULE_INIT = re.compile(r"PyInit_\w+")
LIBPYTHON = re.compile(r"(lib)?python\d*(\.\d+)*t?[\w.]*\.(so|dll|dylib)[\d.]*", re.I)
LIBRARY = re.compile(r"^prerast/[^/]+\.(so|pyd|dylib)$")


class ToolMissing(RuntimeError):
    pass


def _tool(*names):
    for name in names:
        if shutil.which(name):
            return name
    raise ToolMissing(f"the Python C-API guard needs {names[0]} (binutils: apt-get install binutils)")


def _lines(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()


def file_format(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF":
        return "elf"
    if head[:2] == b"MZ":
        return "pe"
    if head in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe"):
        return "macho"
    return "unknown"


def elf_symbols(path):
    """(imported names, defined names, needed libraries) of an ELF library's dynamic symbol table."""
    nm = _tool("nm")
    imported = [line.split()[-1].split("@")[0] for line in _lines([nm, "-D", "--undefined-only", path]) if line]
    defined = [line.split()[-1].split("@")[0] for line in _lines([nm, "-D", "--defined-only", path]) if line.split()]
    needed = [line.split()[-1] for line in _lines([_tool("objdump"), "-p", path]) if line.split()[:1] == ["NEEDED"]]
    return imported, defined, needed


def pe_symbols(path):
    """(imported names, exported names, imported DLLs) of a PE library, from objdump -p's import and export
    tables."""
    imported, exported, dlls = [], [], []
    section = None
    for line in _lines([_tool("objdump", "x86_64-w64-mingw32-objdump"), "-p", path]):
        if line.startswith("\tDLL Name:"):
            dlls.append(line.split(":", 1)[1].strip())
            section = "imports"
        elif line.startswith("[Ordinal/Name Pointer] Table"):
            section = "exports"
        elif line.startswith("The "):  # the next table's heading
            section = None
        elif section == "imports" and re.match(r"^\t[0-9a-f]+\s+\d+\s+\S+$", line):
            imported.append(line.split()[-1])
        elif section == "exports" and re.match(r"^\t\[\s*\d+\]\s+\S+$", line):
            exported.append(line.split()[-1])
    return imported, exported, dlls


def macho_symbols(path):
    """(imported names, defined names, []) of a Mach-O library's external symbols (C names lose their leading
    underscore). Its linked libraries are not read here: delocate's listing covers those."""
    nm = _tool("llvm-nm", "nm")
    imported, defined = [], []
    for line in _lines([nm, "-g", path]):
        words = line.split()
        if len(words) < 2:
            continue
        name = words[-1][1:] if words[-1].startswith("_") else words[-1]
        (imported if words[-2] == "U" else defined).append(name)
    return imported, defined, []


READERS = {"elf": elf_symbols, "pe": pe_symbols, "macho": macho_symbols}


def library_problems(path):
    """What ties the library at path to one Python: ['imports PyLong_FromLong', 'defines PyInit_x', 'links
    libpython3.11.so.1.0']; empty when it uses no Python C API."""
    kind = file_format(path)
    if kind not in READERS:
        return [f"is no ELF, PE or Mach-O library ({kind}): cannot be checked"]
    imported, defined, linked = READERS[kind](path)
    problems = [f"imports {n}" for n in sorted(set(imported)) if PYTHON_API.fullmatch(n)]
    problems += [f"defines {n}" for n in sorted(set(defined)) if MODULE_INIT.fullmatch(n)]
    problems += [f"links {n}" for n in sorted(set(linked)) if LIBPYTHON.fullmatch(n)]
    return problems


def audit_wheel(wheel):
    """{library name in the wheel: problems} for every library of prerast in the wheel (an empty list: clean)."""
    report = {}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if LIBRARY.match(name):
                report[name.rsplit("/", 1)[-1]] = library_problems(z.extract(name, tmp))
    return report


def check_wheel(wheel, out=print):
    """Prints the guard's findings; True when the wheel's py3-none tag holds (no library uses the C API)."""
    report = audit_wheel(wheel)
    bad = {lib: problems for lib, problems in report.items() if problems}
    if not report:
        out("python C API: the wheel holds no library of prerast")
        return False
    if not bad:
        out(f"python C API: none used by its {len(report)} libraries (the py3-none tag holds)")
        return True
    for lib, problems in sorted(bad.items()):
        out(f"{lib}: the py3-none tag does not hold (one binary must serve every CPython, free-threaded too):")
        for p in problems:
            out(f"    {p}")
    return False
