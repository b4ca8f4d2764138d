"""python -m ci part-check: cibuildwheel's test of a part (ci/matrix/cibw.py), run under each Python it tests the
part's one build with: the oldest, the newest, and a free-threaded one.

A part does not run alone (a binding calls its kernels, kernels need a binding to be called: the smoke job renders
with the merged wheel), so this checks what a part can show by itself: that pip took its wheel under this
interpreter (cibuildwheel installed it, without dependencies, just before), that the wheel is tagged py3-none, and
that every library its build stamped arrived intact. Standard library only: the test environment has nothing else.
"""

import importlib.metadata
import json
import os
import re
import sys
import sysconfig

from prerast_meta import compat, integrity


def check(dist):
    """Problems of the installed distribution `dist` (an importlib.metadata Distribution); [] when it is whole."""
    problems = []
    tags = re.findall(r"^Tag: (\S+)$", dist.read_text("WHEEL") or "", re.M)
    if not tags or any(not t.startswith(compat.WHEEL_TAG + "-") for t in tags):
        problems.append(f"tagged {tags}, not {compat.WHEEL_TAG}-<platform>")
    info_path = dist.locate_file("prerast/_build_info.json")
    if not os.path.exists(info_path):
        return problems + [f"no {info_path}"]
    with open(info_path) as f:
        stamps = json.load(f).get("libraries") or {}
    if not stamps:
        problems.append("its build stamped no library")
    for name, stamp in sorted(stamps.items()):
        path = dist.locate_file(f"prerast/{name}")
        if not os.path.exists(path):
            problems.append(f"{name} is missing")
        elif integrity.stamp(os.path.dirname(str(path)), [name])[name] != stamp:
            problems.append(f"{name} is not the file its build stamped")
    return problems


def main(argv=None):
    dist = importlib.metadata.distribution("prerast")
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    where = "%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    problems = check(dist)
    for p in problems:
        print(f"part-check: prerast {dist.version} under Python {where}: {p}", file=sys.stderr)
    if not problems:
        print(f"part-check: prerast {dist.version} installed under Python {where} (GIL {'on' if gil else 'off'})")
    return 1 if problems else 0
