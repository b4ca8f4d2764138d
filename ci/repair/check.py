"""cibuildwheel's repair command (python -m ci repair): the repair tool of the wheel's target with the package's
policy, then the checks of the repaired wheel (no torch or CUDA library grafted in, the exact platform tag, the
py3-none tags kept and no Python C API used: ci/repair/python_api.py, only torch's C shims imported by a stable-ABI
plugin: ci/repair/symbols.py; on Linux, every library against what serves it: ci/repair/served.py).
"""

import argparse
import os
import sys

from ci import matrix
from ci.builder import wheel
from ci.repair import python_api, served, symbols
from prerast_meta import compat


def repair_and_check(raw_wheel, dest_dir, plat=None):
    """cibuildwheel's repair step: the repair tool of the wheel's target (its platform tag picks it: auditwheel
    on Linux, delvewheel on Windows, delocate on macOS) with the package's exclude list, tagged exactly `plat`
    (the target's tag unless given), then the checks that no torch or CUDA library was grafted in and that the
    tag is that one."""
    try:
        raw_tag = ".".join(wheel.wheel_tags(raw_wheel)[2])
    except ValueError:  # not a wheel file name: the running OS decides
        raw_tag = ""
    target = matrix.target_of_tag(raw_tag) or matrix.running_target()
    if target is None:
        raise SystemExit(f"repair: {os.path.basename(raw_wheel)} is for no target of ci/matrix.toml")
    plat = plat or target.plat
    if target.os == "linux":
        image = os.environ.get("AUDITWHEEL_PLAT")  # what the manylinux image itself is built for
        if image and image != plat:
            raise SystemExit(f"repair: the image is {image}, but the wheels must be tagged {plat}: change the image")
    # The one build route's repair step: the tool of the wheel's platform tag, delocate's archs from it too.
    repaired = wheel.repair(raw_wheel, dest_dir, sys.executable, plat, only_plat=True)
    found = wheel.inspect(repaired)
    if found["forbidden"]:
        raise SystemExit(f"repair: torch/CUDA libraries were grafted into {repaired}: {found['forbidden']}")
    if wheel.wheel_tags(repaired)[2] != [plat]:
        raise SystemExit(f"repair: {os.path.basename(repaired)} is not tagged exactly {plat}")
    if "-".join(wheel.wheel_tags(repaired)[:2]) != compat.WHEEL_TAG:
        raise SystemExit(f"repair: {os.path.basename(repaired)} lost its {compat.WHEEL_TAG} tags")
    to_stderr = lambda line: print(line, file=sys.stderr)
    if target.os == "linux" and found.get("build_info") and not python_api.check_wheel(repaired, out=to_stderr):
        raise SystemExit(f"repair: a library of {os.path.basename(repaired)} uses Python's C API (see above)")
    if target.os == "linux" and found.get("build_info", {}).get("abi") == "stable":
        # The audit reads ELF symbol tables (nm -D): Linux wheels only.
        bad = {lib: kinds["other"] for lib, kinds in symbols.audit_wheel(repaired, True).items() if kinds.get("other")}
        if bad:
            raise SystemExit(
                f"repair: the stable-ABI wheel {os.path.basename(repaired)} imports symbols outside "
                f"torch's stable C shims (it would load into one torch release only): {bad}"
            )
    if target.os == "linux":  # every part's libraries against what serves them (ci/repair/served.py)
        bad = {lib: problems for lib, problems in served.audit(repaired).items() if problems}
        if bad:
            raise SystemExit(f"repair: {os.path.basename(repaired)} has libraries its users cannot load: {bad}")
    return repaired


def main(argv=None):
    r = argparse.ArgumentParser(
        prog="python -m ci repair", description="Repair a wheel with the package's policy and check the result."
    )
    r.add_argument("wheel")
    r.add_argument("dest_dir")
    r.add_argument("--plat", help="the exact platform tag (default: the tag of the wheel's target in ci/matrix.toml)")
    a = r.parse_args(argv)
    print(repair_and_check(a.wheel, a.dest_dir, a.plat))
    return 0
