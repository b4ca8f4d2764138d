"""Sphinx extension: the API reference cannot drift from the code.

Every function, class and method that autodoc documents must list, in the Args section of its Google-style
docstring, exactly the arguments of its signature, in order, and each argument with a default must state it
(``Default None``, ``Default ``'wrap'````). Every name of ``prerast.__all__`` (conf.py: ``prerast_api_module``)
must be documented somewhere in the site: the reference page lists its names by hand, in sections, and its
``.. prerast-remaining::`` directive adds an entry for every public name the page does not list, under the
``API_SECTION`` of the module that defines it (a new op is documented by its docstring alone). A violation is a
Sphinx warning, which ``python -m sphinx -W`` turns into a failed build; tests/docs call
:func:`drift` directly too.
"""

import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util import logging

logger = logging.getLogger(__name__)

_SECTION = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:(.*)$")


def documented_args(doc):
    """The Args section of a Google-style docstring: {name: entry text} in order, or None without a section."""
    lines = inspect.cleandoc(doc or "").splitlines()
    entries, current, indent = None, None, None
    for line in lines:
        if entries is None:
            if _SECTION.match(line):
                entries = {}
            continue
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:  # the next section
            break
        indent = depth if indent is None else indent
        if depth == indent:
            m = _ENTRY.match(line.strip())
            current = m.group(1) if m else line.strip()
            entries[current] = m.group(3) if m else ""
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def _signature_args(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [p for p in params if p.name not in ("self", "cls")], stars


def _default_stated(param, entry):
    shown = repr(param.default)
    return any(f"Default {form}" in entry for form in (shown, f"``{shown}``", f"``{param.default}``"))


def drift(obj, name=None):
    """What disagrees between obj's signature and the Args section of its docstring: a list of messages, empty
    when they agree. Exceptions and classes whose constructor takes nothing are not checked."""
    name = name or getattr(obj, "__qualname__", repr(obj))
    if inspect.isclass(obj) and (issubclass(obj, BaseException) or obj.__init__ is object.__init__):
        return []
    found = _signature_args(obj)
    if found is None:
        return []
    params, stars = found
    expected = [stars.get(p.kind, "") + p.name for p in params]
    entries = documented_args(obj.__doc__)
    if not expected:
        return [] if not entries else [f"{name}: documents arguments {list(entries)} but takes none"]
    if entries is None:
        return [f"{name}: takes {expected} but its docstring has no Args section"]
    problems = [f"{name}: argument {a!r} is not in the docstring's Args section" for a in expected if a not in entries]
    problems += [
        f"{name}: the docstring documents {a!r}, which is not an argument (the signature has {expected})"
        for a in entries
        if a not in expected
    ]
    if not problems and list(entries) != expected:
        problems.append(f"{name}: the docstring lists the arguments as {list(entries)}, the signature as {expected}")
    for p, shown in zip(params, expected):
        if p.default is not inspect.Parameter.empty and shown in entries and not _default_stated(p, entries[shown]):
            problems.append(f"{name}: the entry of {shown!r} does not state its default, 'Default {p.default!r}'")
    return problems


def undocumented(module_all, documented, module="prerast"):
    """The names of module_all that are not among documented (fully qualified object names)."""
    return [n for n in module_all if f"{module}.{n}" not in documented]


_LISTED = re.compile(r"^\.\.\s+(?:auto(?:function|class|exception|data)|py:data)::\s+(\S+)", re.M)


def listed(page_text):
    """The names a reStructuredText page documents with autodoc (or py:data) directives."""
    return {name.rsplit(".", 1)[-1] for name in _LISTED.findall(page_text)}


def remaining(module, page_names):
    """{section: [names]}: the names of module.__all__ the page does not list, under the API_SECTION of the
    module that defines each (default "More"), sections and names in __all__'s order."""
    sections = {}
    for name in module.__all__:
        if name in page_names or name.startswith("__"):
            continue
        obj = getattr(module, name)
        home = importlib.import_module(getattr(obj, "__module__", module.__name__))
        sections.setdefault(getattr(home, "API_SECTION", "More"), []).append(name)
    return sections


def entry(module, name):
    """The autodoc directive that documents module.name."""
    obj = getattr(module, name)
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    return "autofunction"


class Remaining(Directive):
    """``.. prerast-remaining::``: autodoc entries, under a rubric per section, for the public names the page
    holding it does not list."""

    def run(self):
        env = self.state.document.settings.env
        module = importlib.import_module(env.config.prerast_api_module)
        with open(self.state.document.current_source, encoding="utf-8") as f:
            sections = remaining(module, listed(f.read()))
        lines = []
        for section, names in sections.items():
            lines += [f".. rubric:: {section}", ""]
            for name in names:
                lines += [f".. {entry(module, name)}:: {module.__name__}.{name}", ""]
        holder = nodes.container()
        self.state.nested_parse(StringList(lines, source="prerast-remaining"), self.content_offset, holder)
        return holder.children


def _check_docstring(app, what, name, obj, options, lines):
    if what in ("function", "class", "method"):
        for problem in drift(obj, name):
            logger.warning(problem, type="prerast", subtype="docstring")


def _check_coverage(app, env):
    name = app.config.prerast_api_module
    module = importlib.import_module(name)
    missing = undocumented(module.__all__, env.get_domain("py").objects, name)
    if missing:
        logger.warning(
            f"{name}.__all__ names missing from the API reference: {missing}", type="prerast", subtype="coverage"
        )


def setup(app):
    app.add_config_value("prerast_api_module", "prerast", "env")
    app.add_directive("prerast-remaining", Remaining)
    app.connect("autodoc-process-docstring", _check_docstring)
    app.connect("env-check-consistency", _check_coverage)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
