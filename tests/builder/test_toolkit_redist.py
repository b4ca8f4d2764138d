"""`python -m ci toolkit-redist` against a fake NVIDIA redist root on disk: redistrib_<release>.json files and
component zips laid out as NVIDIA lays them out (<component>/<platform>/<component>-<platform>-<version>-archive.zip,
each with one top folder). Reached as a folder path and as a file:// URL; no network."""

import hashlib
import json
import os
import pathlib
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix
from ci.matrix import cibw, parts
from ci.toolkit import redist  # noqa: E402

PLATFORM = "windows-x86_64"
# What each fake component holds (inside its archive's top folder).
FILES = {
    "cuda_nvcc": {"bin/nvcc.exe": b"nvcc", "include/crt/host_defines.h": b"//"},
    "cuda_cudart": {"bin/cudart64_13.dll": b"rt", "lib/x64/cudart.lib": b"lib", "include/cuda_runtime.h": b"//"},
    "cuda_cccl": {"include/cub/cub.cuh": b"//"},
    "cuda_nvrtc": {"include/nvrtc.h": b"//", "lib/x64/nvrtc.lib": b"lib"},
    "cuda_nvtx": {"include/nvtx3/nvToolsExt.h": b"//"},
    "cuda_profiler_api": {"include/cuda_profiler_api.h": b"//"},
    "cuda_crt": {"include/crt/host_config.h": b"//"},
    "libnvvm": {"nvvm/bin/nvvm64_40_0.dll": b"nvvm"},
    "cuda_sanitizer_api": {"compute-sanitizer/x.exe": b"x"},  # listed, never asked for
}


def make_root(tmp_path, releases=("12.6.3", "13.0.0", "13.0.2"), companions=True, corrupt=None, members=None):
    root = tmp_path / "redist"
    root.mkdir(parents=True)
    for release in releases:
        manifest = {"release_date": "2026-01-01", "release_label": release, "release_product": "cuda"}
        for name, files in FILES.items():
            if not companions and name in ("cuda_crt", "libnvvm"):
                continue
            version = f"{release}.{len(name)}"
            top = f"{name}-{PLATFORM}-{version}-archive"
            relative = f"{name}/{PLATFORM}/{top}.zip"
            archive = root / relative
            archive.parent.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(archive, "w") as z:
                z.writestr(f"{top}/", b"")
                for path, data in (members or {}).get(name, files).items():
                    z.writestr(f"{top}/{path}" if not path.startswith("!") else path[1:], data + release.encode())
                z.writestr(f"{top}/LICENSE.txt", b"license")
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            if corrupt == name:
                digest = "0" * 64
            manifest[name] = {
                "name": name,
                "version": version,
                "license": "CUDA Toolkit",
                PLATFORM: {"relative_path": relative, "sha256": digest, "size": str(archive.stat().st_size)},
                "linux-x86_64": {"relative_path": f"{name}/linux-x86_64/none.tar.xz", "sha256": "x"},
            }
        (root / f"redistrib_{release}.json").write_text(json.dumps(manifest))
    (root / "index.html").write_text("not a release")
    return root


PACKAGES = matrix.toolkit()["packages"]


def test_redist_names_of_the_toolkit_packages():
    assert [redist.redist_name(p) for p in PACKAGES] == [
        "cuda_nvcc",
        "cuda_cudart",
        "cuda_cccl",
        "cuda_nvrtc",
        "cuda_nvtx",
        "cuda_profiler_api",
    ]


@pytest.mark.parametrize("as_url", [False, True])
def test_newest_release_of_the_cuda_version_unpacked_into_one_tree(tmp_path, as_url):
    root = make_root(tmp_path)
    where = root.as_uri() if as_url else str(root)
    assert redist.releases(where) == ["12.6.3", "13.0.0", "13.0.2"]
    out = tmp_path / "cuda"
    record = redist.install(where, "13.0", PACKAGES, PLATFORM, str(out), log=lambda m: None)
    assert record["release"] == "13.0.2"
    # The packages and nvcc's companions that this release lists; nothing else.
    assert sorted(record["components"]) == sorted(
        ["cuda_nvcc", "cuda_crt", "libnvvm", "cuda_cudart", "cuda_cccl", "cuda_nvrtc", "cuda_nvtx", "cuda_profiler_api"]
    )
    assert record["components"]["cuda_nvcc"] == "13.0.2.9"
    for name, files in FILES.items():
        for path, data in files.items():
            assert (out / path).exists() is (name != "cuda_sanitizer_api"), path
            if name != "cuda_sanitizer_api":
                assert (out / path).read_bytes() == data + b"13.0.2"  # the newest release's archive, top folder dropped
    assert not [p for p in out.iterdir() if p.name.endswith("-archive")]
    assert json.loads((out / redist.MARKER).read_text()) == record


def test_an_older_release_without_companions_and_an_explicit_release(tmp_path):
    root = make_root(tmp_path, releases=("12.6.3",), companions=False)
    record = redist.install(str(root), "12.6", PACKAGES, PLATFORM, str(tmp_path / "cuda"), log=lambda m: None)
    assert record["release"] == "12.6.3" and "cuda_crt" not in record["components"]
    with pytest.raises(redist.RedistError, match="lists no redistrib_13.0"):
        redist.install(str(root), "13.0", PACKAGES, PLATFORM, str(tmp_path / "c2"), log=lambda m: None)
    with pytest.raises(redist.RedistError, match="not one of CUDA 13.0"):
        redist.install(str(root), "13.0", PACKAGES, PLATFORM, str(tmp_path / "c3"), release="12.6.3")


def test_a_missing_component_a_bad_checksum_and_an_escaping_member_are_refused(tmp_path):
    root = make_root(tmp_path / "a")
    with pytest.raises(redist.RedistError, match=r"no cuda_foo \(from cuda-foo-devel\) for windows-x86_64"):
        redist.install(str(root), "13.0", PACKAGES + ["cuda-foo-devel"], PLATFORM, str(tmp_path / "c"))
    with pytest.raises(redist.RedistError, match="for linux-sbsa"):
        redist.install(str(root), "13.0", PACKAGES, "linux-sbsa", str(tmp_path / "c"))
    bad = make_root(tmp_path / "b", releases=("13.0.2",), corrupt="cuda_cccl")
    out = tmp_path / "c4"
    with pytest.raises(redist.RedistError, match="cuda_cccl.*SHA-256"):
        redist.install(str(bad), "13.0", PACKAGES, PLATFORM, str(out), log=lambda m: None)
    assert not (out / redist.MARKER).exists()  # a partial toolkit does not look complete
    evil = make_root(tmp_path / "e", releases=("13.0.2",), members={"cuda_nvtx": {"!../../evil.h": b"x"}})
    with pytest.raises(redist.RedistError, match="outside the toolkit folder"):
        redist.install(str(evil), "13.0", PACKAGES, PLATFORM, str(tmp_path / "c5"), log=lambda m: None)
    assert not (tmp_path / "evil.h").exists()
    with pytest.raises(redist.RedistError, match="is not a folder"):
        redist.releases(str(tmp_path / "nowhere"))


def test_the_command_unpacks_a_windows_parts_toolkit_where_its_cuda_home_is(tmp_path, capsys, monkeypatch):
    root = make_root(tmp_path)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "ws"))
    part = parts.find("kernels-cu13-windows-amd64")
    assert redist.main(["--part", part.id, "--root", root.as_uri()]) == 0
    home = pathlib.Path(cibw.redist_toolkit_dir(part))
    assert capsys.readouterr().out.splitlines()[-1] == str(home)
    assert (home / "bin" / "nvcc.exe").exists() and home == tmp_path / "ws" / ".cibw" / "cuda-13.0"
    inner = cibw.environment(part)["CIBW_ENVIRONMENT"]
    assert f'CUDA_HOME="{home.as_posix()}"' in inner
    # The stable binding of the CUDA 13 torch compiles with the same toolkit's headers, in the same folder.
    assert cibw.redist_toolkit_dir(parts.find("binding-stable-windows-amd64")) == str(home.as_posix())
    # The default root is the target's: NVIDIA's redist.
    assert part.target.toolkit == "https://developer.download.nvidia.com/compute/cuda/redist"


def test_the_command_refuses_parts_without_a_toolkit_and_linux_parts(tmp_path, capsys):
    root = make_root(tmp_path)
    out = str(tmp_path / "o")
    assert redist.main(["--part", "kernels-cpu-windows-amd64", "--root", str(root), "--out", out]) == 1
    assert "needs no CUDA toolkit" in capsys.readouterr().err
    assert redist.main(["--part", "kernels-cu13", "--out", out]) == 1
    assert "not from NVIDIA's redist archives" in capsys.readouterr().err
    assert redist.main(["--part", "kernels-cu99", "--out", out]) == 1
    assert "no part" in capsys.readouterr().err
