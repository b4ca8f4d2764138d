#!/usr/bin/env bash
# Builds the prerast wheel for the pinned torch into dist/, repairs it, installs it into a fresh runtime
# virtualenv with no compiler, nvcc or ninja on PATH and CUDA_HOME unset, and renders dist/prerast-demo.png there.
#   PYTHON                  interpreter for both virtualenvs (default python3.11)
#   PRERAST_CUDA_ARCH_LIST  GPU archs (default: every arch the torch build supports from 7.5 up, + PTX)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
start=$(date +%s)

"$PYTHON" -m ci wheel venv .venv/build -r ci/requirements-build.txt
wheel=$(.venv/build/bin/python -m ci wheel build --out dist | tail -n 1)
built=$(date +%s)

rm -rf .venv/runtime
torch_req=$(grep '^torch==' ci/requirements-build.txt)
"$PYTHON" -m ci wheel venv .venv/runtime "$torch_req" numpy
.venv/build/bin/python -m ci wheel smoke .venv/runtime "$wheel" --png dist/prerast-demo.png

echo
echo "wheel:  $wheel ($(du -h "$wheel" | cut -f1), built in $((built - start)) s including the build venv)"
echo "render: dist/prerast-demo.png, from .venv/runtime (no compiler, nvcc or ninja on PATH)"
