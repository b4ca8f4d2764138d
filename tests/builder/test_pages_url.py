"""`python -m ci pages-url-check`: the pages job deploys only where prerast's loader looks for the index."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.publish import pages_url  # noqa: E402
from prerast_meta import compat  # noqa: E402


def check(url, repository="prerast/prerast"):
    return subprocess.run(
        [sys.executable, "-m", "ci", "pages-url-check", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, GITHUB_REPOSITORY=repository),
    )


def test_the_repositorys_own_pages_url_passes():
    # actions/configure-pages gives base_url without the trailing slash; GitHub lower-cases the owner.
    owner, name = compat.REPOSITORY.split("/")
    for url in (f"https://{owner}.github.io/{name}", f"https://{owner.upper()}.github.io/{name}/"):
        out = check(url)
        assert out.returncode == 0, out.stderr
        assert compat.DEFAULT_INDEX_URL in out.stdout


def test_a_fork_a_rename_or_a_custom_domain_stops_the_deploy():
    for url, repository in (
        ("https://someone.github.io/prerast", "someone/prerast"),
        ("https://prerast.github.io/prerast-next", "prerast/prerast-next"),
        ("https://prerast.github.io", "prerast/prerast.github.io"),
        ("https://prerast.example.org", "prerast/prerast"),
    ):
        out = check(url, repository)
        assert out.returncode == 1 and out.stdout == "", url
        assert f"is {url}, but prerast's loader names the index {compat.DEFAULT_INDEX_URL}" in out.stderr
        assert f"set REPOSITORY to {repository}" in out.stderr


def test_no_url_is_an_error_that_names_the_step_id():
    out = check("")
    assert out.returncode == 2 and "`id: pages`" in out.stderr


def test_normalised_lower_cases_scheme_and_host_and_ends_with_one_slash():
    assert pages_url.normalised("HTTPS://Prerast.GitHub.io/prerast") == "https://prerast.github.io/prerast/"
    assert pages_url.normalised("https://prerast.github.io/prerast//") == "https://prerast.github.io/prerast/"
