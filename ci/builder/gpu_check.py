"""The GPU check: one wheel built elsewhere, checked on a machine with an NVIDIA GPU and no network, with that
machine's own torch, in under ten minutes (GPU_CHECK_SECONDS, 540 by default). `bash ci/gpu_check.sh` runs this.

    PRERAST_WHEEL=prerast-....whl bash ci/gpu_check.sh             # the check; logs and report.json in gpu-check/
    PRERAST_WHEEL=prerast-....whl bash ci/gpu_check.sh --dry-run   # what it finds and what it would run

It installs the wheel (pip --no-deps --no-index) into a virtualenv made with --system-site-packages, so that the
machine's torch is the one checked; pytest comes from there too, or from the wheels in GPU_CHECK_WHEELS
(default: gpu-check-wheels/ next to this checkout's root) when the machine has none. Then, most important first,
each step within what is left of the time: the doctor (CUDA kernels loaded), the op tests on CUDA with opcheck and
the CUDA graph capture and replay of a render step (tests/core/test_no_sync.py), the fuzz cases on CUDA,
compute-sanitizer memcheck and racecheck on one small frame per op (where the machine has compute-sanitizer and
lets it attach; a refusal is reported as such), the CUDA-vs-CPU comparison of a frame, a timing table, and, where
nvdiffrast is importable, both timed on the same scenes. It writes report.json (every step's outcome, time and
log, the comparison, the timings) and ends with one summary line. Exit status: 0 when no step failed, 1 when one
did, 2 when something it needs is missing (said before any work starts).

Standard library only: it runs with the machine's Python, before anything is installed.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = ("rasterize", "interpolate", "texture", "antialias")
# What the tests need besides torch and prerast: imported from the machine's Python, else installed from the
# wheels carried in GPU_CHECK_WHEELS (pytest's are pure Python; numpy's must fit the machine's Python).
NEEDED = ("pytest", "numpy")
CARRY = "pip download -d gpu-check-wheels --python-version 3.12 --only-binary=:all: pytest numpy"
TOOLS_HELP = {
    "nvidia-smi": "the NVIDIA driver's tools",
    "compute-sanitizer": "the CUDA toolkit's compute-sanitizer (apt-get install cuda-sanitizer-13-0)",
}


def find_wheel():
    """The wheel to check: $PRERAST_WHEEL, else the newest dist/prerast-*.whl of this checkout."""
    given = os.environ.get("PRERAST_WHEEL")
    if given:
        return given if os.path.isfile(given) else None
    found = sorted(glob.glob(os.path.join(ROOT, "dist", "prerast-*.whl")), key=os.path.getmtime)
    return found[-1] if found else None


def wheel_kernels(wheel):
    """{kernel name: (CUDA version, archs)} of the wheel's build metadata."""
    with zipfile.ZipFile(wheel) as z:
        info = json.loads(z.read("prerast/_build_info.json"))
    return {k: (v.get("cuda_version"), v.get("cuda_archs")) for k, v in (info.get("kernels") or {}).items()}


PROBE = r"""
import json, sys, importlib.util as u
import torch
cuda = torch.cuda.is_available()
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "capability": "%d.%d" % torch.cuda.get_device_capability(0) if cuda else None,
    "modules": {m: u.find_spec(m) is not None for m in ("pytest", "numpy", "nvdiffrast", "xdist", "ensurepip", "pip")}}))
"""


def probe(python):
    done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[-1:] or ["no output"]
    return json.loads(done.stdout), None


def sanitizer(cuda_home):
    found = shutil.which("compute-sanitizer")
    candidate = os.path.join(cuda_home, "bin", "compute-sanitizer")
    return found or (candidate if os.path.exists(candidate) else None)


def carried(wheels, module):
    """The wheels of `module` in the folder of carried wheels."""
    return sorted(glob.glob(os.path.join(wheels, f"{module}-*.whl"))) if os.path.isdir(wheels) else []


def steps(py, out, sanitize, machine):
    """[(name, command, seconds it may take at most, whether a failure fails the check)], most important first."""
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations", "10"]
    if machine["modules"]["xdist"]:
        pytest += ["-n", "12"]
    plan = [
        ("doctor", [py, "-m", "prerast", "doctor"], 60, True),
        (
            "op tests on CUDA, opcheck, CUDA graph capture and replay",
            pytest + ["tests/core/ops", "tests/runtime/test_custom_ops.py", "tests/runtime/test_op_schemas.py",
                      "tests/core/test_no_sync.py", "tests/runtime/programs", "--junitxml", f"{out}/tests.xml"],
            240, True,
        ),
        (
            "fuzz cases on CUDA",
            [py, "tests/core/fuzz/fuzz_runner.py", "--device", "cuda", "--timeout", "60", "--budget", "90"],
            150, True,
        ),
        ("CUDA vs CPU", [py, "benchmarks/gpu_frames.py", "compare", f"{out}/compare.json"], 60, True),
    ]  # fmt: skip
    for tool in ("memcheck", "racecheck"):
        for op in OPS:
            command = [sanitize or "compute-sanitizer", "--tool", tool, "--error-exitcode", "9"]
            plan.append((f"{tool} {op}", command + [py, "benchmarks/gpu_frames.py", "frame", op], 60, True))
    plan.append(("timing", [py, "benchmarks/run.py", "--device", "cuda", "cpu", "--quick", "--json", f"{out}/timing.json"], 90, False))  # fmt: skip
    if machine["modules"]["nvdiffrast"]:
        plan.append(("nvdiffrast side by side", [py, "benchmarks/gpu_frames.py", "nvdiffrast", f"{out}/nvdiffrast.json"], 90, False))  # fmt: skip
    return plan


def refused(log):
    """compute-sanitizer could not attach (a container without the permission, an unsupported driver)."""
    signs = ("not supported", "Unable to", "Permission denied", "Could not", "Target application terminated before")
    return any(s in log for s in signs) and "ERROR SUMMARY: 0 errors" not in log and "========= Invalid" not in log


def main(argv=None):
    p = argparse.ArgumentParser(prog="bash ci/gpu_check.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="find the wheel and the tools, say what would run")
    a = p.parse_args(argv)
    out = os.path.abspath(os.environ.get("GPU_CHECK_OUT", os.path.join(ROOT, "gpu-check")))
    budget = int(os.environ.get("GPU_CHECK_SECONDS", "540"))
    python = os.environ.get("PYTHON", sys.executable)
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    wheels = os.environ.get("GPU_CHECK_WHEELS", os.path.join(ROOT, "gpu-check-wheels"))

    # What it needs, before any work.
    wheel = find_wheel()
    machine, problem = probe(python)
    missing = []
    if wheel is None:
        missing.append("the wheel: set PRERAST_WHEEL=path/to/prerast-<version>-...whl (python -m ci wheel-local "
                       "--archs 9.0 --out dist builds it), or put it in dist/")  # fmt: skip
    if machine is None:
        missing.append(f"torch in {python}: {' '.join(problem)} (set PYTHON to the interpreter that has it)")
    else:
        if not machine["gpu"] and not a.dry_run:
            missing.append(f"a GPU: torch {machine['torch']} sees none (nvidia-smi says whether the driver does)")
        if not machine["modules"]["ensurepip"]:
            missing.append(f"venv with pip for {python} (apt-get install python3-venv): the wheel goes into one")
        for module in NEEDED:
            if not machine["modules"][module] and not carried(wheels, module):
                missing.append(
                    f"{module}: {python} has none and {wheels} holds no {module} wheel; on a machine with "
                    f"network: {CARRY}, and copy the folder next to ci/ (docs/benchmarks.md)"
                )
    sanitize = sanitizer(cuda_home)
    print(f"wheel:  {wheel or 'MISSING'}")
    if wheel:
        for name, (cuda, archs) in sorted(wheel_kernels(wheel).items()):
            print(f"        kernels {name}: CUDA {cuda or '-'}, archs {','.join(archs or []) or '-'}")
    if machine:
        print(f"python: {python} {machine['python']}, torch {machine['torch']} (CUDA {machine['cuda']})")
        print(f"gpu:    {machine['gpu'] or 'none visible (the check needs one)'}"
              + (f", sm_{machine['capability'].replace('.', '')}" if machine["capability"] else ""))  # fmt: skip
        for module in NEEDED:
            have = machine["modules"][module]
            print(f"{module}: {'importable' if have else ', '.join(carried(wheels, module)) or 'MISSING'}")
        nvdiffrast = machine["modules"]["nvdiffrast"]
        print(f"nvdiffrast: {'importable: timed side by side' if nvdiffrast else 'not importable (skipped)'}")
    for tool in ("nvidia-smi",):
        print(
            f"{tool}: {shutil.which(tool) or 'absent (' + TOOLS_HELP[tool] + '): the report lacks the driver version'}"
        )
    print(f"compute-sanitizer: {sanitize or 'absent (' + TOOLS_HELP['compute-sanitizer'] + '): memcheck and racecheck skipped'}")  # fmt: skip
    if missing:
        for m in missing:
            print(f"gpu-check: missing {m}", file=sys.stderr)
        return 2
    venv = os.path.join(out, "venv")
    py = os.path.join(venv, "bin", "python")
    setup = [
        ("venv", [python, "-m", "venv", "--system-site-packages", "--clear", venv]),
        ("install", [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall", wheel]),
    ]
    for module in NEEDED:
        if not machine["modules"][module]:
            setup.append((module, [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, module]))
    plan = steps(py, out, sanitize, machine)
    if a.dry_run and not machine["modules"]["pip"]:
        print(f"pip:    none in {python}; the virtualenv's own (ensurepip) will install the wheel")
    elif a.dry_run:
        fits = subprocess.run([python, "-m", "pip", "install", "-q", "--dry-run", "--no-deps", "--no-index",
                               "--ignore-installed", wheel], capture_output=True, text=True)  # fmt: skip
        if fits.returncode != 0:
            print(f"gpu-check: pip of {python} would not install {os.path.basename(wheel)}: {fits.stderr.strip()[-500:]}",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"pip:    installs {os.path.basename(wheel)} into Python {machine['python']}")
    if a.dry_run:
        print(f"would write {out}/report.json, within {budget} s:")
        for name, command in setup:
            print(f"  {name}: {' '.join(command)}")
        for name, command, cap, _ in plan:
            skip = " (skipped: no compute-sanitizer)" if command[0] == "compute-sanitizer" and not sanitize else ""
            print(f"  {name} (at most {cap} s){skip}: {' '.join(command)}")
        return 0
    return run(out, budget, setup, plan, sanitize, machine, wheel)


def run(out, budget, setup, plan, sanitize, machine, wheel):
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    report = {"wheel": os.path.basename(wheel), "machine": machine, "steps": []}
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True)  # fmt: skip
        report["machine"]["nvidia-smi"] = smi.stdout.strip()
    for name, command in setup:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            print(done.stdout[-3000:] + done.stderr[-3000:])
            print(f"gpu-check: FAILED at {name}; nothing checked")
            return 1
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)  # the installed wheel, never this checkout's package/
    for i, (name, command, cap, counts) in enumerate(plan):
        left = budget - (time.monotonic() - start)
        kept = left - 10 * (len(plan) - i - 1)  # ten seconds kept for each step after it, while there are
        limit = int(min(cap, kept if kept >= 10 else left))  # an earlier step matters more than a later one
        step = {"name": name, "command": " ".join(command), "counts": counts}
        if command[0] == "compute-sanitizer" and not sanitize:
            step.update(status="skipped", detail="no compute-sanitizer on this machine")
        elif limit < 10:
            step.update(status="skipped", detail="no time left")
        else:
            t = time.monotonic()
            log = os.path.join(out, name.replace(" ", "-").replace(",", "") + ".log")
            try:
                done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=limit)
                text, code = done.stdout + done.stderr, done.returncode
            except subprocess.TimeoutExpired as e:
                text, code = f"{e.stdout or ''}{e.stderr or ''}\n(stopped after {limit} s)", "timeout"
            with open(log, "w") as f:
                f.write(text if isinstance(text, str) else text.decode(errors="replace"))
            status = "passed" if code == 0 else "failed"
            if status == "failed" and "sanitizer" in command[0] and refused(text):
                status = "refused"
            step.update(status=status, exit=code, seconds=round(time.monotonic() - t, 1), log=log,
                        tail=text.strip().splitlines()[-3:])  # fmt: skip
        print(f"[{time.monotonic() - start:5.0f} s] {name}: {step['status']}", flush=True)
        report["steps"].append(step)
    for part in ("compare", "timing", "nvdiffrast"):
        path = os.path.join(out, f"{part}.json")
        if os.path.exists(path):
            try:
                with open(path) as f:
                    report[part] = json.load(f)
            except ValueError as e:  # a step stopped while writing it
                report[part] = f"unreadable: {e}"
    report["seconds"] = round(time.monotonic() - start, 1)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    counts = {}
    for s in report["steps"]:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    failed = [s["name"] for s in report["steps"] if s["status"] == "failed" and s["counts"]]
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"gpu-check: {'FAILED (' + '; '.join(failed) + ')' if failed else 'PASSED'}: {summary} in "
          f"{report['seconds']:.0f} s on {machine.get('gpu')}; report {out}/report.json")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
