"""`python -m ci preflight` against a fake index (a local folder of empty wheel files): pip reads only the names,
so the real `pip index versions` answers without the network."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci import matrix, preflight  # noqa: E402

CELLS = matrix.load()


def fake_index(folder, *wheels):
    folder.mkdir(exist_ok=True)
    for name in wheels:
        (folder / name).write_bytes(b"")
    return str(folder)


def torch_wheel(version, python, plat="manylinux_2_28_x86_64"):
    tag = "cp" + python.replace(".", "")
    return f"torch-{version}-{tag}-{tag}-{plat}.whl"


def test_every_python_of_a_cell_is_asked_and_the_missing_one_named(tmp_path):
    cell = matrix.find("2.14.1+cu126")
    present = [p for p in cell.pythons if p != "3.13"]
    index = fake_index(tmp_path / "idx", *(torch_wheel(cell.id, p) for p in present),
                       torch_wheel("2.14.1+cu130", "3.13"))  # another build of the same release does not count
    problems = preflight.check([cell], index_for=lambda c: index)
    assert [(c, p) for c, p, _ in problems] == [("2.14.1+cu126", "3.13")]
    assert "has no torch 2.14.1+cu126 for Python 3.13 on manylinux_2_28_x86_64" in problems[0][2]


def test_the_pypi_build_is_the_plain_version(tmp_path):
    cell = matrix.find("2.14.1+cu130")
    assert cell.on_pypi and preflight.index_of(cell) == preflight.PYPI_SIMPLE
    index = fake_index(tmp_path / "idx", *(torch_wheel("2.14.1", p) for p in cell.pythons))
    assert preflight.check([cell], index_for=lambda c: index) == []
    assert preflight.index_of(matrix.find("2.14.1+cu126")) == "https://download.pytorch.org/whl/cu126"


def test_older_manylinux_tags_count_and_newer_ones_do_not(tmp_path):
    old = matrix.find("2.4+cpu")
    new = matrix.find("2.13.0+cpu")
    index = fake_index(tmp_path / "idx", *(torch_wheel(old.id, p, "manylinux1_x86_64") for p in old.pythons),
                       *(torch_wheel(new.id, p, "manylinux_2_34_x86_64") for p in new.pythons))
    problems = preflight.check([old, new], index_for=lambda c: index)
    assert {c for c, _, _ in problems} == {"2.13.0+cpu"}  # glibc 2.34 wheels do not install in the 2.28 image
    assert len(problems) == len(new.pythons)


def test_pip_configuration_is_not_consulted(tmp_path, monkeypatch):
    # A find-links folder from the environment would answer for an index that lacks the build.
    cell = matrix.find("2.14.1+cu126")
    elsewhere = fake_index(tmp_path / "elsewhere", *(torch_wheel(cell.id, p) for p in cell.pythons))
    monkeypatch.setenv("PIP_FIND_LINKS", elsewhere)
    empty = fake_index(tmp_path / "empty", torch_wheel("2.13.0+cpu", "3.12"))
    assert len(preflight.check([cell], index_for=lambda c: empty)) == len(cell.pythons)


def test_one_question_per_index_and_python_and_errors_fail_the_cell():
    asked = []

    def ask(index, python, platforms):
        asked.append((index, python))
        return (None, "HTTP 503") if index.endswith("cu126") else ({"2.9.0+cpu", "2.13.0+cpu"}, None)

    cells = [matrix.find(n) for n in ("2.13.0+cpu", "2.9.0+cpu", "2.14.1+cu126")]
    problems = preflight.check(cells, ask=ask)
    assert sorted(asked) == sorted({(preflight.index_of(c), p) for c in cells for p in c.pythons})
    assert {c for c, _, _ in problems} == {"2.14.1+cu126"}
    assert all("could not ask https://download.pytorch.org/whl/cu126: HTTP 503" in why for _, _, why in problems)


def test_command_names_missing_cells_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(preflight, "available_versions", lambda index, python, platforms: ({"2.9.0+cpu"}, None))
    assert preflight.main(["--cell", "2.9.0+cpu"]) == 0
    assert "all 4 torch builds of 1 cells exist" in capsys.readouterr().out
    assert preflight.main(["--pr"]) == 1
    captured = capsys.readouterr()
    assert "2.14.1+cu126 (Python 3.10): " in captured.out
    assert all(c in captured.err for c in ("2.4.0+cu124", "2.14.1+cu126", "2.14.1+cu130", "2.13.0+cpu"))


def test_image_platforms_go_down_from_the_image_tag_to_manylinux1():
    tags = preflight.image_platforms({"manylinux": "manylinux_2_28", "machine": "x86_64"})
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64"} <= set(tags)


def test_an_unreachable_index_is_an_error_not_a_missing_build():
    # pip's answer when the host does not resolve: retries, then the same words as for a missing build.
    stderr = ("WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
              "connection broken by 'NewConnectionError(...: Name or service not known')': /whl/cu126/torch/\n"
              "ERROR: No matching distribution found for torch\n")
    versions, error = preflight.parse_answer(1, "", stderr)
    assert (versions, error) == (None, "index not reached (Name or service not known)")
    assert preflight.parse_answer(1, "", "ERROR: No matching distribution found for torch\n") == (set(), None)
    found = preflight.parse_answer(0, "torch (2.14.1)\nAvailable versions: 2.14.1, 2.14.0\n", "")
    assert found == ({"2.14.1", "2.14.0"}, None)
