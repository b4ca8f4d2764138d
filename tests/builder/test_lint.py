"""ruff (lint and format) and clang-format hold over the repository with the configuration it carries
(pyproject.toml's [tool.ruff], .clang-format), run by the pinned tools of ci/requirements-ci.txt.

The tree checks wait for the one commit that formats the whole tree (docs/contributing.md, "Linters and
formatters"): that commit runs the formatters and sets FORMATTED to True. The configuration checks run already."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

# True from the commit that formatted the whole tree once; until then the three tree checks skip.
FORMATTED = True

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPP_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
until_formatted = pytest.mark.skipif(not FORMATTED, reason="until the one-time format")


def tool(name):
    """The tool installed next to this Python (ci/requirements-ci.txt puts it there), else the one on PATH."""
    path = shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if path is None:
        pytest.fail(
            f"{name} is neither next to {sys.executable} nor on PATH; install the pinned version with "
            "`python -m pip install -r ci/requirements-ci.txt`"
        )
    return path


def run(cmd, stdin=None):
    return subprocess.run(cmd, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=300)


def version(name):
    return run([tool(name), "--version"]).stdout.strip()


def cpp_files():
    """The C++ and CUDA sources of the plugin and of the host test programs, relative to the root."""
    found = [
        os.path.relpath(p, ROOT)
        for folder in ("csrc", os.path.join("tests", "host"))
        for p in glob.glob(os.path.join(ROOT, folder, "**", "*"), recursive=True)
        if p.endswith(CPP_SUFFIXES)
    ]
    assert len(found) >= 30, found  # the glob found the sources
    return sorted(found)


def failure(name, out):
    return f"{version(name)} (pinned in ci/requirements-ci.txt) reports:\n{out.stdout[-6000:]}{out.stderr[-3000:]}"


# -- the configuration: read from the repository, and the checks can fail ---------------------------------------

# A line of 100 columns: ruff's default (88) would wrap it, the repository's 120 keeps it.
LONG_CALL = "result = some_function(first_argument_name, second_argument_name, third_argument_name, fourth_name)\n"


def test_ruff_reads_the_repositorys_configuration_and_reports_findings():
    formatted = "import os\n\n" + LONG_CALL + "print(os.sep, result)\n"
    out = run([tool("ruff"), "format", "--check", "--stdin-filename", "ci/example.py", "-"], formatted)
    assert out.returncode == 0, failure("ruff", out)  # 100 columns is within the configured line length
    out = run([tool("ruff"), "format", "--stdin-filename", "ci/example.py", "-"], formatted.replace(" = ", "=", 1))
    assert out.stdout == formatted, failure("ruff", out)  # and the formatter restores what was broken
    # An unused import (pyflakes) and imports out of order (isort, with prerast first-party) are findings.
    unsorted = "import prerast\nimport os\nimport sys\n\nprint(prerast, os)\n"
    out = run([tool("ruff"), "check", "--output-format", "concise", "--stdin-filename", "ci/example.py", "-"], unsorted)
    assert out.returncode == 1 and "F401" in out.stdout and "I001" in out.stdout, failure("ruff", out)
    assert "E501" not in out.stdout


def test_clang_format_reads_the_repositorys_style_and_reports_findings():
    # Two-space indents, a one-line if, and a 101-column line that the Google style's 80 columns would wrap.
    formatted = (
        "int f(int a) {\n  if (a > 0) return a;\n"
        "  return some_function(first_argument_name, second_argument_name, third_argument, fourth_argument);\n"
        "}\n"
    )
    check = [tool("clang-format"), "--dry-run", "-Werror", "--assume-filename", "csrc/core/example.cpp"]
    out = run(check, formatted)
    assert out.returncode == 0, failure("clang-format", out)
    out = run(check, formatted.replace("  if", "    if"))
    assert out.returncode != 0 and "code should be clang-formatted" in out.stderr, failure("clang-format", out)


# -- the tree, from the one-time format on ------------------------------------------------------------------------


@until_formatted
def test_python_has_no_ruff_findings():
    out = run([tool("ruff"), "check", "--output-format", "concise", "."])
    assert out.returncode == 0, failure("ruff", out) + "\nfix: ruff check --fix . (then review what it changed)"


@until_formatted
def test_python_is_ruff_formatted():
    out = run([tool("ruff"), "format", "--check", "."])
    assert out.returncode == 0, failure("ruff", out) + "\nfix: ruff format ."


@until_formatted
def test_cpp_is_clang_formatted():
    out = run([tool("clang-format"), "--dry-run", "-Werror", *cpp_files()])
    assert out.returncode == 0, failure("clang-format", out) + "\nfix: clang-format -i FILES"
