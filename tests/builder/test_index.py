"""Index generation (ci/publish/index.py), tested the way users meet it: pip installs from the generated find-links pages
and PEP 503 index over file:// in a fresh virtualenv. The wheels are small stand-ins with the layout of real ones
(dist-info, tags, prerast/_build_info.json), so that no compiler runs here."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.publish import index  # noqa: E402


def make_wheel(
    folder,
    version,
    torch_version,
    cuda,
    tags="py3-none",
    requires_python=">=3.10",
    plat="manylinux_2_28_x86_64",
    abi="stable",
    info=None,
):
    """A stand-in wheel; `info`: more keys of its _build_info.json (a merged wheel's kernels and bindings)."""
    name = f"prerast-{version}-{tags}-{plat}.whl"
    dist_info = f"prerast-{version.split('+')[0]}.dist-info"
    files = {
        "prerast/__init__.py": b"",
        "prerast/_build_info.json": json.dumps(
            {
                "prerast_version": version,
                "torch_version": torch_version,
                "cuda_version": cuda,
                "abi": abi,
                "torch_floor": "2.10" if abi == "stable" else None,
                **(info or {}),
            }
        ).encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: prerast\nVersion: {version}\nRequires-Python: {requires_python}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tags}-{plat}\n"
        ).encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(folder, name)
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheels")
    sub = folder / "nested"
    sub.mkdir()
    return {
        # Stable-ABI wheels: the CUDA 13 one (no local tag) and the CUDA 12 one.
        "old": make_wheel(str(folder), "0.1.0", "2.14.1+cu130", "13.0"),
        "new": make_wheel(str(folder), "0.2.0", "2.14.1+cu130", "13.0"),
        # A newer release that needs Python >= 3.13: pip on an older Python must pass it over.
        "py313": make_wheel(str(folder), "0.3.0", "2.14.1+cu130", "13.0", "cp313", ">=3.13"),
        "cu12": make_wheel(str(sub), "0.2.0+cu12", "2.14.1+cu126", "12.6"),
        # A classic wheel, built against the lowest patch of its minor.
        "classic": make_wheel(str(sub), "0.2.0+pt24cu121", "2.4.0+cu121", "12.1", abi="classic"),
        "folder": str(folder),
    }


@pytest.fixture(scope="module")
def site(wheels, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    index.write(index.collect([wheels["folder"]]), str(out))
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("index-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return str(path)


def pip_install(venv, *args):
    """pip install with only the pages under test: --isolated drops this machine's pip configuration, and a
    find-links run gets --no-index (an --index-url run names its only index itself)."""
    python = os.path.join(venv, "bin", "python")
    only = [] if "--index-url" in args else ["--no-index"]
    return subprocess.run(
        [
            python,
            "-m",
            "pip",
            "--isolated",
            "--disable-pip-version-check",
            "install",
            "--no-deps",
            "--force-reinstall",
            *only,
            *args,
        ],
        capture_output=True,
        text=True,
    )


def installed_version(venv):
    python = os.path.join(venv, "bin", "python")
    return subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('prerast'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_wheel_is_on_the_page_of_every_torch_build_it_serves(site):
    from ci import matrix

    pages = sorted(p for p in os.listdir(site) if p.startswith("torch-"))
    stable13, stable12 = matrix.find("2.14.1+cu130"), matrix.find("2.14.1+cu126")
    classic = matrix.find("2.4.0+cu121")
    assert pages == sorted(set(stable13.pages + stable12.pages + classic.pages))
    # Every patch release from the floor on has its pages; CPU torch is served by the CUDA 13 wheel.
    for page in ("torch-2.10.0+cpu.html", "torch-2.12.0+cu130.html", "torch-2.14.0+cu132.html"):
        text = (site / page).read_text()
        assert text.count("<a href=") == 3 and "+cu12" not in text and "pt24" not in text
        assert 'data-requires-python="&gt;=3.13"' in text
    text = (site / "torch-2.12.0+cu126.html").read_text()
    assert text.count("<a href=") == 1 and "0.2.0+cu12" in text
    for page in ("torch-2.4.0+cu121.html", "torch-2.4.1+cu121.html"):
        assert "0.2.0+pt24cu121" in (site / page).read_text()
    assert all(p in (site / "index.html").read_text() for p in pages)


def test_find_links_page_gives_the_newest_wheel_this_python_can_run(site, venv):
    out = pip_install(venv, "-f", (site / "torch-2.11.0+cu130.html").as_uri(), "prerast")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == ("0.2.0" if sys.version_info < (3, 13) else "0.3.0")
    out = pip_install(venv, "-f", (site / "torch-2.10.0+cu128.html").as_uri(), "prerast")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == "0.2.0+cu12"
    out = pip_install(venv, "-f", (site / "torch-2.4.1+cu121.html").as_uri(), "prerast")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == "0.2.0+pt24cu121"


def test_pep503_index_serves_every_build(site, venv):
    out = pip_install(venv, "--index-url", (site / "simple").as_uri(), "prerast==0.2.0+pt24cu121")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == "0.2.0+pt24cu121"
    out = pip_install(venv, "--index-url", (site / "simple").as_uri(), "prerast==0.1.0")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == "0.1.0"


def test_a_wheel_changed_after_indexing_is_refused(wheels, tmp_path, venv):
    folder = tmp_path / "w"
    folder.mkdir()
    path = make_wheel(str(folder), "0.4.0", "2.14.1+cu130", "13.0")
    index.write(index.collect([str(folder)]), str(tmp_path / "site"))
    with open(path, "ab") as f:
        f.write(b"\0")  # a different file under the same name: the page's sha256 no longer fits
    out = pip_install(venv, "-f", (tmp_path / "site" / "torch-2.14.1+cu130.html").as_uri(), "prerast")
    assert out.returncode != 0 and "hash" in (out.stderr + out.stdout).lower()


def test_release_urls_and_merging_with_the_published_manifest(wheels, tmp_path):
    first = tmp_path / "first"
    index.write(index.collect([wheels["old"]], base_url="https://example.invalid/v0.1.0/"), str(first))
    second = tmp_path / "second"
    entries = index.collect(
        [wheels["new"], wheels["classic"]],
        base_url="https://example.invalid/v0.2.0",
        manifest=str(first / "manifest.json"),
    )
    index.write(entries, str(second))
    page = (second / "torch-2.14.1+cu130.html").read_text()
    old_sha = hashlib.sha256(open(wheels["old"], "rb").read()).hexdigest()
    assert f'href="https://example.invalid/v0.1.0/{os.path.basename(wheels["old"])}#sha256={old_sha}"' in page
    assert f"https://example.invalid/v0.2.0/{os.path.basename(wheels['new'])}#sha256=" in page
    assert "pt24cu121" in (second / "torch-2.4.1+cu121.html").read_text()
    simple = (second / "simple" / "prerast" / "index.html").read_text()
    assert simple.count("<a href=") == 3


def test_a_wheel_without_build_metadata_is_not_indexed(tmp_path):
    path = tmp_path / "prerast-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("prerast/__init__.py", "")
    with pytest.raises(ValueError, match="_build_info.json"):
        index.collect([str(path)])


def test_page_name_matches_the_loader(tmp_path):
    import prerast._loader as loader

    for torch_version, cuda in (
        ("2.14.1+cu130", "13.0"),
        ("2.13.0+cpu", None),
        ("2.4.1+cu124", "12.4"),
        ("2.12.0+cu126", "12.6"),
    ):
        command = loader.fix_command(
            {"python": "3.11.0", "torch_version": torch_version, "cuda_version": cuda, "cxx11_abi": True}
        )
        assert command.endswith("/" + index.page_name(torch_version, cuda))


def test_every_page_the_loader_names_for_a_served_build_exists(site):
    """For each torch build a published cell serves, the loader's fix command names that build's page and pins the
    one wheel, untagged (tests/builder/test_index_merged.py installs it from such a page)."""
    import prerast._loader as loader
    from ci import matrix

    for cell in matrix.select(matrix.load(), published=True):
        for release, platform in cell.serves:
            cuda = None if platform == "cpu" else f"{platform[2:-1]}.{platform[-1]}"
            command = loader.fix_command(
                {"python": "3.11.0", "torch_version": f"{release}+{platform}", "cuda_version": cuda, "cxx11_abi": True}
            )
            assert command.endswith(f"/torch-{release}+{platform}.html"), command
            assert f"torch-{release}+{platform}.html" in cell.pages
            pin = command.split('"')[1].split("==")[1]
            assert "+" not in pin, (cell.id, command)


@pytest.fixture(scope="module")
def platforms_site(tmp_path_factory):
    """One release's wheels for every target: the untagged ones of Linux x86-64 and aarch64 and Windows (CUDA 13),
    macOS's CPU one, and the CUDA 12 ones of aarch64 and Windows."""
    folder = tmp_path_factory.mktemp("platform-wheels")
    made = {
        "linux-x86_64": make_wheel(str(folder), "0.2.0", "2.14.1+cu130", "13.0"),
        "linux-aarch64": make_wheel(str(folder), "0.2.0", "2.14.1+cu130", "13.0", plat="manylinux_2_28_aarch64"),
        "windows-amd64": make_wheel(str(folder), "0.2.0", "2.14.1+cu130", "13.0", plat="win_amd64"),
        "macos-arm64": make_wheel(str(folder), "0.2.0", "2.14.1", None, plat="macosx_11_0_arm64"),
        "aarch64-cu12": make_wheel(str(folder), "0.2.0+cu12", "2.14.1+cu126", "12.6", plat="manylinux_2_28_aarch64"),
        "windows-cu12": make_wheel(str(folder), "0.2.0+cu12", "2.14.1+cu126", "12.6", plat="win_amd64"),
    }
    out = tmp_path_factory.mktemp("platform-site")
    entries = index.collect([str(folder)])
    index.write(entries, str(out))
    return out, made, {e["file"]: e for e in entries}


def test_each_platforms_wheel_is_on_the_pages_of_its_cell(platforms_site):
    from ci import matrix

    out, made, entries = platforms_site
    for name, cell_id in (
        ("linux-x86_64", "2.14.1+cu130"),
        ("linux-aarch64", "2.14.1+cu130-linux-aarch64"),
        ("windows-amd64", "2.14.1+cu130-windows-amd64"),
        ("macos-arm64", "2.14.1+cpu-macos-arm64"),
        ("aarch64-cu12", "2.14.1+cu126-linux-aarch64"),
        ("windows-cu12", "2.14.1+cu126-windows-amd64"),
    ):
        entry = entries[os.path.basename(made[name])]
        assert entry["pages"] == matrix.find(cell_id).pages, name
    # The CPU page lists the CPU-serving wheel of every platform; a CUDA 13 page all but macOS's.
    cpu = (out / "torch-2.12.0+cpu.html").read_text()
    assert all(
        os.path.basename(made[n]) in cpu for n in ("linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64")
    )
    cu13 = (out / "torch-2.12.0+cu130.html").read_text()
    assert cu13.count("<a href=") == 3 and "macosx" not in cu13
    cu12 = (out / "torch-2.10.0+cu128.html").read_text()
    assert cu12.count("<a href=") == 2 and "+cu12" in cu12


@pytest.mark.parametrize(
    "plat, name",
    [
        ("manylinux_2_28_x86_64", "linux-x86_64"),
        ("manylinux_2_28_aarch64", "linux-aarch64"),
        ("win_amd64", "windows-amd64"),
        ("macosx_11_0_arm64", "macos-arm64"),
    ],
)
def test_pip_on_each_platform_takes_its_own_wheel_from_one_page(platforms_site, tmp_path, plat, name):
    """pip, asked as that platform's pip would ask (pip download --platform), picks that platform's file from the
    shared page, and the right one for CUDA 12 torch (pip never widens a --platform: each asks the tag its files
    carry)."""
    out, made, _ = platforms_site
    for page, key in (
        ("torch-2.14.1+cpu.html", name),
        ("torch-2.14.1+cu126.html", {"linux-aarch64": "aarch64-cu12", "windows-amd64": "windows-cu12"}.get(name)),
    ):
        dest = tmp_path / page
        got = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--isolated",
                "--disable-pip-version-check",
                "download",
                "--no-deps",
                "--no-index",
                "--only-binary=:all:",
                "--platform",
                plat,
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                "-d",
                str(dest),
                "-f",
                (out / page).as_uri(),
                "prerast",
            ],
            capture_output=True,
            text=True,
        )
        if key is None:  # no CUDA 12 wheel for this platform
            assert got.returncode != 0 and "No matching distribution" in got.stderr, got.stderr
            continue
        assert got.returncode == 0, got.stderr
        assert os.listdir(dest) == [os.path.basename(made[key])]
