"""Sphinx configuration of prerast's documentation site.

    pip install -r docs/requirements.txt        # next to an installed prerast (and its torch)
    python -m sphinx -W -b html docs docs/_build/html

The API reference is autodoc + napoleon over the installed prerast (Google-style docstrings); docs/_ext/prerast_api
fails the build when a docstring's arguments drift from its signature or a public name is left out,
docs/_ext/prerast_names when a page names code (a dotted name, a path, a `python -m ci` command) that is gone, and
docs/_ext/prerast_gallery runs the example programs on the CPU to make the gallery.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

try:
    import prerast
except ImportError as e:  # BinaryMismatchError is an ImportError too
    raise RuntimeError(
        "the documentation is built from an installed prerast (its docstrings, and the gallery "
        "runs the examples): install the wheel first, e.g. `bash ci/quickstart.sh` or "
        f"`pip install prerast` ({e})"
    ) from e

from prerast import _checks, _constants  # noqa: E402
from prerast_meta import compat  # noqa: E402  (installed with prerast)

# The site's own address (canonical links): the Pages site of the repository prerast is released from, which the
# loader's index URL is derived from too; the guides' and the README's copies of it are checked against it
# (tests/docs/test_readme.py, test_site_links_are_the_repositorys_pages_url).
html_baseurl = compat.PAGES_URL

project = "prerast"
author = "prerast developers"
copyright = "prerast developers, Apache-2.0"
release = prerast.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
    "prerast_api",
    "prerast_gallery",
    "prerast_names",
    "prerast_wheels",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "requirements.txt", "_ext"]
root_doc = "index"

# One docstring style throughout: Google style, with two sections of prerast's own.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Gradients", "Differences from nvdiffrast"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autoclass_content = "class"

myst_enable_extensions = ["colon_fence", "substitution"]
myst_heading_anchors = 3
# Facts the guide pages state, read from the code that decides them: {{ version }}, {{ stable_floor }}, ... in
# the prose of a page (not in code: bash blocks stay literal, and tests/docs/test_guides.py checks them).
myst_substitutions = {
    "version": release,
    "stable_floor": compat.floor_text(),
    "max_resolution": f"{_checks.MAX_RESOLUTION:,}",
    "max_texture_side": f"{_constants.MAX_TEXTURE_SIDE:,}",
    "max_triangles": f"{_checks.MAX_TRIANGLES:,}",
    "max_antialias_triangles": f"{_checks.MAX_ANTIALIAS_TRIANGLES:,}",
}

# Short runs of each example for the gallery (examples/<name>.py argv; each a few seconds on a CPU).
prerast_gallery_runs = {
    "triangle": ["--resolution", "128"],
    "cube": ["--steps", "40", "--resolution", "48"],
    "pose": ["--steps", "40", "--resolution", "48"],
    "textured_sphere": ["--steps", "20", "--resolution", "48"],
    "envmap": ["--steps", "20", "--resolution", "48"],
}

html_theme = "furo"
html_title = f"prerast {release}"
html_static_path = ["_static"]
html_css_files = ["prerast.css"]
