#!/usr/bin/env bash
# Runs the whole test suite: builds the parts of the one Linux x86-64 wheel and merges them (python -m ci
# wheel-local: the CPU, CUDA 12 and CUDA 13 kernel libraries for one GPU arch unless PRERAST_CUDA_ARCH_LIST says
# otherwise, the stable binding and the torch 2.4.1 classic one), installs it into the build virtualenv, and runs
# pytest against it; the wheel tests (tests/builder) inspect and smoke-test that same wheel and its parts rather
# than building others.
#   --quick   the loop of a change (a few minutes): the CPU library built in place into package/prerast
#             (python -m ci dev --cpu) and the tests that need no wheel, no other virtualenv and no network, the
#             ones pyproject.toml's markers leave unmarked (QUICK_MARKERS).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PRERAST_CUDA_ARCH_LIST=${PRERAST_CUDA_ARCH_LIST:-9.0}
QUICK_MARKERS="not slow and not wheel and not examples"
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi

"$PYTHON" -m ci wheel venv .venv/build -r ci/requirements-build.txt ci/requirements-ci.txt docs/requirements.txt
if [ "$quick" = 1 ]; then
  # No wheel: pytest imports this checkout's package (PYTHONPATH=package), even where a wheel is installed.
  exec .venv/build/bin/python -m ci dev --cpu -- -q -p no:cacheprovider --durations=15 -m "$QUICK_MARKERS" "$@"
fi
# The classic binding is built with torch 2.4.1, the torch the tests install it into: one CUDA torch of 5 GB fewer.
wheel=$(.venv/build/bin/python -m ci wheel-local --archs "$PRERAST_CUDA_ARCH_LIST" --classic 2.4.1 --out dist | tail -n 1)
.venv/build/bin/python -m pip install -q --no-deps --force-reinstall --disable-pip-version-check "$wheel"
export PRERAST_TEST_WHEEL="$wheel"
# No path given: pyproject.toml's testpaths (tests/); a path given runs only what it names.
exec .venv/build/bin/python -m pytest -q -p no:cacheprovider --durations=30 "$@"
