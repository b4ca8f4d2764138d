"""Each library of a Linux wheel against what will serve it, read from its ELF tables:

- a CUDA kernel library imports only cudart symbols that the oldest runtime of its CUDA major shipped by a torch
  the wheel serves exports (ci/repair/cudart/cu<major>.txt, made by `python -m ci cudart-exports --update`): a
  kernel library built with a newer toolkit (CI's 12.8) that calls, say, cudaStreamGetDevice (12.8) would fail to
  load next to torch 2.4's libcudart 12.1;
- every library's GLIBC, GLIBCXX, CXXABI and GCC symbol versions are those the target's manylinux policy allows
  (auditwheel's own policy table);
- no library carries a RUNPATH or RPATH other than $ORIGIN-relative ones: a folder of the build machine would be
  searched on every user's machine.

`python -m ci symbols` runs these for every Linux wheel, and cibuildwheel's repair step (ci/repair/check.py) for
every wheel it repairs, part wheels included, so each kernel library is audited on the job that builds it.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile

from ci import matrix
from ci.builder import wheel as _wheel

CUDART_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cudart")
RUNTIME_LIBRARIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")


def exports_file(major):
    return os.path.join(CUDART_DIR, f"cu{major}.txt")


def cudart_exports(major):
    """({header field: value}, {symbol@version}) of the generated list of CUDA `major`'s oldest served runtime."""
    fields, names = {}, set()
    with open(exports_file(major)) as f:
        for line in f:
            line = line.strip()
            m = re.fullmatch(r"#\s*(\w[\w ]*\w):\s*(.*)", line)
            if m:
                fields[m.group(1)] = m.group(2)
            elif line and not line.startswith("#"):
                names.add(line)
    return fields, names


def dynamic_symbols(library, defined=False):
    """[(name, version or None)] of what library imports (defined: what it exports), from nm -D."""
    if not shutil.which("nm"):
        raise RuntimeError("the audit needs nm (binutils): apt-get install binutils")
    which = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(
        ["nm", "-D", which, "--with-symbol-versions", library], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        name, _, version = line.split()[-1].partition("@")
        found.append((name, version.lstrip("@") or None))
    return found


def cudart_problems(library, major):
    """The cudart imports of library that CUDA `major`'s oldest served runtime does not export, by name."""
    fields, exported = cudart_exports(major)
    exported_names = {e.split("@")[0] for e in exported}
    runtime = f"libcudart {fields.get('version', '?')} ({fields.get('served by', 'the oldest served torch')})"
    problems = []
    for name, version in dynamic_symbols(library):
        if version and version.startswith("libcudart.so") or (version is None and name.startswith("cuda")):
            if name not in exported_names:
                problems.append(f"imports {name}, which {runtime} does not export")
    return problems


def policy_versions(manylinux, machine):
    """{'GLIBC': {'2.2.5', ..., '2.28'}, 'GLIBCXX': {...}, ...}: the symbol versions auditwheel's policy table
    allows a manylinux_2_28 library of `machine`."""
    try:
        from importlib import resources

        text = (resources.files("auditwheel") / "policy" / "manylinux-policy.json").read_text()
    except (ImportError, ModuleNotFoundError, FileNotFoundError) as e:
        raise RuntimeError(f"the audit reads auditwheel's policy table: pip install auditwheel ({e})") from e
    for policy in json.loads(text):
        if policy["name"] == manylinux or manylinux in policy.get("aliases", []):
            return {lib: set(v) for lib, v in policy["symbol_versions"][machine].items()}
    raise ValueError(f"auditwheel knows no policy {manylinux!r}")


def symbol_version_problems(library, allowed, manylinux):
    """The runtime symbol versions library needs beyond the policy's (GLIBC_2.34 for manylinux_2_28), with the
    symbols that need each."""
    needs = {}
    for name, version in dynamic_symbols(library):
        m = re.fullmatch(r"(GLIBC|GLIBCXX|CXXABI|GCC)_(.+)", version or "")
        if m and m.group(2) not in allowed.get(m.group(1), ()):
            needs.setdefault(version, []).append(name)
    return [f"needs {v} ({', '.join(sorted(n)[:5])}), newer than {manylinux} allows" for v, n in sorted(needs.items())]


def run_path_problems(library):
    """RUNPATH / RPATH entries of library that name a folder (not relative to $ORIGIN)."""
    if not shutil.which("readelf"):
        raise RuntimeError("the audit needs readelf (binutils): apt-get install binutils")
    out = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    problems = []
    for kind, value in re.findall(r"\((RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out):
        bad = [p for p in value.split(":") if p and not p.startswith("$ORIGIN")]
        if bad:
            problems.append(f"{kind} names {':'.join(bad)} (a folder of the build machine)")
    return problems


def audit_library(library, manylinux, machine, cuda_major=None):
    """Every problem of one library."""
    problems = symbol_version_problems(library, policy_versions(manylinux, machine), manylinux)
    problems += run_path_problems(library)
    if cuda_major:
        problems += cudart_problems(library, cuda_major)
    return problems


def cuda_majors(info):
    """{library file name: CUDA major} of a wheel's kernel libraries (its _build_info.json's kernels)."""
    out = {}
    for kernels in (info.get("kernels") or {}).values():
        if kernels.get("cuda_version"):
            out[kernels["library"]] = kernels["cuda_version"].split(".")[0]
    return out


def audit_wheel(wheel, manylinux, machine, tmp):
    """{library name: [problems]} for every shared library of a Linux wheel, extracted into tmp."""
    report = {}
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = json.loads(z.read("prerast/_build_info.json")) if "prerast/_build_info.json" in names else {}
        majors = cuda_majors(info)
        for name in names:
            if re.search(r"\.so(\.\d+)*$", name):
                path = z.extract(name, tmp)
                base = os.path.basename(name)
                report[name] = audit_library(path, manylinux, machine, majors.get(base))
    return report


def audit(wheel):
    """{library in the wheel: [problems]} of a Linux wheel, against its target's manylinux policy (the target of
    its platform tag, else this machine's); {} for a wheel of another OS."""
    plat = _wheel.wheel_tags(wheel)[2][0]
    target = matrix.target_of_tag(plat) or (matrix.running_target() if plat.startswith("linux_") else None)
    if target is None or target.os != "linux":
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        return audit_wheel(wheel, target.manylinux, target.machine, tmp)
