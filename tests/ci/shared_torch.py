"""A CPU torch installed once into .venv/test-torch-cpu (kept between runs like .venv/build) and shared by the
test virtualenvs of runtime images through a .pth file: a fresh venv with torch in seconds, not minutes."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_SPEC = os.environ.get("PRERAST_TEST_CPU_TORCH", "torch==2.13.0+cpu")
TORCH_SITE = os.path.join(ROOT, ".venv", "test-torch-cpu")


def shared_torch():
    """The folder of the shared CPU torch, installed there once."""
    marker = os.path.join(TORCH_SITE, ".installed")
    if not (os.path.exists(marker) and open(marker).read() == TORCH_SPEC):
        shutil.rmtree(TORCH_SITE, ignore_errors=True)
        out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "--target", TORCH_SITE, TORCH_SPEC, "numpy"], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot install {TORCH_SPEC} (set PRERAST_TEST_CPU_TORCH): {out.stderr[-2000:]}")
        with open(marker, "w") as f:
            f.write(TORCH_SPEC)
    return TORCH_SITE


def make_venv(path, torch_site, packages=()):
    """A fresh virtualenv that imports torch from torch_site (and has `packages` of its own)."""
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    (site,) = glob.glob(os.path.join(path, "lib", "python*", "site-packages"))
    with open(os.path.join(site, "shared_torch.pth"), "w") as f:
        f.write(torch_site + "\n")
    if packages:
        pip(path, "install", *packages)
    return path


def pip(venv, *args):
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                   check=True)
