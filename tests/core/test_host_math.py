"""The CUDA backward's per-pixel arithmetic, run on the host: tests/core/host/grad_pixel.cpp compiles the shared header
csrc/core/rasterize.h with the host compiler (as the CPU build does: no contraction of float operations) and
compares the per-pixel gradient the GPU computes (frag_grad_pixel) with the CPU backward's formula for the same
pixels, which the other tests hold to float64 models. Needs a C++ compiler and the source tree."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


@pytest.mark.skipif(
    not CXX or not os.path.isdir(os.path.join(ROOT, "csrc", "core")), reason="needs a C++ compiler and the source tree"
)
def test_gpu_per_pixel_gradient_matches_the_cpu_formula(tmp_path):
    exe = tmp_path / "grad_pixel"
    subprocess.run(
        [
            CXX,
            "-std=c++20",
            "-O2",
            "-ffp-contract=off",
            "-I",
            os.path.join(ROOT, "csrc", "core"),
            os.path.join(ROOT, "tests", "core", "host", "grad_pixel.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        timeout=300,
    )
    pixels, plain, scaled, nonfinite = subprocess.run(
        [str(exe)], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()
    assert int(pixels) > 50_000 and int(nonfinite) == 0
    # Relative to each vertex's largest component; per-vertex scales up to 2^40 leave the small vertices' gradients
    # less precise on both paths.
    assert float(plain) < 2e-3 and float(scaled) < 2e-2, (plain, scaled)
