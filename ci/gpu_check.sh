#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU, torch (CUDA build) and a CUDA toolkit (nvcc) of the same major
# version: builds and installs the wheel for the local torch and this GPU's arch, runs the CUDA-vs-CPU tests and
# every op test and the fuzz suite on both devices, the benchmark, and a small case and the fuzz cases under
# compute-sanitizer when it is installed. Writes its logs to ${GPU_CHECK_OUT:-gpu-check}/. Every step after the
# build fits what is left of GPU_CHECK_SECONDS (480 by default, counted from the start), so the whole check ends
# inside a lease of that length, with the most important steps first.
# PRERAST_WHEEL=path installs that wheel instead of building one: a stable-ABI wheel built elsewhere, or the one
# wheel of `python -m ci wheel-local` (its kernels of torch's CUDA major are the ones checked). The wheel built here
# carries the binding and the kernel libraries of this toolkit's CUDA major, as the one wheel does.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${GPU_CHECK_OUT:-gpu-check}" && cd "${GPU_CHECK_OUT:-gpu-check}" && pwd)
mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1  # a step stopped at its limit still leaves what it printed
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
cap=$($PY -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
export PRERAST_CUDA_ARCH_LIST=${PRERAST_CUDA_ARCH_LIST:-$cap}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
echo "torch: $($PY -c 'import torch; print(torch.__version__)')  arch: $PRERAST_CUDA_ARCH_LIST"

step() { echo; echo "=== $1 ($(date +%T), $(left) s left)"; }
status=0

start=$(date +%s)
deadline=$(( start + ${GPU_CHECK_SECONDS:-480} ))
left() { echo $(( deadline - $(date +%s) )); }
# The seconds a step may take: its cap $1, but no more than is left after keeping back $2 for later steps, and no
# less than $3 (a step that matters more than those later ones).
within() {
  local n=$(( $(left) - ${2:-0} )) floor=${3:-1}
  (( n > $1 )) && n=$1; (( n < floor )) && n=$floor; echo "$n"
}
if [ -n "${PRERAST_WHEEL:-}" ]; then
  step "install $PRERAST_WHEEL"
  wheel=$PRERAST_WHEEL
else
  step "build wheel for sm_${cap/./}"
  rm -rf "$out/wheel" && $PY -m pip wheel -q --no-build-isolation --no-deps -w "$out/wheel" . > "$out/build.log" 2>&1 \
    || { tail -50 "$out/build.log"; exit 1; }
  wheel=$(ls "$out"/wheel/prerast-*.whl)
fi
$PY -m pip install -q --no-deps --force-reinstall "$wheel" || exit 1
echo "installed $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KB) in $(( $(date +%s) - start )) s"

step "doctor: kind of binary, CUDA kernels loaded"
$PY -m prerast doctor | tee "$out/doctor.txt"
grep -q "CUDA kernels loaded" "$out/doctor.txt" || { echo "the CUDA library did not load"; status=1; }

step "tests on CPU and CUDA"
# test_no_sync: every op under torch.cuda.set_sync_debug_mode("error"), the device-side index checks, a whole render
# with gradients captured in a CUDA graph, and the rasterizer's path for tile lists that overflow their capacity.
# tests/runtime/programs: render programs in the style of real nvdiffrast users', against NumPy models and finite differences.
# tests/core/fuzz: thousands of bad and extreme inputs per device, each op family in a child process of its own.
# Spread over worker processes when pytest-xdist is there; a per-test limit when pytest-timeout is.
# precompile refuses a C++ compiler with only a static libstdc++ (some toolchains under /opt are): Inductor builds
# with $CXX, so point it at the system's g++ when precompile's own rule accepts that one.
static_only() {
  $PY -c 'import sys; from prerast._precompile import _static_only_libstdcxx as f; sys.exit(not f(sys.argv[1]))' "$1"
}
if static_only "${CXX:-g++}" && [ -x /usr/bin/g++ ] && ! static_only /usr/bin/g++; then
  echo "CXX=${CXX:-g++} has only a static libstdc++: Inductor uses /usr/bin/g++"; export CXX=/usr/bin/g++
fi
par=(); $PY -c "import xdist" 2> /dev/null && par=(-n 12) && export OMP_NUM_THREADS=1
$PY -c "import pytest_timeout" 2> /dev/null && par+=(--timeout 120)
# SIGINT at the limit: pytest stops and still prints which tests failed so far.
timeout -k 15 -s INT "$(within 270 150 120)" $PY -m pytest -q -p no:cacheprovider "${par[@]}" -rfE --durations 10 tests/core/ops tests/runtime/test_loader.py \
  tests/runtime/test_custom_ops.py tests/runtime/test_op_schemas.py tests/runtime/test_compile.py tests/core/test_no_sync.py tests/runtime/test_precompile.py \
  tests/runtime/programs tests/core/fuzz \
  --junitxml "$out/tests.xml" 2>&1 | tee "$out/tests.log" | tail -60
[ "${PIPESTATUS[0]}" = 0 ] || status=1
unset OMP_NUM_THREADS


if command -v compute-sanitizer > /dev/null || [ -x "$CUDA_HOME/bin/compute-sanitizer" ]; then
  step "compute-sanitizer (memcheck) on a small scene"
  cat > "$out/sanitize.py" <<'PYEOF'
import torch, prerast
ctx = prerast.RasterizeCudaContext()
g = torch.Generator().manual_seed(0)
pos = (torch.rand(2, 300, 4, generator=g) * 2 - 1).cuda()
pos[..., 3] = pos[..., 3].abs() + 0.2
tri = torch.randint(0, 300, (100, 3), generator=g, dtype=torch.int32).cuda()
pos.requires_grad_(True)
rast, db = prerast.rasterize(ctx, pos, tri, (67, 45))
(rast[..., :2].sum() + db.sum()).backward()
with prerast.DepthPeeler(ctx, pos[0].detach(), tri, (33, 17), ranges=torch.tensor([[0, 60], [40, 60]], dtype=torch.int32)) as p:
    p.rasterize_next_layer(); p.rasterize_next_layer()
# Every op of the CUDA library, forward and backward (each behind its device-side index checks).
rast, db = prerast.rasterize(ctx, pos, tri, (67, 45))
attr = torch.rand(2, 300, 3, device="cuda", requires_grad=True)
uv, uv_da = prerast.interpolate(attr[..., :2], rast, tri, rast_db=db, diff_attrs="all")
tex = torch.rand(1, 64, 48, 3, device="cuda", requires_grad=True)
color = prerast.texture(tex, uv.contiguous(), uv_da, filter_mode="linear-mipmap-linear")
out = prerast.antialias(color, rast, pos, tri)
out.sum().backward()
torch.cuda.synchronize()
torch.cuda.synchronize()
print("ok")
PYEOF
  timeout "$(within 90 90)" compute-sanitizer --tool memcheck --error-exitcode 9 $PY "$out/sanitize.py" 2>&1 | tail -20 | tee "$out/sanitizer.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1

  step "compute-sanitizer (memcheck) on the fuzz cases on CUDA"
  # The fuzz cases (tests/core/fuzz) in a seeded random order for as long as the budget allows, each process under
  # memcheck: a reported access error fails the case in progress. The cases that end in a device-side assert (each
  # needs a fresh process) are left to the test step above.
  fuzz_budget=$(within 210 110 10)  # no case starts after it; the one in progress may take its --timeout more
  timeout "$(( fuzz_budget + 60 ))" $PY tests/core/fuzz/fuzz_runner.py --device cuda --skip-device-asserts --timeout 60 \
    --budget "$fuzz_budget" \
    --prefix "compute-sanitizer --tool memcheck --error-exitcode 9" 2>&1 | tail -40 | tee "$out/fuzz-sanitizer.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
step "benchmark"
timeout "$(within 60 20 20)" $PY benchmarks/run.py --device cuda --json "$out/bench-cuda.json" | tee "$out/bench-cuda.txt"
timeout "$(within 30 0 10)" $PY benchmarks/run.py --device cuda cpu --quick --json "$out/bench-quick.json" | tee "$out/bench-quick.txt"
step "done: status $status"
exit $status
