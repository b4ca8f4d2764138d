"""What checking the plugin's libraries costs at import: the median over fresh processes of `import prerast` to the
first CPU frame, with the size/SHA-256/ELF checks and with them replaced by a no-op, and of the checks alone.

    python benchmarks/import_checks.py [--runs 11] [--json out.json]

torch is imported before the clock starts (its import is the same either way and dwarfs the rest). The libraries
are in the page cache after the first run, as they are for every import but a machine's first.
"""

import argparse
import json
import statistics
import subprocess
import sys

PROBE = r"""
import json, os, sys, time
import torch
from prerast_meta import build_info, integrity
if sys.argv[1] == "unchecked":
    integrity.problem = lambda path, expected: None  # the loader's checks, made no-ops before it runs
t0 = time.perf_counter()
import prerast
from prerast import _demo, _loader
img, _ = _demo.render("cpu")
first_frame = time.perf_counter() - t0
info = _loader.require()
libs = [info["path"]] + ([info["cuda_path"]] if _loader.status()["cuda"] is None else [])
t1 = time.perf_counter()
assert not build_info.integrity_problems(info, libs)
check = time.perf_counter() - t1
print(json.dumps({"first_frame_s": first_frame, "check_s": check,
                  "bytes": sum(os.path.getsize(p) for p in libs), "libraries": libs}))
"""


def run(mode):
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--json")
    args = p.parse_args()
    run("checked")  # page cache warm-up
    results = {mode: [] for mode in ("checked", "unchecked")}
    for _ in range(args.runs):  # interleaved, so that a change of the machine's load hits both
        for mode in results:
            results[mode].append(run(mode))
    med = {mode: statistics.median(r["first_frame_s"] for r in rs) * 1000 for mode, rs in results.items()}
    check = statistics.median(r["check_s"] for r in results["checked"]) * 1000
    size = results["checked"][0]["bytes"] / 1e6
    summary = {
        "runs": args.runs,
        "library_mb": size,
        "check_ms": check,
        "import_to_first_frame_ms": med,
        "difference_ms": med["checked"] - med["unchecked"],
    }
    print(f"libraries checked: {size:.1f} MB ({', '.join(results['checked'][0]['libraries'])})")
    print(f"size + SHA-256 + ELF check: {check:.2f} ms (median of {args.runs} fresh processes)")
    print(
        f"import prerast -> first CPU frame: {med['checked']:.1f} ms checked, {med['unchecked']:.1f} ms "
        f"unchecked (difference {summary['difference_ms']:+.1f} ms)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
