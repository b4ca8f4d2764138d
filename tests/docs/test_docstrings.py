"""The API reference cannot drift from the code: every public docstring lists exactly its function's arguments
(docs/_ext/prerast_api.py), and a docstring that no longer matches fails the docs build."""

import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import fresh_clone

sys.path.insert(0, os.path.join(fresh_clone.ROOT, "docs", "_ext"))
import prerast_api  # noqa: E402

import prerast  # noqa: E402


def public_callables():
    """Every function and class of prerast.__all__, and the public methods the classes define themselves."""
    for name in prerast.__all__:
        obj = getattr(prerast, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"prerast.{name}", obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and not attr.startswith("_"):
                    yield f"prerast.{name}.{attr}", member


@pytest.mark.parametrize("name,obj", list(public_callables()), ids=lambda x: x if isinstance(x, str) else "")
def test_public_docstring_matches_its_signature(name, obj):
    assert obj.__doc__, f"{name} has no docstring"
    assert prerast_api.drift(obj, name) == []


def test_public_docstrings_state_shapes_errors_and_gradients():
    # The ops' entries say what a reader needs beyond the names: shapes, dtypes, the errors and the gradients.
    for fn in (prerast.rasterize, prerast.interpolate, prerast.texture, prerast.antialias):
        doc = fn.__doc__
        for section in ("Args:", "Returns:", "Raises:", "Gradients:", "Differences from nvdiffrast:"):
            assert section in doc, f"{fn.__name__} lacks {section}"
        assert "float32" in doc and "[N, H, W" in doc


def f_ok(pos, tri, resolution, ranges=None, grad_db=True):
    """Draw.

    Args:
        pos (torch.Tensor): positions.
        tri (torch.Tensor): triangles.
        resolution (tuple): size.
        ranges (torch.Tensor, optional): ranges. Default None.
        grad_db (bool): gradients. Default True.
    """


def with_signature(source):
    """f_ok's docstring on another signature (what a code change without a docstring change leaves)."""
    namespace = {}
    exec(textwrap.dedent(source), namespace)
    fn = namespace["f"]
    fn.__doc__ = f_ok.__doc__
    return fn


@pytest.mark.parametrize(
    "source,expected",
    [
        ("def f(pos, tri, size, ranges=None, grad_db=True): pass", ["'size' is not in", "documents 'resolution'"]),
        ("def f(pos, tri, resolution, ranges=None, grad_db=True, peel=False): pass", ["'peel' is not in"]),
        ("def f(pos, tri, resolution, ranges=None): pass", ["documents 'grad_db', which is not an argument"]),
        ("def f(tri, pos, resolution, ranges=None, grad_db=True): pass", ["lists the arguments as"]),
        (
            "def f(pos, tri, resolution, ranges=None, grad_db=False): pass",
            ["does not state its default, 'Default False'"],
        ),
    ],
)
def test_drift_is_reported(source, expected):
    assert prerast_api.drift(f_ok) == []
    problems = " | ".join(prerast_api.drift(with_signature(source)))
    for text in expected:
        assert text in problems


def test_missing_args_section_is_reported():
    def g(x):
        """Does something."""

    assert prerast_api.drift(g) == [
        "test_missing_args_section_is_reported.<locals>.g: takes ['x'] but its docstring has no Args section"
    ]


def test_uncovered_public_name_is_reported():
    assert prerast_api.undocumented(["a", "b"], {"prerast.a": None}) == ["b"]


def sphinx_project(root, docstring_arg):
    """A minimal site that documents one function whose docstring names its first argument docstring_arg."""
    root.mkdir(exist_ok=True)
    (root / "drifted.py").write_text(
        textwrap.dedent(f'''
        __all__ = ["draw"]

        def draw(pos, resolution=256):
            """Draw.

            Args:
                {docstring_arg} (torch.Tensor): positions.
                resolution (int): size. Default 256.
            """
        ''')
    )
    (root / "conf.py").write_text(
        textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(root)!r}, {os.path.join(fresh_clone.ROOT, "docs", "_ext")!r}]
        extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "prerast_api"]
        prerast_api_module = "drifted"
        """)
    )
    (root / "index.rst").write_text("Test\n====\n\n.. autofunction:: drifted.draw\n")
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(root), str(root / "_build")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_renamed_argument_fails_the_docs_build(tmp_path):
    pytest.importorskip("sphinx", reason="pip install -r docs/requirements.txt")
    good = sphinx_project(tmp_path / "good", "pos")
    assert good.returncode == 0, good.stdout + good.stderr
    drifted = sphinx_project(tmp_path / "drifted", "positions")
    assert drifted.returncode != 0
    assert "argument 'pos' is not in the docstring's Args section" in drifted.stderr


def test_texture_docstring_names_every_mode_and_no_other():
    """The modes of prerast._constants (the one list, mirrored from the C++ enums) are those texture's
    docstring explains: a mode added or renamed in code fails here until its entry says what it does."""
    from prerast import _constants

    entries = prerast_api.documented_args(prerast.texture.__doc__)
    for arg, modes, extra in (
        ("filter_mode", _constants.FILTER_MODES, {"auto"}),
        ("boundary_mode", _constants.BOUNDARY_MODES, set()),
    ):
        named = set(re.findall(r"``'([\w-]+)'``", entries[arg])) - {"linear-mipmap-*"}
        assert named == set(modes) | extra, (arg, named)


def test_a_public_name_the_page_does_not_list_gets_an_entry_under_its_section(tmp_path):
    """A new op needs no edit of docs/api.rst: `.. prerast-remaining::` documents what the page does not list,
    under its module's API_SECTION; without the directive the same site fails its coverage check."""
    pytest.importorskip("sphinx", reason="pip install -r docs/requirements.txt")
    (tmp_path / "toyops.py").write_text(
        textwrap.dedent('''
        API_SECTION = "Scaling"
        __all__ = ["draw", "scale"]

        def draw(pos):
            """Draw.

            Args:
                pos (torch.Tensor): positions.
            """

        def scale(x, s=2.0):
            """Scale x by s.

            Args:
                x (torch.Tensor): values.
                s (float): factor. Default 2.0.
            """
        ''')
    )
    (tmp_path / "conf.py").write_text(
        textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {os.path.join(fresh_clone.ROOT, "docs", "_ext")!r}]
        extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "prerast_api"]
        prerast_api_module = "toyops"
        """)
    )

    def build(page):
        (tmp_path / "index.rst").write_text("Test\n====\n\n.. autofunction:: toyops.draw\n" + page)
        shutil.rmtree(tmp_path / "_build", ignore_errors=True)
        return subprocess.run(
            [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")],
            capture_output=True,
            text=True,
            timeout=300,
        )

    without = build("")
    assert without.returncode != 0 and "missing from the API reference: ['scale']" in without.stderr
    done = build("\n.. prerast-remaining::\n")
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "_build" / "index.html").read_text()
    assert 'id="toyops.scale"' in html and "Scaling" in html and "Scale x by s." in html
    assert html.count('id="toyops.draw"') == 1  # what the page lists is not repeated
