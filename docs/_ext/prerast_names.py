"""Sphinx extension: the pages name only code that exists.

Every page (Markdown or reST source) is read for the code it names, and each name is looked up:

  a dotted name of the project's packages in inline code   `prerast.rasterize`, `prerast_meta.compat.PAGES_URL`,
                                                            `ci.builder.cross`, `torch.ops.prerast.texture_fwd`: imported
  a path of the repository in inline code                   `ci/matrix/__init__.py`, `csrc/core/*.cu`,
                                                            `tests/docs/test_guides.py::test_x`: found on disk
  a command of the project's command-line programs          python -m ci <command>, python -m prerast <command>
                                                            (code spans and code blocks): listed by its --help

A name that is gone is a Sphinx warning, which ``python -m sphinx -W`` turns into a failed build; tests/docs call
:func:`stale_names` directly too. Placeholders (`<v>`, `{name}`) and files a build makes are not names.
"""

import functools
import glob
import importlib
import os
import re
import subprocess
import sys

from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("prerast", "prerast_meta", "ci")
# The repository's source folders: a path under another (dist/, .venv/, a wheel's prerast/) is made by a build.
SOURCE_DIRS = ("ci", "csrc", "docs", "tests", "package", "prerast_meta", "examples", "benchmarks", ".github")
PROGRAMS = {"ci": ROOT, "prerast": None}  # python -m <program>, and the folder it runs from (None: anywhere)

_CODE_SPAN = re.compile(r"``([^`\n]+)``|`([^`\n]+)`")
_DOTTED = re.compile(r"((?:torch\.ops\.)?(?:%s)(?:\.\w+)+)(?:\(.*\))?" % "|".join(PACKAGES))
_PATH = re.compile(r"((?:%s)/[\w./*-]*)(?:::(\w+))?" % "|".join(re.escape(d) for d in SOURCE_DIRS))
_COMMAND = re.compile(r"python[\d.]*\s+-m\s+(%s)\s+([a-z][\w-]*)" % "|".join(PROGRAMS))


def code_spans(text):
    """The inline code of a Markdown or reST page, in order."""
    return [a or b for a, b in _CODE_SPAN.findall(text)]


def _resolve(dotted):
    """Does a dotted name exist: the longest importable module prefix, then attributes?"""
    parts = dotted.split(".")
    if parts[:3] == ["torch", "ops", "prerast"]:
        import torch

        importlib.import_module("prerast")
        return len(parts) == 3 or hasattr(torch.ops.prerast, parts[3])
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


# Folders that builds make and git ignores (.gitignore): the pages may name them whether or not a build ran yet.
GENERATED = ("docs/gallery", "docs/_build", "dist", "build", ".venv")


def _path_exists(path, function, root):
    if not function and path.rstrip("/").startswith(GENERATED):
        return True
    full = os.path.join(root, path)
    matches = glob.glob(full) if "*" in path else ([full] if os.path.exists(full) else [])
    if not matches:
        return False
    if function:  # tests/x.py::test_y: the file defines it
        return any(
            re.search(rf"^\s*(?:async\s+)?def {re.escape(function)}\(", open(m, encoding="utf-8").read(), re.M)
            for m in matches
            if os.path.isfile(m)
        )
    return True


@functools.cache
def commands(program):
    """The subcommands `python -m <program> --help` lists (argparse's {a,b,...})."""
    out = subprocess.run(
        [sys.executable, "-m", program, "--help"], capture_output=True, text=True, cwd=PROGRAMS.get(program) or ROOT
    )
    found = re.search(r"\{([\w,-]+)\}", out.stdout)
    if out.returncode != 0 or not found:
        raise RuntimeError(
            f"`python -m {program} --help` lists no commands (exit {out.returncode}): "
            f"{(out.stdout + out.stderr).strip()[-500:]}"
        )
    return frozenset(found.group(1).split(","))


def stale_names(text, root=ROOT):
    """What a page's text names that the code no longer has: a list of messages, empty when all exist."""
    problems = []
    for span in code_spans(text):
        span = span.strip()
        if "<" in span or "{" in span:
            continue  # a placeholder
        dotted = _DOTTED.fullmatch(span)
        if dotted and not _resolve(dotted.group(1)):
            problems.append(f"`{span}`: {dotted.group(1)} does not exist")
        path = _PATH.fullmatch(span.rstrip("/"))
        if path and not _path_exists(path.group(1), path.group(2), root):
            what = f"{path.group(1)} has no {path.group(2)}" if path.group(2) else f"no {path.group(1)}"
            problems.append(f"`{span}`: {what} in the repository")
    for program, command in sorted(set(_COMMAND.findall(text))):
        if command not in commands(program):
            problems.append(
                f"python -m {program} {command}: no such command "
                f"(python -m {program} --help lists {', '.join(sorted(commands(program)))})"
            )
    return problems


def _check_source(app, docname, source):
    for problem in stale_names(source[0]):
        logger.warning(
            f"names code that no longer exists: {problem}", location=docname, type="prerast", subtype="names"
        )


def setup(app):
    app.connect("source-read", _check_source)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
