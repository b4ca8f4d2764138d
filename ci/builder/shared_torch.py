"""A CPU torch installed once into .venv/test-torch-cpu (kept between runs like .venv/build) and shared by fresh
virtualenvs through a .pth file: a venv with torch in seconds, not minutes (the wheel tests' runtime images and
`python -m ci rehearse`'s installs)."""

import glob
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_SPEC = os.environ.get("PRERAST_TEST_CPU_TORCH", "torch==2.13.0+cpu")
TORCH_SITE = os.path.join(ROOT, ".venv", "test-torch-cpu")


class TorchUnavailable(RuntimeError):
    """The shared torch cannot be installed here."""


def shared_torch(spec=TORCH_SPEC, variable="PRERAST_TEST_CPU_TORCH"):
    """The folder of the shared CPU torch `spec` (a pip requirement), installed there once: TORCH_SITE for
    TORCH_SPEC, a folder of its own for another spec (.venv/test-torch-cpu-2.10.0+cpu), so that neither replaces
    the other. A spec that is a folder holding torch (a site-packages) is shared as it is. `variable` is the
    environment variable that sets spec, for the error message."""
    if os.path.isdir(os.path.join(spec, "torch")):
        return spec
    site = TORCH_SITE if spec == TORCH_SPEC else f"{TORCH_SITE}-{spec.partition('==')[2] or spec}"
    marker = os.path.join(site, ".installed")
    if not (os.path.exists(marker) and open(marker).read() == spec):
        shutil.rmtree(site, ignore_errors=True)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--target",
                site,
                spec,
                "numpy",
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise TorchUnavailable(
                f"cannot install {spec} (set {variable} to a requirement or to a site-packages "
                f"folder holding torch): {out.stderr[-2000:]}"
            )
        with open(marker, "w") as f:
            f.write(spec)
    return site


def site_packages(venv):
    (site,) = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
    return site


def make_venv(path, torch_site, packages=(), with_pip=True):
    """A fresh virtualenv that imports torch from torch_site (and has `packages` of its own). Without pip, install
    into it with `pip --python <venv>/bin/python` of this interpreter (no pip copied in: faster)."""
    subprocess.run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), path], check=True)
    with open(os.path.join(site_packages(path), "shared_torch.pth"), "w") as f:
        f.write(torch_site + "\n")
    if packages:
        pip(path, "install", *packages)
    return path


def pip(venv, *args):
    subprocess.run(
        [os.path.join(venv, "bin", "python"), "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True
    )
