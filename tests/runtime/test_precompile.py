"""prerast.precompile in two processes: A (a devel environment, compilers available) precompiles a render module
with `python -m prerast precompile`, and the render functions of render_variants.py (the public API's optional
arguments in their combinations: no diff_attrs or rast_db, textures with and without mip levels, 2D and cube,
antialias with and without a topology hash, range mode, depth peeling) with prerast.precompile, and renders them
eagerly; B (a runtime environment: no compiler, nvcc or ninja
on PATH, CC/CXX a program that records any call and fails, a fresh HOME and TMPDIR) loads the artifact and
renders the same images, calling no compiler (on the CPU, and on CUDA where a GPU is present); the module's round
trip also under the oldest torch the stable wheel serves, in a fresh venv. The training route is checked against
eager in one process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import prerast
from prerast_meta.compat import STABLE_FLOOR
from render_scene import grid_scene, render

pytestmark = pytest.mark.slow  # AOTInductor compiles C++: tens of seconds each

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")  # the helpers
# The oldest torch the stable wheel serves, as a CPU build to share into a fresh venv (ci/builder/shared_torch.py): a pip
# requirement, or a site-packages folder that holds that torch already.
OLDEST_TORCH = os.environ.get("PRERAST_TEST_OLDEST_TORCH", "torch==%d.%d.0+cpu" % STABLE_FLOOR)

PRECOMPILE_MODULE = textwrap.dedent("""
    import sys, torch
    from prerast.__main__ import main
    from render_scene import Renderer, grid_scene
    device = sys.argv[1]
    target = torch.rand(1, 20, 24, 3, generator=torch.Generator().manual_seed(3)).to(device)
    inputs = (*grid_scene(n=4, seed=3, device=device), target)
    torch.save(inputs, "inputs.pt")
    # The module: Renderer on the CPU, a subclass that rasterizes on CUDA for CUDA inputs.
    with open("scene_module.py", "w") as f:
        f.write("import render_scene\\nclass Renderer(render_scene.Renderer):\\n"
                f"    def __init__(self):\\n        super().__init__({device!r})\\n")
    assert main(["precompile", "scene_module:Renderer", "--inputs", "inputs.pt", "--out", "render.pt2"]) == 0
    torch.save(Renderer(device)(*inputs), "eager.pt")
""")
PRECOMPILE_VARIANTS = textwrap.dedent("""
    import prerast, render_variants
    variants, variant_inputs = render_variants.Variants(device), render_variants.inputs(device)
    torch.save(variant_inputs, "variant_inputs.pt")
    prerast.precompile(variants, variant_inputs, "variants.pt2")
    torch.save(variants(*variant_inputs), "variants_eager.pt")
""")
PROCESS_A = PRECOMPILE_MODULE + PRECOMPILE_VARIANTS

LOAD_MODULE = textwrap.dedent("""
    import json, shutil, sys, torch
    import prerast
    from torch._inductor import cpu_vec_isa
    render = prerast.load_precompiled("render.pt2")
    # Loading probed no vector ISA (no compiler here) and left no answer behind for later CPU compiles.
    assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 0, "loading fixed the vector ISA list"
    color, loss = render(*torch.load("inputs.pt"))
    torch.save((color, loss), "runtime.pt")
""")
LOAD_VARIANTS = textwrap.dedent("""
    variants = prerast.load_precompiled("variants.pt2")
    torch.save(tuple(variants(*torch.load("variant_inputs.pt"))), "variants_runtime.pt")
""")
REPORT_TOOLS = textwrap.dedent("""
    print(json.dumps({"tools_on_path": [t for t in ("cc", "gcc", "g++", "c++", "clang", "nvcc", "ninja")
                                        if shutil.which(t)]}))
""")
PROCESS_B = LOAD_MODULE + LOAD_VARIANTS + REPORT_TOOLS


def recorder(folder):
    """A compiler stand-in that records each call and fails."""
    path = os.path.join(folder, "record-compiler")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\necho "$0 $*" >> "{folder}/compiler-calls.log"\nexit 1\n')
    os.chmod(path, 0o755)
    return path


def runtime_env(folder):
    home = os.path.join(folder, "home")
    empty_bin = os.path.join(folder, "bin")
    for d in (home, os.path.join(home, "tmp"), empty_bin):
        os.makedirs(d, exist_ok=True)
    cc = recorder(folder)
    env = {
        "PATH": empty_bin,
        "HOME": home,
        "TMPDIR": os.path.join(home, "tmp"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "CC": cc,
        "CXX": cc,
        "CUDAHOSTCXX": cc,
        "PYTORCH_NVCC": cc,
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


def run(script, cwd, env, *args, python=sys.executable):
    out = subprocess.run([python, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


PYTHONPATH = os.environ.get("PYTHONPATH")  # the package under test, where it is not installed


def precompile_then_load_without_compiler(
    tmp_path, device, precompile, load, python=sys.executable, pythonpath=PYTHONPATH
):
    """Runs precompile (a script) in a devel process and load in a runtime one (runtime_env), both with python.
    Checks that the runtime saw no compiler and called none, and that the module's render equals eager."""
    devel = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SUPPORT, pythonpath])))
    run(precompile, tmp_path, devel, device, python=python)
    env = dict(runtime_env(str(tmp_path / "runtime")), PYTHONPATH=pythonpath or "")
    report = json.loads(run(load, tmp_path, env, python=python).strip().splitlines()[-1])
    assert report["tools_on_path"] == []
    assert not os.path.exists(tmp_path / "runtime" / "compiler-calls.log"), open(
        tmp_path / "runtime" / "compiler-calls.log"
    ).read()
    for got, want in zip(torch.load(tmp_path / "runtime.pt"), torch.load(tmp_path / "eager.pt")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "render.pt2").stat().st_size > 0


def test_runtime_loads_inference_artifact_without_compiler(tmp_path, device):
    precompile_then_load_without_compiler(tmp_path, device, PROCESS_A, PROCESS_B)
    got, want = torch.load(tmp_path / "variants_runtime.pt"), torch.load(tmp_path / "variants_eager.pt")
    assert len(got) == len(want) == 10
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, i
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=lambda m: f"output {i}: {m}")  # noqa: B023
    assert all(w.abs().sum() > 0 for w in want if w.numel()), "every variant draws something"


@pytest.mark.wheel
def test_oldest_torch_runtime_loads_inference_artifact_without_compiler(tmp_path):
    """The module's round trip (`python -m prerast precompile`, then a runtime with no compiler) under the oldest
    torch the stable wheel serves, in a fresh venv sharing that torch (ci/builder/shared_torch.py) with the wheel under
    test installed: torch's AOTInductor loader differs between it and the newest (which the test above runs)."""
    from shared_torch import make_venv, pip, shared_torch
    from wheel_under_test import find_test_wheel

    wheel = find_test_wheel()
    venv = make_venv(str(tmp_path / "venv"), shared_torch(OLDEST_TORCH, "PRERAST_TEST_OLDEST_TORCH"))
    pip(venv, "install", "--no-deps", wheel)
    python = os.path.join(venv, "bin", "python")
    version = run("import torch; print(torch.__version__)", tmp_path, dict(os.environ, PYTHONPATH=""), python=python)
    assert tuple(int(v) for v in version.split(".")[:2]) == STABLE_FLOOR, version
    precompile_then_load_without_compiler(
        tmp_path, "cpu", PRECOMPILE_MODULE, LOAD_MODULE + REPORT_TOOLS, python=python, pythonpath=None
    )


def test_training_artifact_equals_eager(tmp_path):
    ctx = prerast.RasterizeCpuContext()

    def step(pos, tri, uv, tex, target):
        return render(ctx, pos, tri, uv, tex, target)

    def inputs():
        pos, tri, uv, tex = grid_scene(n=4, seed=5)
        target = torch.rand(1, 18, 22, 3, generator=torch.Generator().manual_seed(5))
        return pos.requires_grad_(True), tri, uv, tex.requires_grad_(True), target

    training_artifact_equals_eager(tmp_path / "step.bin", step, inputs, grads=(0, 3))


def training_artifact_equals_eager(path, step, inputs, grads):
    """Precompiles step (returning (color, loss)) for training, loads it back, and checks that its color, loss and
    the gradients of inputs()[i] for i in grads equal eager ones. Returns eager's (color, loss, *gradients)."""
    path = prerast.precompile(step, inputs(), path, training=True)
    torch._dynamo.reset()
    loaded = prerast.load_precompiled(path, fn=step)
    results = []
    for fn in (loaded, step):
        args = inputs()
        color, loss = fn(*args)
        loss.backward()
        results.append((color.detach(), loss.detach(), *(args[i].grad for i in grads)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    return results[1]


def test_training_artifact_of_optional_argument_combinations_equals_eager(tmp_path):
    """The training route with the list arguments empty (no diff_attrs, no mip levels, 2D and cube) and range mode:
    the loaded function's outputs and gradients equal eager ones."""
    import render_variants

    ctx = prerast.RasterizeCpuContext()

    def step(pos, tri, uv, tex, env, normals, ranges):
        return render_variants.training_step(ctx, pos, tri, uv, tex, env, normals, ranges)

    def inputs():
        pos, tri, uv, tex, env, normals, ranges = render_variants.inputs(seed=6)
        return (
            pos.requires_grad_(True),
            tri,
            uv,
            tex.requires_grad_(True),
            env.requires_grad_(True),
            normals.requires_grad_(True),
            ranges,
        )

    eager = training_artifact_equals_eager(tmp_path / "variants.bin", step, inputs, grads=(0, 3, 4, 5))
    assert all(g.abs().sum() > 0 for g in eager[2:])


def test_dynamic_inference_artifact_serves_other_sizes(tmp_path):
    from render_scene import Renderer

    pos, tri, uv, tex = grid_scene(n=4)
    path = prerast.precompile(
        Renderer(), (pos, tri, uv, tex, torch.rand(1, 20, 24, 3)), tmp_path / "dyn.pt2", dynamic=True
    )
    loaded = prerast.load_precompiled(path)
    for n, res in ((5, (27, 31)), (6, (33, 17))):  # other vertex counts and resolutions than the example's
        pos, tri, uv, tex = grid_scene(n=n, seed=n)
        target = torch.rand(1, *res, 3)
        for got, want in zip(loaded(pos, tri, uv, tex, target), Renderer()(pos, tri, uv, tex, target)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def fake_compiler(folder, static_lib):
    """A g++ stand-in that answers --version and -print-file-name (finding libstdc++.a when static_lib, never
    libstdc++.so), and records any other call and fails."""
    open(os.path.join(folder, "libstdc++.a"), "w").close()
    path = os.path.join(folder, "fake-g++")
    with open(path, "w") as f:
        f.write(
            textwrap.dedent(f"""\
            #!/bin/sh
            case "$1" in
              --version) echo "g++ (fake) 12"; exit 0;;
              -print-file-name=libstdc++.a) {'echo "' + folder + '/libstdc++.a"' if static_lib else "echo libstdc++.a"};;
              -print-file-name=*) echo "${{1#-print-file-name=}}";;
              *) echo "$*" >> "{folder}/compile-calls.log"; exit 1;;
            esac
            """)
        )
    os.chmod(path, 0o755)
    return path


def test_compiler_with_only_static_libstdcxx_is_refused_before_compiling(tmp_path):
    from render_scene import Renderer

    compiler = fake_compiler(str(tmp_path), static_lib=True)
    inputs = (*grid_scene(n=2), torch.rand(1, 8, 8, 3))
    with torch._inductor.config.patch({"cpp.cxx": (compiler,)}):
        with pytest.raises(RuntimeError, match="only a static libstdc\\+\\+.*CXX="):
            prerast.precompile(Renderer(), inputs, tmp_path / "r.pt2")
    assert not (tmp_path / "compile-calls.log").exists() and not (tmp_path / "r.pt2").exists()


def test_compiler_without_libstdcxx_is_not_taken_for_a_static_one(tmp_path):
    # A compiler that finds neither library (clang with libc++, say) is not the crashing kind.
    from prerast._precompile import _static_only_libstdcxx

    assert not _static_only_libstdcxx(fake_compiler(str(tmp_path), static_lib=False))
    assert _static_only_libstdcxx(fake_compiler(str(tmp_path), static_lib=True))
    assert not _static_only_libstdcxx(str(tmp_path / "no-such-compiler"))
