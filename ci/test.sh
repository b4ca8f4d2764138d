#!/usr/bin/env bash
# Runs the whole test suite: builds and repairs the wheel (one GPU arch unless PRERAST_CUDA_ARCH_LIST says
# otherwise, to keep the build short), installs it into the build virtualenv, and runs pytest against it; the
# wheel tests (tests/builder) inspect and smoke-test that same wheel rather than building another.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PRERAST_CUDA_ARCH_LIST=${PRERAST_CUDA_ARCH_LIST:-9.0}

"$PYTHON" -m ci wheel venv .venv/build -r ci/requirements-build.txt ci/requirements-ci.txt docs/requirements.txt
wheel=$(.venv/build/bin/python -m ci wheel build --out dist | tail -n 1)
.venv/build/bin/python -m pip install -q --no-deps --force-reinstall --disable-pip-version-check "$wheel"
export PRERAST_TEST_WHEEL="$wheel"
# No path given: pyproject.toml's testpaths (tests/); a path given runs only what it names.
exec .venv/build/bin/python -m pytest -q -p no:cacheprovider --durations=30 "$@"
