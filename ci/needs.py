"""What a `python -m ci` command needs installed in the Python that runs it, checked before the command starts.

ci/__main__.py declares, per command (or "command subcommand"), the modules it imports or runs with this Python
(`python -m pip`, `python -m twine`); before any work, a missing one ends the command with exit status 2 and the
command that installs it: the requirements file of this repository that lists its distribution
(ci/requirements-build.txt: the build, ci/requirements-ci.txt: the workflow's and the rehearsal's tools). A
missing module found minutes later would cost a build and end in another tool's traceback.
"""

import dataclasses
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Searched in this order for the file that lists a distribution: the first one listing it is named.
REQUIREMENT_FILES = ("ci/requirements-build.txt", "ci/requirements-ci.txt")


@dataclasses.dataclass(frozen=True)
class Need:
    module: str  # the name imported (or run with -m)
    dist: str = ""  # pip's name of its distribution, when it is not the module's
    platform: str = ""  # needed only where sys.platform starts with this (auditwheel: linux)
    unless: str = ""  # not needed when the command is given this option (rehearse --wheels: nothing to build)
    only_with: str = ""  # needed only when the command is given this (dev --: pytest runs)

    @property
    def distribution(self):
        return self.dist or self.module

    def applies(self, args, platform=sys.platform):
        given = set(args) | {a.partition("=")[0] for a in args}
        if self.platform and not platform.startswith(self.platform):
            return False
        if self.unless and self.unless in given:
            return False
        return not self.only_with or self.only_with in given


def needs(name, args, table, platform=sys.platform):
    """The Needs of `name args...` in `table` on `platform`: those of the command, and of "command subcommand"."""
    found = list(table.get(name, ()))
    if args and not args[0].startswith("-"):
        found += table.get(f"{name} {args[0]}", ())
    applying = [n for n in found if n.applies(args, platform)]
    return list({n.module: n for n in reversed(applying)}.values())[::-1]  # each module once, in order


def missing(needed, find_spec=importlib.util.find_spec):
    return [n for n in needed if find_spec(n.module) is None]


def listed(path, seen=()):
    """The distribution names a requirements file lists (lower case, - for _ and .), its -r includes too."""
    names = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith(("-r ", "--requirement ")):
                include = os.path.join(os.path.dirname(path), line.split(None, 1)[1])
                if include not in seen:
                    names |= listed(include, (*seen, path))
            elif m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line):
                names.add(canonical(m.group(0)))
    return names


def canonical(dist):
    return re.sub(r"[-_.]+", "-", dist).lower()


def install_commands(absent, python=sys.executable, root=ROOT):
    """The commands that install the absent Needs into `python`: ensurepip first where pip itself is absent, one
    `pip install -r FILE` per requirements file that lists some of them, `pip install NAME` for the others."""
    commands, by_file, loose = [], {}, []
    lists = {rel: listed(os.path.join(root, rel)) for rel in REQUIREMENT_FILES}
    for need in absent:
        if need.module == "pip":
            commands.append(f"{python} -m ensurepip --upgrade")
            continue
        rel = next((r for r in REQUIREMENT_FILES if canonical(need.distribution) in lists[r]), None)
        if rel:
            by_file.setdefault(rel, []).append(need)
        else:
            loose.append(need.distribution)
    commands += [f"{python} -m pip install -r {rel}" for rel in by_file]
    if loose:
        commands.append(f"{python} -m pip install {' '.join(loose)}")
    return commands


def message(command, absent, python=sys.executable, root=ROOT):
    names = ", ".join(n.distribution for n in absent)
    lines = [
        f"python -m ci {command}: this Python ({python}) lacks {names}, which the command needs; "
        "install them first (from the repository root), then run it again:"
    ]
    return "\n".join(lines + [f"    {c}" for c in install_commands(absent, python, root)])


def check(name, args, table, find_spec=importlib.util.find_spec):
    """None when the command's Needs are all importable, else the message that names them and their install."""
    if "-h" in args or "--help" in args:
        return None
    absent = missing(needs(name, args, table), find_spec)
    if not absent:
        return None
    sub = f"{name} {args[0]}" if args else name
    return message(sub if sub in table else name, absent)
