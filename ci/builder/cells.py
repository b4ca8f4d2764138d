"""Build one cell of the matrix end to end, on this machine:

  1 torch     download the cell's torch (and its CUDA wheels) once into a local wheel cache
  2 env       an isolated build virtualenv: exactly that torch + build tools
  3 cold      pip wheel from a clean copy of the source, compiler cache refreshed (CCACHE_RECACHE)
  4 warm      the same build again from a clean build folder: every compile should hit the cache
  5 repair    the repair tool of the wheel's platform tag with the package's exclude policy (the one build
              route, prerast_meta/build_wheel.py); auditwheel show; nothing of torch/CUDA inside
  6 smoke     a fresh runtime virtualenv with the cell's torch, no compiler: import, render, nothing written

Each (cell, Python) gets a folder <work>/<cell>-py<X.Y> (virtualenvs, source copy, compiler cache, logs) and a
result.json next to its wheel in <out>/<cell>-py<X.Y>/, which the summary table reads.
"""

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from ci.builder import local, progress, smoke, tools, wheel
from ci.builder.progress import CommandFailed, Steps, log, run_logged
from prerast_meta import build_env, build_wheel

ROOT = wheel.ROOT
STEPS = ["torch", "env", "cold", "warm", "repair", "smoke"]
DEFAULT_WORK = os.path.join(ROOT, ".venv", "cells")
DEFAULT_OUT = os.path.join(ROOT, "dist", "cells")
DEFAULT_DOWNLOADS = os.path.expanduser("~/.cache/prerast-ci/wheels")


class CellFailed(RuntimeError):
    """A cell's build failed at a named step."""


def run_name(cell, python_version):
    return f"{cell.id}-py{python_version}"


def _pip(python, args, log_path, label, env=None):
    cmd = [python, "-m", "pip", "--disable-pip-version-check"] + args
    return run_logged(cmd, log_path, label, env=env, show=lambda line: line.startswith(("Collecting", "Installing")))


def fetch_torch(cell, python_version, downloads, log_path, requirement=None):
    """pip download the cell's torch (or `requirement`: (requirement, extra pip arguments)) and numpy for
    `python_version` into a folder of its own; venvs install from there with --no-index, so the multi-GB CUDA
    wheels are fetched once."""
    name = cell.id if requirement is None else requirement[0].split("=")[-1]
    folder = os.path.join(downloads, f"{name}-cp{python_version.replace('.', '')}")
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        log(f"  torch wheels already in {folder}")
        return folder
    requirement, extra = requirement or cell.torch_requirement()
    if (
        extra
        and python_version == "%d.%d" % sys.version_info[:2]
        and requirement.split("=")[-1] in local.torch_versions()
    ):
        # pip's own indexes (a mirror, a find-links folder) have that build: asking torch's index too would cost a
        # round trip per package, or a timeout per package where it cannot be reached.
        log(f"  {requirement} is on pip's configured indexes: {extra[-1]} is not asked")
        extra = []
    python = local.python_executable(python_version)
    _pip(python, ["download", "-d", folder, requirement, "numpy"] + extra, log_path, "download torch")
    open(done, "w").close()
    return folder


def make_env(venv, python_version, torch_wheels, tools, log_path):
    """A fresh virtualenv with the cell's torch (from the local wheel folder, asked for by its exact version: pip's
    configured find-links may hold another build of the same release) and `tools` (requirement files)."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([local.python_executable(python_version), "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    requirement = next(f for f in os.listdir(torch_wheels) if f.startswith("torch-"))
    version = requirement.split("-")[1]
    _pip(
        python,
        ["install", "--no-compile", "--no-index", "--find-links", torch_wheels, f"torch==={version}", "numpy"],
        log_path,
        "install torch",
    )
    if tools:
        _pip(python, ["install"] + [x for t in tools for x in ("-r", t)], log_path, "install build tools")
    return python


def torch_facts(python):
    code = (
        "import json, torch, torch.utils.cpp_extension as e, inspect; "
        "src = inspect.getsource(e); print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
        "'wraps_compiler': '_wrap_compiler' in src, 'nvcc_env': 'PYTORCH_NVCC' in src}))"
    )
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def copy_source(dest):
    """A copy of the working tree (tracked and untracked-but-not-ignored files) that is a git clone, so that the
    build metadata still names the commit. The copy keeps one path per cell: the compiler cache then hits."""
    if not os.path.isdir(os.path.join(dest, ".git")):
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", ROOT, dest], check=True)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "-C", dest, "fetch", "-q", ROOT, head.strip()], check=True)
    subprocess.run(["git", "-C", dest, "checkout", "-q", "--detach", "-f", head.strip()], check=True)
    subprocess.run(["git", "-C", dest, "clean", "-qfdx"], check=True)
    listed = (
        subprocess.run(
            ["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src, dst = os.path.join(ROOT, rel), os.path.join(dest, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
        elif os.path.exists(dst):
            os.remove(dst)


def ccache_stats(ccache, env):
    out = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, env=env).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    hits = sum(int(stats.get(k, 0)) for k in ("direct_cache_hit", "preprocessed_cache_hit"))
    misses = int(stats.get("cache_miss", 0)) + int(stats.get("recache", 0))
    return {"hits": hits, "misses": misses}


def build_spec(cell, venv, work, facts, archs, src):
    """The cell's build in the one build route (prerast_meta/build_wheel.py): the venv's tools first on PATH, the
    cell's toolkit and archs, ccache for the host compiler and nvcc when the venv has ccache. torch >= 2.13 puts
    ccache in front of both itself (found on PATH, where the venv comes first); for older torch, compiler names
    that lead to ccache go first on PATH (CXX="ccache c++" would fail torch's compiler version check) and nvcc is
    wrapped through PYTORCH_NVCC. The raw wheel goes to <work>/raw (compile_once), the repaired one to out."""
    first = [os.path.join(venv, "bin")]
    ccache = tools.venv_ccache(venv)
    if ccache and not facts["wraps_compiler"]:
        masquerade = os.path.join(work, "ccache-bin")
        os.makedirs(masquerade, exist_ok=True)
        for name in ("cc", "c++", "gcc", "g++"):
            link = os.path.join(masquerade, name)
            if not os.path.lexists(link):
                os.symlink(ccache, link)
        first.append(masquerade)
    extra = {
        "PATH": os.pathsep.join(first + [os.environ.get("PATH", "")]),
        "CCACHE_DIR": os.path.join(work, "ccache"),
        "TORCH_CUDA_ARCH_LIST": None,
    }
    cuda_home = local.nvcc()[0] if cell.cuda else None
    if ccache and not facts["wraps_compiler"] and cell.cuda and facts["nvcc_env"]:
        extra["PYTORCH_NVCC"] = ccache + " " + os.path.join(cuda_home, "bin", "nvcc")
    archs = build_env.parse_arch_list(archs or cell.arch_list()) if cell.cuda else ()
    return build_wheel.BuildSpec(
        source=src,
        out_dir=os.path.join(work, "raw"),
        cuda_home=cuda_home,
        archs=archs,
        python=os.path.join(venv, "bin", "python"),
        plat=expected_plat(cell),
        env=extra,
    )


def compile_once(spec, log_path, label, **env):
    """pip wheel from a clean build folder (more variables in env); returns (seconds, wheel path)."""
    src = spec.source
    for leftover in ["build", "dist"] + glob.glob(os.path.join(src, "package", "*.egg-info")):
        shutil.rmtree(os.path.join(src, leftover), ignore_errors=True)
    spec = dataclasses.replace(spec, env=spec.env + tuple(env.items()), log_path=log_path)
    t0 = time.time()
    raw = build_wheel.raw_wheel(spec, spec.out_dir, log=lambda text: log("  " + text), label=label)
    return time.time() - t0, raw


def expected_plat(cell):
    """The --plat to repair to: the matrix's policy inside a manylinux image (AUDITWHEEL_PLAT is set there),
    else None: auditwheel picks the most compatible tag this machine's libc and libstdc++ allow."""
    wanted = cell.target.plat
    return wanted if os.environ.get("AUDITWHEEL_PLAT") == wanted else None


def cell_folders(cell, python_version, work_root, out_root):
    """(run name, work folder, output folder, an emptied log folder) of one (cell, Python)."""
    name = run_name(cell, python_version)
    work, out = os.path.join(work_root, name), os.path.join(out_root, name)
    os.makedirs(work, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    logs = os.path.join(work, "logs")
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    return name, work, out, logs


def checked_wheel(cell, repaired, plat_tag):
    """What the repaired wheel holds (wheel.inspect), once it passes the checks of every cell's wheel: nothing of
    torch or CUDA grafted in, and the file named as the matrix names the cell's wheel with that platform tag."""
    facts_in = wheel.inspect(repaired)
    if facts_in["forbidden"]:
        raise CellFailed(f"torch/CUDA libraries were grafted into the wheel: {facts_in['forbidden']}")
    version = facts_in["build_info"]["prerast_version"].split("+")[0]
    if os.path.basename(repaired) != cell.wheel_name(version, plat_tag):
        raise CellFailed(f"wheel named {os.path.basename(repaired)}, expected {cell.wheel_name(version, plat_tag)}")
    return facts_in


def build_cell(
    cell,
    python_version,
    out_root=DEFAULT_OUT,
    work_root=DEFAULT_WORK,
    downloads=DEFAULT_DOWNLOADS,
    archs=None,
    keep_build_env=False,
    keep_runtime_env=True,
    device="auto",
):
    """Build, repair and smoke-test one cell with one Python. Returns the result dict (also in result.json)."""
    name, work, out, logs = cell_folders(cell, python_version, work_root, out_root)
    result = {
        "cell": cell.id,
        "python": python_version,
        "status": "failed",
        "step": None,
        "times": {},
        "archs_requested": (archs or cell.arch_list()) if cell.cuda else "",
        "log_dir": logs,
    }
    steps = Steps(STEPS, name)
    build_venv, runtime_venv = os.path.join(work, "build-venv"), os.path.join(work, "runtime-venv")
    try:
        with steps("torch"):
            result["step"] = "torch"
            torch_wheels = fetch_torch(cell, python_version, downloads, os.path.join(logs, "torch.log"))
        with steps("env"):
            result["step"] = "env"
            python = make_env(
                build_venv, python_version, torch_wheels, [tools.CELL_REQUIREMENTS], os.path.join(logs, "env.log")
            )
            lacking = tools.venv_problems(build_venv)
            if lacking:
                raise CellFailed(
                    f"the build virtualenv has no {', '.join(lacking)} after installing "
                    f"{tools.CELL_REQUIREMENTS} (see {os.path.join(logs, 'env.log')})"
                )
            facts = torch_facts(python)
            want_cuda = cell.cuda
            if facts["cuda"] != want_cuda and not (want_cuda is None and facts["cuda"] is None):
                raise CellFailed(
                    f"the torch installed for {cell.id} is {facts['version']} (CUDA {facts['cuda']}), "
                    f"not a CUDA {want_cuda or 'none'} build: fix `pypi`/`platforms` in ci/matrix.toml"
                )
            src = os.path.join(work, "src")
            spec = build_spec(cell, build_venv, work, facts, archs, src)
            env = build_wheel.environment(spec)
            copy_source(src)
        with steps("cold"):
            result["step"] = "cold"
            ccache = tools.venv_ccache(build_venv)
            if ccache:
                subprocess.run([ccache, "-z"], env=env, capture_output=True)
            cold, raw = compile_once(spec, os.path.join(logs, "build-cold.log"), "cold build", CCACHE_RECACHE="1")
            if ccache:
                result["ccache_cold"] = ccache_stats(ccache, env)
        with steps("warm"):
            result["step"] = "warm"
            warm = None
            if ccache:
                subprocess.run([ccache, "-z"], env=env, capture_output=True)
                warm, raw = compile_once(spec, os.path.join(logs, "build-warm.log"), "warm build")
                result["ccache_warm"] = ccache_stats(ccache, env)
            else:  # a second build without a compiler cache would only repeat the cold one
                log("  no ccache in the build virtualenv: warm build not measured")
        with steps("repair"):
            result["step"] = "repair"
            for old in glob.glob(os.path.join(out, "*.whl")):
                os.remove(old)
            plat = spec.plat
            repaired = build_wheel.repaired(raw, dataclasses.replace(spec, out_dir=out), log=log)
            tag, show_text = wheel.auditwheel_show(repaired, python)
            plat_tags = wheel.wheel_tags(repaired)[2]
            plat_tag = ".".join(plat_tags)
            if tag not in plat_tags:
                raise CellFailed(f"auditwheel show says {tag}, the wheel is tagged {plat_tag}")
            facts_in = checked_wheel(cell, repaired, plat_tag)
            result.update(
                wheel=repaired,
                size=os.path.getsize(repaired),
                platform_tag=plat_tag,
                auditwheel_show=tag,
                plat_requested=plat,
                archs=facts_in["build_info"].get("cuda_archs") or [],
                grafted=facts_in["grafted"],
                build_info=facts_in["build_info"],
            )
            with open(os.path.join(logs, "auditwheel-show.txt"), "w") as f:
                f.write(show_text)
        if not keep_build_env:
            shutil.rmtree(build_venv, ignore_errors=True)
        with steps("smoke"):
            result["step"] = "smoke"
            make_env(runtime_venv, python_version, torch_wheels, [], os.path.join(logs, "runtime.log"))
            report = smoke.smoke(runtime_venv, repaired, os.path.join(out, "render.png"), device)
            result.update(smoke=report, runtime_venv=runtime_venv)
        times = dict(steps.times, cold=cold, warm=warm)
        if warm is None:  # not measured: the summary says so
            del times["warm"]
        result.update(status="ok", step=None, times=times)
    except (CommandFailed, CellFailed, RuntimeError, subprocess.CalledProcessError) as e:
        result["error"] = str(e)
        result["times"] = steps.times
        log(f"FAILED at step {result['step']}: {str(e)[:2000]}", name)
    finally:
        if not keep_build_env:
            shutil.rmtree(build_venv, ignore_errors=True)
        if not keep_runtime_env and os.path.isdir(runtime_venv):
            shutil.rmtree(runtime_venv, ignore_errors=True)
            result["runtime_venv"] = None
        save_result(result, out_root)
    return result


CROSS_STEPS = ["torch", "env", "cold", "smoke"]


def build_cross_cell(
    cell,
    python_version,
    out_root=DEFAULT_OUT,
    work_root=DEFAULT_WORK,
    downloads=DEFAULT_DOWNLOADS,
    keep_build_env=False,
):
    """Build, repair and smoke-test a cell of another machine by cross-compiling (ci/builder/cross.py): the cell's torch for
    this machine in a build virtualenv (its headers; the library links against the target's torch of the stable
    floor, downloaded once with the target's numpy and Python sysroot), then under qemu the render of
    tests/support/platform_render.py with the repaired wheel. Returns the result dict (also in result.json)."""
    from ci.builder import cross

    name, work, out, logs = cell_folders(cell, python_version, work_root, out_root)
    result = {
        "cell": cell.id,
        "python": python_version,
        "status": "failed",
        "step": None,
        "times": {},
        "archs_requested": "",
        "log_dir": logs,
        "cross": f"{cell.target.cross} -> {cell.target.machine}",
    }
    steps = Steps(CROSS_STEPS, name)
    build_venv = os.path.join(work, "build-venv")
    try:
        with steps("torch"):
            result["step"] = "torch"
            torch_wheels = fetch_torch(
                cell, python_version, downloads, os.path.join(logs, "torch.log"), cell.host_torch_requirement()
            )
        with steps("env"):
            result["step"] = "env"
            python = make_env(
                build_venv, python_version, torch_wheels, [tools.CELL_REQUIREMENTS], os.path.join(logs, "env.log")
            )
            src = os.path.join(work, "src")
            copy_source(src)
        with steps("cold"):
            result["step"] = "cold"
            for old in glob.glob(os.path.join(out, "*.whl")):
                os.remove(old)
            # In the build virtualenv: its torch gives the headers, its packages torch's pure-Python dependencies.
            cmd = [
                python,
                "-c",
                "import sys; from ci.builder import cross; print(cross.build(sys.argv[1], source=sys.argv[2]))",
                out,
                src,
            ]
            run_logged(
                cmd,
                os.path.join(logs, "build-cross.log"),
                "cross build",
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=ROOT),
                show=progress.echo_compiler,
            )
            (repaired,) = glob.glob(os.path.join(out, "prerast-*.whl"))
            plat_tag = ".".join(wheel.wheel_tags(repaired)[2])
            if not plat_tag.endswith("_" + cell.target.machine):
                raise CellFailed(f"the cross-built wheel is tagged {plat_tag}, not for {cell.target.machine}")
            facts_in = checked_wheel(cell, repaired, plat_tag)
            result.update(
                wheel=repaired,
                size=os.path.getsize(repaired),
                platform_tag=plat_tag,
                auditwheel_show=plat_tag,
                plat_requested=None,
                archs=[],
                grafted=facts_in["grafted"],
                build_info=facts_in["build_info"],
            )
        with steps("smoke"):
            result["step"] = "smoke"
            cmd, env = cross.python_command(installed=cross.install(repaired))
            script = os.path.join(ROOT, "tests", "support", "platform_render.py")
            started = time.time()
            r = subprocess.run(cmd + [script], capture_output=True, text=True, env=env, cwd=work, timeout=1800)
            took = time.time() - started
            with open(os.path.join(logs, "smoke-qemu.log"), "w") as f:
                f.write(r.stdout + r.stderr)
            if r.returncode:
                raise CellFailed(f"the render under qemu failed:\n{r.stderr[-3000:]}")
            render = json.loads(r.stdout)
            if render["machine"] != cell.target.machine or not all(render["nonzero"].values()):
                raise CellFailed(
                    f"the render under qemu ran on {render['machine']} with empty outputs: {render['nonzero']}"
                )
            result.update(
                smoke={
                    "device": "cpu (qemu-user)",
                    "machine": render["machine"],
                    "torch": render["torch"],
                    "hashes": render["hashes"],
                    "qemu_run_s": took,
                },
                runtime_venv=None,
            )
        result.update(status="ok", step=None, times=dict(steps.times))
    except (CommandFailed, CellFailed, RuntimeError, subprocess.CalledProcessError, cross.ToolsMissing) as e:
        result["error"] = str(e)
        result["times"] = steps.times
        log(f"FAILED at step {result['step']}: {str(e)[:2000]}", name)
    finally:
        if not keep_build_env:
            shutil.rmtree(build_venv, ignore_errors=True)
        save_result(result, out_root)
    return result


def save_result(result, out_root=DEFAULT_OUT):
    with open(os.path.join(out_root, run_name_of(result), "result.json"), "w") as f:
        json.dump(result, f, indent=2)


def run_name_of(result):
    return f"{result['cell']}-py{result['python']}"


def serves(wheel_cell, runtime_cell):
    """Does the wheel of cell `wheel_cell` load into the torch build of cell `runtime_cell`? A stable wheel loads
    into every torch from its floor on (CUDA kernels only with its CUDA major); a classic one into its own minor
    with the same CUDA version, or where either side is CPU-only (CPU ops)."""
    from ci import matrix

    w, rt = matrix.find(wheel_cell), matrix.find(runtime_cell)
    if w.kind == "stable":  # its floor is the oldest release it serves
        return matrix._vkey(rt.torch)[:2] >= min(matrix._vkey(r)[:2] for r, _ in w.serves)
    return matrix.minor(w.torch) == matrix.minor(rt.torch) and (
        w.platform == rt.platform or "cpu" in (w.platform, rt.platform)
    )


def cross_check_all(results, out_root=DEFAULT_OUT):
    """Every built wheel next to every other runtime's torch: a wheel that serves that torch must load and render
    there, any other must refuse to load with the loader's message.
    Returns rows (wheel cell, runtime cell/python, ok, message) and writes crosscheck.json."""
    built = [r for r in results if r.get("status") == "ok"]
    runtimes = {}
    for r in built:
        if r.get("runtime_venv") and os.path.isdir(r["runtime_venv"]):
            runtimes.setdefault(r["cell"], r)
    from ci import matrix

    cells = matrix.load()
    target = {r["cell"]: matrix.find(r["cell"], cells).target for r in built}
    rows = []
    for rt in runtimes.values():
        for r in built:
            # pip installs no wheel of another machine (a forced one is refused by the loader: tests/runtime/test_platforms.py)
            if r["cell"] == rt["cell"] or target[r["cell"]] != target[rt["cell"]]:
                continue
            expect_load = serves(r["cell"], rt["cell"])
            ok, message = smoke.cross_check(rt["runtime_venv"], r["wheel"], expect_load)
            verdict = {
                (True, True): "loads, as it serves that torch",
                (True, False): "FAILED TO LOAD",
                (False, True): "refused as expected",
                (False, False): "NOT REFUSED",
            }[expect_load, ok]
            log(f"cross-check: {r['cell']} wheel (py{r['python']}) under torch {rt['cell']}: {verdict}")
            rows.append(
                {
                    "wheel_cell": f"{r['cell']} (built with py{r['python']})",
                    "expect_load": expect_load,
                    "runtime": f"{rt['cell']} py{rt['python']}",
                    "ok": ok,
                    "message": message,
                }
            )
        smoke.install(rt["runtime_venv"], rt["wheel"])  # leave each runtime with its own wheel
    with open(os.path.join(out_root, "crosscheck.json"), "w") as f:
        json.dump(rows, f, indent=2)
    return rows


def load_results(out_root=DEFAULT_OUT):
    found = []
    for path in sorted(glob.glob(os.path.join(out_root, "*", "result.json"))):
        with open(path) as f:
            found.append(json.load(f))
    return found


if __name__ == "__main__":
    sys.exit("ci/builder/cells.py is a library; use: python -m ci build --cell 2.14.1+cu130")
