"""docs/_ext/prerast_names.py: a page that names code which no longer exists (a dotted name, a path of the
repository, a `python -m ci` command) fails the docs build; the pages as they are name none."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

import fresh_clone

sys.path.insert(0, os.path.join(fresh_clone.ROOT, "docs", "_ext"))
import prerast_names  # noqa: E402

PAGES = sorted(
    glob.glob(os.path.join(fresh_clone.ROOT, "docs", "*.md"))
    + glob.glob(os.path.join(fresh_clone.ROOT, "docs", "*.rst"))
)
PAGE = os.path.join(fresh_clone.ROOT, "docs", "building-wheels.md")


def test_the_pages_name_only_code_that_exists():
    found = {os.path.basename(p): prerast_names.stale_names(open(p, encoding="utf-8").read()) for p in PAGES}
    assert {page: problems for page, problems in found.items() if problems} == {}


def test_the_checker_sees_the_names_of_the_pages():
    text = open(PAGE, encoding="utf-8").read()
    spans = [s.strip() for s in prerast_names.code_spans(text)]
    assert "ci/matrix.toml" in spans and any(prerast_names._PATH.fullmatch(s) for s in spans)
    assert "python -m ci repair" in " ".join(text.split())  # a command the checker looks up
    assert {"build", "matrix", "repair", "fact"} <= prerast_names.commands("ci")


@pytest.mark.parametrize(
    "planted, reported",
    [
        ("`prerast.rasterise`", "prerast.rasterise does not exist"),
        ("`prerast_meta.compat.STABLE_FLOR`", "prerast_meta.compat.STABLE_FLOR does not exist"),
        ("`torch.ops.prerast.rasterize_fwd_v2`", "torch.ops.prerast.rasterize_fwd_v2 does not exist"),
        ("`ci/matrixx.py`", "no ci/matrixx.py in the repository"),
        ("`csrc/core/*.cuh2`", "no csrc/core/*.cuh2 in the repository"),
        ("`tests/docs/test_guides.py::test_gone`", "tests/docs/test_guides.py has no test_gone"),
        ("`python -m ci buld --cell 2.14.1+cu130`", "python -m ci buld: no such command"),
    ],
)
def test_a_stale_name_planted_in_a_copy_of_a_page_is_reported(planted, reported):
    text = open(PAGE, encoding="utf-8").read()
    problems = prerast_names.stale_names(text + f"\nSee {planted}.\n")
    assert len(problems) == 1 and reported in problems[0], problems


def test_names_that_exist_and_placeholders_pass():
    text = (
        "`prerast.rasterize(ctx, pos, tri, res)`, `prerast_meta.compat.PAGES_URL`, `ci.builder.cross`, "
        "`torch.ops.prerast.rasterize_fwd`, `csrc/core/*.cu`, `tests/docs/test_guides.py::"
        "test_installing_shows_the_fix_commands_the_loader_prints`, `prerast-<v>-py3-none.whl`, "
        "`ci/{name}.py`, `dist/cells/`, `python -m ci fact stable-floor`"
    )
    assert prerast_names.stale_names(text) == []


def sphinx_build(src, out):
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src), str(out)], capture_output=True, text=True
    )


def test_a_stale_name_fails_the_docs_build(tmp_path):
    """A site of one copied page with the project's checker: it builds, and fails with -W once the page names a
    function that is gone."""
    src = tmp_path / "docs"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {os.path.dirname(prerast_names.__file__)!r})\n"
        "extensions = ['myst_parser', 'prerast_names']\nroot_doc = 'index'\n"
        "suppress_warnings = ['myst.header', 'myst.xref_missing', 'toc.not_readable']\n"
    )
    shutil.copy(PAGE, src / "index.md")
    ok = sphinx_build(src, tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    with open(src / "index.md", "a", encoding="utf-8") as f:
        f.write("\nThe loader's `prerast._loader.fix_comand` prints it.\n")
    stale = sphinx_build(src, tmp_path / "stale")
    assert stale.returncode != 0
    assert "prerast._loader.fix_comand does not exist" in stale.stderr
