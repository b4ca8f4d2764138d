"""Undefined-symbol audit of a wheel's plugin libraries: what each one expects the process to provide.

A stable-ABI binding may import only torch's stable C shims (aoti_torch_*, torch_*) and the C and C++ runtimes
(symbols versioned GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*); a kernel library only the runtimes and, for a CUDA one,
libcudart. A C++ symbol of torch (at::, c10::, torch::) would tie it to one torch release, which is what the
stable ABI avoids; a classic binding links them by design and is not audited.

    python -m ci symbols dist/prerast-*.whl      # prints the imports by kind; exit 1 if any is not allowed

It then runs the guard of the wheel's py3-none tag on every library (ci/repair/python_api.py): exit 1 if one uses
Python's C API.
It also audits every library of a Linux wheel against what serves it (ci/repair/served.py): cudart imports
against the oldest served runtime of the CUDA major, symbol versions against the manylinux policy, no run path
naming the build machine.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

from ci.repair import python_api, served
from prerast_meta import build_info

RUNTIME_VERSIONS = re.compile(r"(GLIBC|GLIBCXX|CXXABI|GCC)_[\d.]+")
SHIMS = re.compile(r"(aoti_torch_|torch_)\w+")
# Weak references every shared object carries (transactional memory, profiling): resolved or not, harmless.
WEAK_BOILERPLATE = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__", "__cxa_finalize"}


def undefined_symbols(library):
    """[(name, version or None)] of the symbols library imports (nm -D --undefined-only)."""
    if not shutil.which("nm"):
        raise RuntimeError("the symbol audit needs nm (binutils): apt-get install binutils")
    out = subprocess.run(
        ["nm", "-D", "--undefined-only", "--with-symbol-versions", library], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        name = line.split()[-1]
        name, _, version = name.partition("@")
        found.append((name, version.lstrip("@") or None))
    return found


def kind_of(name, version):
    """'runtime', 'cudart', 'torch-shim', 'weak' or 'other' (not allowed in a stable-ABI plugin)."""
    if version and RUNTIME_VERSIONS.fullmatch(version):
        return "runtime"
    if version and version.startswith("libcudart.so"):
        return "cudart"
    if name in WEAK_BOILERPLATE:
        return "weak"
    if version is None and SHIMS.fullmatch(name):
        return "torch-shim"
    return "other"


def audit_library(library):
    """{kind: sorted names} of one library's imports."""
    kinds = {}
    for name, version in undefined_symbols(library):
        kinds.setdefault(kind_of(name, version), set()).add(name if not version else f"{name}@{version}")
    return {k: sorted(v) for k, v in kinds.items()}


def held_to_the_rule(info):
    """The libraries of a wheel's build metadata that may import only the allowed kinds: the stable binding's parts
    and every kernel library (which import nothing of torch at all). A classic binding links torch's C++ API by
    design."""
    stable = [b for b in build_info.bindings_of(info) if b.get("abi") == "stable"]
    names = [n for b in stable for n in (b.get("library"), b.get("cuda_library")) if n]
    return names + [k["library"] for k in (info.get("kernels") or {}).values()]


def audit_wheel(wheel, only_held=False):
    """{library name in the wheel: audit} for every shared library of prerast in the wheel (only_held: those
    held_to_the_rule)."""
    report = {}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as z:
        held = held_to_the_rule(json.loads(z.read("prerast/_build_info.json"))) if only_held else None
        for name in z.namelist():
            if re.search(r"^prerast/[^/]+\.so$", name) and (held is None or os.path.basename(name) in held):
                path = z.extract(name, tmp)
                report[os.path.basename(name)] = audit_library(path)
    return report


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci symbols", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("wheel")
    a = p.parse_args(argv)
    report = audit_wheel(a.wheel, only_held=True)
    bad = False
    for lib, kinds in report.items():
        print(f"{lib}: " + ", ".join(f"{len(v)} {k}" for k, v in sorted(kinds.items())))
        for name in kinds.get("other", []):
            print(f"    not allowed: {name}")
            bad = True
    bad = not python_api.check_wheel(a.wheel) or bad
    for lib, problems in served.audit(a.wheel).items():  # what serves each library: ci/repair/served.py
        print(f"{lib}: {'; '.join(problems) or 'served (cudart, symbol versions, run paths)'}")
        bad = bad or bool(problems)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
