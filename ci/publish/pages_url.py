"""Is this repository's GitHub Pages site the one prerast's loader names? The pages job asks before it deploys:

    python -m ci pages-url-check "$BASE_URL"     # BASE_URL: actions/configure-pages' base_url output

The loader's fix-it commands name the wheel index under the Pages site of prerast_meta.compat.REPOSITORY
(compat.DEFAULT_INDEX_URL), a value fixed in every released wheel. A fork, a renamed repository or a custom domain
serves its pages elsewhere: deploying there would publish an index that no installed prerast points to, so the
job stops with both URLs and what to change. Exit 1 on a mismatch, 2 without a URL.
"""

import argparse
import os
import sys
import urllib.parse

from prerast_meta import compat


def normalised(url):
    """scheme://host/path/ with scheme and host lower-cased and one trailing slash: configure-pages gives
    https://owner.github.io/name, the loader's constant has the slash."""
    parts = urllib.parse.urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}/"


def problem(base_url, repository=None, expected=compat.PAGES_URL):
    """None when `base_url` is the Pages URL the loader's index lives under, else what is wrong and what to do."""
    if normalised(base_url) == normalised(expected):
        return None
    here = f"repository {repository}" if repository else "this repository"
    return (
        f"pages-url-check: the Pages site of {here} is {base_url}, but prerast's loader names the index "
        f"{compat.DEFAULT_INDEX_URL} (the Pages site of {compat.REPOSITORY}, prerast_meta/compat.py REPOSITORY): "
        f"an index deployed here is one no installed prerast points to. Release from {compat.REPOSITORY}; or, "
        f"to serve wheels of your own, set REPOSITORY to {repository or '<owner>/<name>'} (and remove any custom "
        "Pages domain), so that the wheels built from it name this site."
    )


def main(argv=None, environ=None):
    environ = os.environ if environ is None else environ
    p = argparse.ArgumentParser(
        prog="python -m ci pages-url-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("base_url", help="the repository's Pages URL (actions/configure-pages: outputs.base_url)")
    a = p.parse_args(argv)
    if not a.base_url.strip():
        print(
            "pages-url-check: no Pages URL given: pass actions/configure-pages' base_url output (give that step "
            "`id: pages`)",
            file=sys.stderr,
        )
        return 2
    wrong = problem(a.base_url, environ.get("GITHUB_REPOSITORY"))
    if wrong:
        print(wrong, file=sys.stderr)
        return 1
    print(
        f"pages-url-check: {a.base_url} is {compat.REPOSITORY}'s Pages site; the index goes to "
        f"{compat.DEFAULT_INDEX_URL}, where the loader looks"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
