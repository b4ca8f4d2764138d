"""The repaired wheel in a fresh runtime virtualenv with no compiler: it imports, renders, compiles nothing and
writes nothing. Slow (creates a virtualenv with torch): marked `wheel`."""

import json
import os
import subprocess
import sys
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.builder import wheel as wheel_tools  # noqa: E402
from shared_torch import make_venv, shared_torch  # noqa: E402
from wheel_under_test import find_test_wheel  # noqa: E402

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory):
    """A fresh venv with the wheel under test installed and a CPU-only torch (shared_torch.py: torch 2.13.0+cpu,
    not the CUDA torch the wheel is built with; the stable CUDA 13 wheel serves both, and the suite itself runs
    next to the CUDA one). Skips before making the venv when there is no wheel."""
    wheel = find_test_wheel()
    venv = str(tmp_path_factory.mktemp("runtime") / "venv")
    make_venv(venv, shared_torch())
    from ci.builder import smoke

    smoke.install(venv, wheel)
    return venv


def png_pixels(path):
    """Decode our own 8-bit RGB PNGs (one IDAT chunk, filter 0) to (width, height, bytes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    i = data.index(b"IDAT")
    n = int.from_bytes(data[i - 4 : i], "big")
    return w, h, zlib.decompress(data[i + 4 : i + 4 + n])


def test_wheel_renders_without_compiler(runtime_venv, tmp_path):
    png = tmp_path / "scene.png"
    report = wheel_tools.smoke(runtime_venv, find_test_wheel(), str(png))
    assert not report["cpp_extension_imported"]
    assert report["tools_on_path"] == []
    assert report["files_written"] == [] and report["venv_files_changed"] == []
    assert report["compiler_calls"] == []
    assert report["binary"].startswith(runtime_venv)
    w, h, raw = png_pixels(png)
    assert (w, h) == (256, 256) and any(raw)


@pytest.mark.parametrize(
    "offence, evidence",
    [
        # A runtime that starts the compiler it was given (as a JIT build would) ...
        ("import os, subprocess; subprocess.run([os.environ['CXX'], '-c', 'plugin.cpp'])", "compiler_calls"),
        # ... or leaves a file behind (a build folder, a cache) must fail the smoke test.
        ("import os; open(os.path.join(os.environ['HOME'], 'leftover.o'), 'w').close()", "files_written"),
    ],
)
def test_smoke_test_catches_compiling_and_writing(runtime_venv, tmp_path, monkeypatch, offence, evidence):
    from ci.builder import smoke

    monkeypatch.setattr(smoke, "SMOKE_SCRIPT", offence + "\n" + smoke.SMOKE_SCRIPT)
    with pytest.raises(RuntimeError, match=evidence):
        smoke.smoke(runtime_venv, find_test_wheel(), str(tmp_path / "scene.png"))


def test_wheel_refuses_wrong_torch_version(runtime_venv, tmp_path):
    # The same install, with its metadata claiming another torch: import must fail with the loader's message.
    site = subprocess.run(
        [
            os.path.join(runtime_venv, "bin", "python"),
            "-c",
            "import prerast, os; print(os.path.dirname(prerast.__file__))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=wheel_tools.runtime_env(runtime_venv, str(tmp_path)),
    ).stdout.strip()
    info = os.path.join(site, "_build_info.json")
    original = open(info).read()
    try:
        # A classic binary of another torch minor (a stable one would serve any torch from 2.10 on).
        claimed = dict(json.loads(original), torch_version="2.4.1+cu124", abi="classic")
        open(info, "w").write(json.dumps(claimed))
        out = subprocess.run(
            [os.path.join(runtime_venv, "bin", "python"), "-c", "import prerast"],
            capture_output=True,
            text=True,
            env=wheel_tools.runtime_env(runtime_venv, str(tmp_path)),
        )
    finally:
        open(info, "w").write(original)
    assert out.returncode == 1
    assert "BinaryMismatchError" in out.stderr
    running = subprocess.run(
        [os.path.join(runtime_venv, "bin", "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert "2.4.1+cu124" in out.stderr and running in out.stderr and running != "2.4.1+cu124"
    assert "pip install" in out.stderr
