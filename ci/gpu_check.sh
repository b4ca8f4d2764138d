#!/usr/bin/env bash
# The GPU check (ci/builder/gpu_check.py says what it runs): one wheel built elsewhere (PRERAST_WHEEL=), on a machine with an
# NVIDIA GPU, its own torch and no network, in under ten minutes; report in ${GPU_CHECK_OUT:-gpu-check}/report.json.
#   PRERAST_WHEEL=prerast-...whl bash ci/gpu_check.sh [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
command -v "$PY" > /dev/null || { echo "gpu-check: no $PY (set PYTHON to the interpreter with torch)" >&2; exit 2; }
PYTHON=$PY exec "$PY" ci/builder/gpu_check.py "$@"
