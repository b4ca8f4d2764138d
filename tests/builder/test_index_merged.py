"""The index (ci/publish/index.py) of the wheels a target's merge makes (ci/matrix/parts.py): the one wheel listed on
the page of every torch build its bindings and kernel libraries serve, the slim ones on their own builds' pages,
and pip on each page taking the wheel made for it. Stand-in wheels with the metadata python -m ci merge writes."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix  # noqa: E402
from ci.matrix import parts  # noqa: E402
from ci.publish import index  # noqa: E402
from test_index import installed_version, make_wheel, pip_install  # noqa: E402

X86 = parts.by_target(parts.select(parts.load(), pr=True))["linux-x86_64"]  # stable and 2.4 bindings; cpu, cu12, cu13
PAGES = {compat_page for c in matrix.load() if c.target.name == "linux-x86_64" for compat_page in c.pages}


def merged_wheel(folder, merge):
    """A stand-in of `merge`'s wheel: its bindings (the first at the top level) and kernel libraries."""
    bindings = [p for p in merge.parts if p.kind == "binding"]
    first = bindings[0]
    others = [
        {"abi": b.abi, "torch_version": b.cell.torch_build, "cuda_version": b.cell.cuda, "torch_floor": None}
        for b in bindings[1:]
    ]
    kernels = {p.compute: {"library": f"_kernels_{p.compute}.abi3.so"} for p in merge.parts if p.kind == "kernels"}
    version = "0.2.0" + (f"+{merge.local_tag}" if merge.local_tag else "")
    return make_wheel(
        folder,
        version,
        first.cell.torch_build,
        first.cell.cuda,
        abi=first.abi,
        info={"kernels": kernels, "bindings": others, "parts": [{"wheel": "a part"}]},
    )


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("merged")
    made = {m.local_tag: merged_wheel(str(folder), m) for m in parts.merges(X86)}
    out = tmp_path_factory.mktemp("merged-site")
    entries = {e["file"]: e for e in index.collect([str(folder)])}
    index.write(list(entries.values()), str(out))
    return out, {tag: entries[os.path.basename(path)]["pages"] for tag, path in made.items()}


def test_the_one_wheel_is_on_every_page_its_bindings_and_kernels_serve(merged):
    _, pages = merged
    one = set(pages[""])
    assert {"torch-2.4.0+cu121.html", "torch-2.4.1+cu124.html", "torch-2.4.1+cpu.html"} <= one  # classic 2.4
    assert {
        "torch-2.10.0+cu128.html",
        "torch-2.12.0+cu130.html",
        "torch-2.15.0+cu132.html",
        "torch-2.12.0+cpu.html",
    } <= one
    # No binding for 2.5 in a pull request's wheel; no CUDA 11 kernels.
    assert not {"torch-2.5.1+cu124.html", "torch-2.4.0+cu118.html"} & one
    stable = {p for p in PAGES if matrix._vkey(p.split("-")[1])[:2] >= (2, 10)}
    assert stable <= one and one - stable == {p for p in PAGES if p.startswith("torch-2.4.") and "cu118" not in p}


def test_slim_wheels_are_on_the_pages_of_their_own_builds(merged):
    _, pages = merged
    assert set(pages["cu12"]) == {p for p in pages[""] if "+cu12" in p and not p.startswith("torch-2.4.")}
    assert set(pages["cu13"]) == {p for p in pages[""] if "+cu13" in p}
    assert set(pages["cpu"]) == {p for p in pages[""] if "+cpu" in p and not p.startswith("torch-2.4.")}
    # A classic slim wheel serves every CUDA 12 build of its minor, whichever CUDA 12 its torch was built with.
    assert set(pages["pt24cu121"]) == {f"torch-2.4.{n}+cu12{m}.html" for n in (0, 1) for m in (1, 4)}
    assert set(pages["pt24cpu"]) == {"torch-2.4.0+cpu.html", "torch-2.4.1+cpu.html"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("merged-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return str(path)


@pytest.mark.parametrize(
    "page, version",
    [
        ("torch-2.12.0+cpu.html", "0.2.0+cpu"),  # a local version sorts after the public one: the small CPU wheel
        ("torch-2.10.0+cu128.html", "0.2.0+cu12"),
        ("torch-2.14.1+cu130.html", "0.2.0+cu13"),
        ("torch-2.4.1+cu124.html", "0.2.0+pt24cu121"),
        ("torch-2.4.1+cpu.html", "0.2.0+pt24cpu"),
    ],
)
def test_pip_on_a_page_takes_the_wheel_made_for_its_build(merged, venv, page, version):
    site, _ = merged
    out = pip_install(venv, "-f", (site / page).as_uri(), "prerast")
    assert out.returncode == 0, out.stderr
    assert installed_version(venv) == version
    # The one wheel is there too: `prerast===0.2.0` (exactly, no local version) installs it from the same page.
    out = pip_install(venv, "-f", (site / page).as_uri(), "prerast===0.2.0")
    assert out.returncode == 0 and installed_version(venv) == "0.2.0", out.stderr


def test_a_part_is_no_wheel_to_index(tmp_path):
    path = make_wheel(str(tmp_path), "0.2.0+kernels.cu12", None, None, abi=None, info={"kernels": {"cu12": {}}})
    with pytest.raises(ValueError, match="a part .* is no wheel to index"):
        index.collect([path])


def test_the_loaders_fix_command_finds_a_wheel_on_every_page(merged, venv):
    """The loader (prerast_meta.compat.fix_command) pins the one wheel, untagged, for torch 2.4.1+cu124 (a build
    whose own cell's tag, +pt24cu124, no merge makes: the 2.4 binding is built with 2.4.0+cu121): its page lists
    it, and pip installs it."""
    from prerast_meta import compat

    site, _ = merged
    run = {"python": "3.11.0", "torch_version": "2.4.1+cu124", "cuda_version": "12.4", "cxx11_abi": False}
    pin = compat.fix_command(run).split('"')[1].replace(compat.base_version(compat.__version__), "0.2.0")
    out = pip_install(venv, "-f", (site / "torch-2.4.1+cu124.html").as_uri(), pin)
    assert out.returncode == 0, out.stderr
