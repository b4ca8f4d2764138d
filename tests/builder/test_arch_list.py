"""An arch list from the environment against the toolkit (prerast_meta/build_env.environment_arch_list), with the
real nvcc as the judge: TORCH_CUDA_ARCH_LIST, which images set for every extension, is filtered as the default
list is, and what is left compiles; PRERAST_CUDA_ARCH_LIST is refused, naming the variable and what the toolkit
supports, where nvcc would stop on one of its archs."""

import os
import shutil
import subprocess

import pytest

from prerast_meta import build_env

CUDA_HOME = build_env.find_cuda_home()
pytestmark = pytest.mark.skipif(
    not (CUDA_HOME and shutil.which(os.path.join(CUDA_HOME, "bin", "nvcc"))), reason="needs nvcc (a CUDA toolkit)"
)


def compiles(archs, tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    cmd = [os.path.join(CUDA_HOME, "bin", "nvcc"), "-c", str(source), "-o", str(tmp_path / "k.o")]
    return subprocess.run(cmd + build_env.gencode_flags(archs), capture_output=True, text=True).returncode == 0


@pytest.fixture
def env(monkeypatch):
    for var in ("PRERAST_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_torch_list_is_filtered_to_what_the_toolkit_compiles(env, tmp_path, capsys):
    listed = ["5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "9.0+PTX"]
    env.setenv("TORCH_CUDA_ARCH_LIST", ";".join(listed))
    kept = build_env.arch_list(None, CUDA_HOME)
    dropped = [a for a in listed if a not in kept]
    assert kept and set(kept) <= set(listed) and kept[-1] == "9.0+PTX"
    assert all(build_env.arch_pair(a) >= build_env.MIN_ARCH for a in kept)
    assert compiles(kept, tmp_path)
    for a in dropped:  # each left out below the floor or because nvcc stops on it
        assert build_env.arch_pair(a) < build_env.MIN_ARCH or not compiles([a], tmp_path), a
    if dropped:
        assert ", ".join(dropped) in capsys.readouterr().err


def test_prerast_list_with_an_arch_nvcc_lacks_is_refused(env, tmp_path):
    unsupported = next(a for a in ("3.5", "5.0", "6.0", "7.0") if not compiles([a], tmp_path))
    env.setenv("PRERAST_CUDA_ARCH_LIST", f"{unsupported};9.0")
    env.setenv("TORCH_CUDA_ARCH_LIST", "8.0")  # PRERAST_CUDA_ARCH_LIST wins
    with pytest.raises(ValueError) as e:
        build_env.arch_list(None, CUDA_HOME)
    assert "PRERAST_CUDA_ARCH_LIST" in str(e.value) and unsupported in str(e.value) and "7.5" in str(e.value)
    env.setenv("PRERAST_CUDA_ARCH_LIST", "9.0")
    assert build_env.arch_list(None, CUDA_HOME) == ["9.0"]


def test_torch_list_with_nothing_left_is_refused(env):
    env.setenv("TORCH_CUDA_ARCH_LIST", "3.5 5.2")
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST='3.5 5.2' leaves no arch"):
        build_env.arch_list(None, CUDA_HOME)
