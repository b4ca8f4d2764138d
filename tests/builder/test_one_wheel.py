"""The one wheel per target: `pip install prerast` serves torch from 2.4 on, CUDA 12 and CUDA 13 builds and CPU-only
torch alike, from one file.

The parts are built here as `python -m ci wheel-local` builds them (the CPU, CUDA 12 and CUDA 13 kernel libraries,
the stable binding and the torch 2.4 classic binding: ci/builder/wheel_local.py, once per source tree; ci/test.sh
built them already) and merged. The wheel then goes into fresh virtualenvs of PyPI's torch 2.14.1 (CUDA 13), 2.10.0
(CUDA 12.8), 2.4.1 (CUDA 12.1) and torch 2.13.0+cpu, each with no compiler
reachable. There a program of the shape users run renders a scene through every op with gradients, on the CPU,
and its numbers are compared with this process's (the checkout's build, which tests/core checks against NumPy
models); the CUDA kernels must be registered exactly when torch is a CUDA build (no GPU is needed for that).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import pytest
import torch

import out_of_memory
import prerast
from shared_torch import TORCH_SPEC, make_venv, shared_torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import merge as _merge, wheel_local  # noqa: E402
from ci.builder.smoke import runtime_env  # noqa: E402
from ci.repair import served  # noqa: E402

pytestmark = [pytest.mark.wheel, pytest.mark.slow]
SUPPORT = os.path.join(ROOT, "tests", "support")
ARCHS = [os.environ.get("PRERAST_CUDA_ARCH_LIST") or "9.0"]  # ci/test.sh's, so that its parts serve here
CLASSIC = "2.4.1"  # the torch ci/test.sh builds the classic binding with (the venv below shares its 5 GB)
# (the torch installed, its CUDA major or None, the binding that serves it, the CUDA kernels it loads)
TORCHES = [
    ("torch==2.14.1", "13", "stable", "cu13"),
    ("torch==2.10.0", "12", "stable", "cu12"),
    ("torch==2.4.1", "12", "classic", "cu12"),
    (TORCH_SPEC, None, "stable", None),
]

# A user's program: a CUDA context made with device='cpu' under the CPU fallback (as programs that pick their
# device at run time do), rasterize -> interpolate -> mipmapped texture -> antialias, a loss and its gradients.
PROGRAM = r"""
import json, sys
import numpy as np, torch
import prerast
from prerast import _loader
from render_scene import grid_scene, render

pos, tri, uv, tex = grid_scene(n=6, images=2)
pos.requires_grad_(True)
tex.requires_grad_(True)
glctx = prerast.RasterizeCudaContext(device="cpu")
color, loss = render(glctx, pos, tri, uv, tex, torch.full((2, 24, 20, 3), 0.5))
loss.backward()
np.savez(sys.argv[1], color=color.detach().numpy(), pos_grad=pos.grad.numpy(), tex_grad=tex.grad.numpy())
info = _loader.status()["info"]
print(json.dumps({
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "abi": info["abi"],
    "binding": info["path"],
    "cuda_kernels": info["cuda_kernels"] if _loader.status()["cuda"] is None else None,
    "registered": {key: torch._C._dispatch_has_kernel_for_dispatch_key("prerast::rasterize_fwd", key)
                   for key in ("CPU", "CUDA")},
}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the merged wheel, {part name: part wheel}) from the parts wheel-local builds (kept between runs)."""
    out = str(tmp_path_factory.mktemp("one-wheel"))
    try:
        merged, parts = wheel_local.wheel_local(out, ARCHS, [CLASSIC], ["12", "13"])
    except SystemExit as e:  # no CUDA 12 toolkit can be had here (no apt, no network)
        pytest.skip(str(e))
    names = {os.path.basename(os.path.dirname(p)): p for p in parts}
    return merged, names


def wheel_info(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("prerast/_build_info.json")), z.namelist()


def test_one_wheel_carries_every_part(built):
    merged, parts = built
    name = os.path.basename(merged)
    assert name.startswith(f"prerast-{prerast.__version__.split('+')[0]}-py3-none-manylinux_") and "+" not in name
    info, names = wheel_info(merged)
    assert [info["abi"]] + [b["abi"] for b in info["bindings"]] == ["stable", "classic"]
    assert info["bindings"][0]["torch_version"].startswith(CLASSIC)
    assert sorted(info["kernels"]) == ["cpu", "cu12", "cu13"]
    assert info["kernels"]["cu12"]["cuda_version"] == "12.4" and info["kernels"]["cu13"]["cuda_version"].startswith(
        "13."
    )
    assert all(info["kernels"][k]["cuda_archs"] == ARCHS for k in ("cu12", "cu13"))
    # Every part recorded, with its file's digest; every library stamped and present.
    assert sorted(p["wheel"] for p in info["parts"]) == sorted(os.path.basename(p) for p in parts.values())
    by_name = {os.path.basename(p): p for p in parts.values()}
    for record in info["parts"]:
        with open(by_name[record["wheel"]], "rb") as f:
            assert record["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert all("prerast/" + lib in names for lib in info["libraries"])
    size = os.path.getsize(merged)
    print(f"\n{name}: {size / 1e6:.1f} MB; parts: " + ", ".join(sorted(parts)))
    assert size < 25e6


def test_each_part_carries_only_the_libraries_its_build_stamped(built):
    """wheel-local builds each part from a fresh copy of the sources, as each part job builds from a fresh
    checkout: no part carries a library an earlier part's build left behind."""
    _, parts = built
    for name, wheel in parts.items():
        info, names = wheel_info(wheel)
        loose = {n.split("/", 1)[1] for n in names if n.startswith("prerast/") and n.count("/") == 1}
        carried = {n for n in loose if n.endswith((".so", ".pyd", ".dylib"))}
        assert carried == set(info["libraries"]), (name, sorted(carried))


def test_every_library_is_served_where_it_goes(built):
    """ci/repair/served.py on the merged wheel and each part: no run path of this machine, cudart imports in the
    oldest served runtime of their CUDA major, and the kernel libraries within manylinux_2_28's symbol versions with
    no dl* import (CCCL's NVTX ranges, which needed GLIBC_2.34 here, are compiled out). The bindings' versions
    follow the build host's C++ runtime (CI builds them in the manylinux_2_28 image; this host's are newer)."""
    merged, parts = built
    for wheel in [merged, *parts.values()]:
        report = served.audit(wheel)
        assert report, wheel
        for library, problems in report.items():
            if "_kernels_" not in library:
                problems = [p for p in problems if "newer than" not in p]
            assert problems == [], (os.path.basename(wheel), library, problems)
    with zipfile.ZipFile(merged) as z, tempfile.TemporaryDirectory() as tmp:
        kernels = [z.extract(n, tmp) for n in z.namelist() if re.search(r"prerast/_kernels_\w+\.abi3\.so$", n)]
        assert len(kernels) == 3
        for library in kernels:
            imports = {name for name, _ in served.dynamic_symbols(library)}
            assert not imports & {"dlopen", "dlsym", "dlclose"}, (library, imports & {"dlopen", "dlsym", "dlclose"})


OOM_CHILD = out_of_memory.CHILD + "\nimport prerast\nprint(json.dumps(run(ops, prerast)))\n"


@pytest.mark.parametrize("spec,cuda_major,abi,kernels", TORCHES, ids=[t[0] for t in TORCHES])
def test_out_of_memory_reaches_users_as_torch_out_of_memory_error(venvs, tmp_path, spec, cuda_major, abi, kernels):
    """Under every torch the wheel serves (torch 2.10's stable ABI loses a failed allocation's message; 2.4 is the
    classic binding), memory that cannot be had is torch.OutOfMemoryError from a public function and says so
    from a raw op (tests/support/out_of_memory.py)."""
    env = runtime_env(venvs[spec], str(tmp_path))
    env.update(PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [os.path.join(venvs[spec], "bin", "python"), "-c", OOM_CHILD], capture_output=True, text=True, env=env,
        cwd=str(tmp_path), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    raised = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (kind, message) in raised.items():
        if name == "raw bad input":
            assert kind == "ValueError", (spec, kind, message)
            continue
        op = "interpolate" if "interpolate" in name else "rasterize"
        problem = out_of_memory.out_of_memory_problem(kind, message, [op], public=name.startswith("public"))
        assert problem is None, (spec, name, problem)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory, built):
    """{torch spec: venv} with the merged wheel installed, torch shared from .venv (ci/builder/shared_torch.py)."""
    merged, _ = built
    found = {}
    for spec, *_ in TORCHES:
        site = shared_torch(spec)
        venv = str(tmp_path_factory.mktemp("venv") / "v")
        make_venv(venv, site, with_pip=False)
        install(venv, merged)
        found[spec] = venv
    return found


def install(venv, wheel):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            os.path.join(venv, "bin", "python"),
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            wheel,
        ],
        check=True,
    )


def run_program(venv, tmp_path, home_name="home"):
    """Run PROGRAM in venv as a slim runtime image would (only the venv on PATH, compilers that fail)."""
    home = tmp_path / home_name
    (home / "tmp").mkdir(parents=True)
    env = runtime_env(venv, str(home))
    env.update(PYTHONPATH=SUPPORT, PRERAST_CUDA_CONTEXT_FALLBACK="cpu", PYTHONWARNINGS="ignore")
    out_file = tmp_path / f"{home_name}.npz"
    done = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", PROGRAM, str(out_file)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(home),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), np.load(out_file)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """PROGRAM's numbers in this process's prerast."""
    sys.path.insert(0, SUPPORT)
    from render_scene import grid_scene, render

    pos, tri, uv, tex = grid_scene(n=6, images=2)
    pos.requires_grad_(True)
    tex.requires_grad_(True)
    color, loss = render(prerast.RasterizeCpuContext(), pos, tri, uv, tex, torch.full((2, 24, 20, 3), 0.5))
    loss.backward()
    return {"color": color.detach().numpy(), "pos_grad": pos.grad.numpy(), "tex_grad": tex.grad.numpy()}


@pytest.mark.parametrize("spec,cuda_major,abi,kernels", TORCHES, ids=[t[0] for t in TORCHES])
def test_the_wheel_serves_this_torch(venvs, reference, tmp_path, spec, cuda_major, abi, kernels):
    report, numbers = run_program(venvs[spec], tmp_path)
    assert report["torch"].startswith(spec.split("==")[1].split("+")[0])
    assert (report["cuda"] or "").split(".")[0] == (cuda_major or "")
    assert report["abi"] == abi and report["cuda_kernels"] == kernels, report
    # The CUDA kernels are registered exactly when torch is a CUDA build; the CPU ones always.
    assert report["registered"] == {"CPU": True, "CUDA": cuda_major is not None}, report
    for key, want in reference.items():
        np.testing.assert_allclose(numbers[key], want, rtol=1e-5, atol=1e-6, err_msg=f"{key} under {spec}")
    assert float(np.abs(reference["pos_grad"]).sum()) > 0 and float(np.abs(reference["tex_grad"]).sum()) > 0


def test_a_slim_wheel_serves_the_torch_it_names(built, tmp_path):
    """--slim of the classic 2.4 binding, the CPU and the CUDA 12 kernels: the per-(torch, CUDA) wheel of the index
    pages, which installs and works in a torch 2.4.1 (CUDA 12.1) venv."""
    _, parts = built
    slim = _merge.merge([parts["binding-pt24"], parts["kernels-cpu"], parts["kernels-cu12"]], str(tmp_path), slim=True)
    assert os.path.basename(slim).startswith(f"prerast-{prerast.__version__.split('+')[0]}+pt24cu121-py3-none-")
    info, _ = wheel_info(slim)
    assert info["abi"] == "classic" and info["bindings"] == [] and sorted(info["kernels"]) == ["cpu", "cu12"]
    venv = str(tmp_path / "venv")
    make_venv(venv, shared_torch("torch==2.4.1"), with_pip=False)
    install(venv, slim)
    report, _ = run_program(venv, tmp_path)
    assert report["abi"] == "classic" and report["cuda_kernels"] == "cu12" and report["registered"]["CUDA"]
    stable = _merge.merge(
        [parts["binding-stable"], parts["kernels-cpu"], parts["kernels-cu13"]], str(tmp_path), slim=True
    )
    assert "+cu13-" in os.path.basename(stable)
    with pytest.raises(_merge.MergeRefused, match="--slim takes one binding"):
        _merge.merge(list(parts.values()), str(tmp_path), slim=True)


def test_damaged_or_foreign_parts_are_refused(built, tmp_path):
    _, parts = built
    good = [parts["binding-stable"], parts["kernels-cpu"]]
    # A flipped byte in a kernel library: its stamp no longer holds.
    damaged = str(tmp_path / os.path.basename(parts["kernels-cu13"]))
    with zipfile.ZipFile(parts["kernels-cu13"]) as src, zipfile.ZipFile(damaged, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith(".abi3.so"):
                data = data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]
            dst.writestr(item, data)
    with pytest.raises(_merge.MergeRefused, match="_kernels_cu13.abi3.so is .* but its build stamped .* damaged part"):
        _merge.merge(good + [damaged], str(tmp_path))
    # A part of another version, or of another platform tag.
    for old, new, what in (
        ("-0.", "-9.", "parts of one version only"),
        ("manylinux_", "musllinux_", "one platform tag"),
    ):
        other = str(tmp_path / os.path.basename(parts["kernels-cu12"]).replace(old, new, 1))
        shutil.copy(parts["kernels-cu12"], other)
        with pytest.raises(_merge.MergeRefused, match=what):
            _merge.merge(good + [other], str(tmp_path))
    # Parts repaired to different manylinux levels (auditwheel picks the oldest each one's symbols allow): the
    # merged wheel needs the newest glibc of them.
    older = str(tmp_path / re.sub(r"manylinux_\d+_\d+", "manylinux_2_17", os.path.basename(parts["kernels-cu12"])))
    shutil.copy(parts["kernels-cu12"], older)
    level = re.search(r"manylinux_\d+_\d+", os.path.basename(parts["binding-stable"])).group(0)
    merged = _merge.merge(good + [older], str(tmp_path / "levels"))
    assert f"-{level}_" in os.path.basename(merged)
    with zipfile.ZipFile(merged) as z:
        wheel_file = z.read(f"prerast-{prerast.__version__.split('+')[0]}.dist-info/WHEEL").decode()
    assert f"Tag: py3-none-{level}_x86_64" in wheel_file, wheel_file
    with pytest.raises(_merge.MergeRefused, match="no part carries the CPU kernel library"):
        _merge.merge([parts["binding-stable"], parts["kernels-cu12"]], str(tmp_path))
    with pytest.raises(_merge.MergeRefused, match="both carry the cpu kernel library"):
        _merge.merge(good + [parts["kernels-cpu"]], str(tmp_path))


def test_a_torch_no_part_serves_is_told_what_the_wheel_carries(built, tmp_path):
    """torch 2.5 (a classic minor this wheel has no binding for): the refusal names the bindings it carries and the
    command that fits (the index page of that torch build)."""
    merged, _ = built
    with zipfile.ZipFile(merged) as z:
        z.extractall(tmp_path)
    from prerast_meta import build_info, compat

    info, why = build_info.read(str(tmp_path / "prerast"))
    assert why is None
    run = {"python": "3.11.0", "torch_version": "2.5.1+cu124", "cuda_version": "12.4", "cxx11_abi": False}
    chosen, reasons = build_info.choose(info, run)
    assert reasons and "served by none of the bindings" in reasons[0]
    assert "torch >= 2.10 (stable ABI)" in reasons[0] and "torch 2.4.x" in reasons[0]
    message = compat.mismatch_message(chosen, reasons, run)
    assert "torch-2.5.1+cu124.html" in message and "pip install" in message
    # The same wheel, run by torch 2.4.1 with CUDA 11.8: the classic binding serves it; CUDA 11 kernels there are none.
    run = dict(run, torch_version="2.4.1+cu118", cuda_version="11.8")
    chosen, reasons = build_info.choose(info, run)
    assert reasons == [] and chosen["abi"] == "classic"
    assert "built for CUDA 13.x but torch 2.4.1+cu118 runs CUDA 11.8" in compat.cuda_skip_reason(chosen, run)


def test_doctor_names_every_part(venvs, built, tmp_path):
    """`python -m prerast doctor` in the torch 2.4.1 venv: the classic binding and the CUDA 12 kernels chosen, and
    every part the wheel was merged from, with its digest."""
    venv = venvs["torch==2.4.1"]
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    env = runtime_env(venv, str(home))
    run = [os.path.join(venv, "bin", "python"), "-m", "prerast", "doctor"]
    text = subprocess.run(run, capture_output=True, text=True, env=env, cwd=str(home), timeout=300)
    report = json.loads(subprocess.run(run + ["--json"], capture_output=True, text=True, env=env, timeout=300).stdout)
    info = report["plugin"]["build_info"]
    assert info["abi"] == "classic" and info["cuda_kernels"] == "cu12", info
    _, parts = built
    assert sorted(p["wheel"] for p in info["parts"]) == sorted(os.path.basename(p) for p in parts.values())
    assert text.stdout.count("part:     ") == len(parts), text.stdout
    assert f"part:     binding for torch 2.4.x, built with torch {CLASSIC}" in text.stdout, text.stdout
    assert "part:     kernels cu12 (CUDA 12.4, archs " in text.stdout, text.stdout
