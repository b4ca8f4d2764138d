"""prerast's wheel builder: `python -m ci <command>` from the repository root (`python -m ci <command> --help`).

Each command is a main(argv) of a module of ci's subpackages, by job: ci/matrix (the cells, the workflow's job
matrix), ci/toolkit (Windows's CUDA toolkit and compiler, Debian's CUDA 12.4), ci/builder (building cells and wheels
here), ci/repair (cibuildwheel's repair step and the checks of a repaired wheel), ci/publish (index, release and
its rehearsal).
"""

import dataclasses
import importlib
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# command -> ("module:function", help). The names are the workflow's and the docs' contract: never rename one.
COMMANDS = {
    "matrix": (
        "ci.builder.commands:matrix_main",
        "list the cells of ci/matrix.toml and the parts of each target's wheel (--local: which cells this machine can "
        "build, and why not)",
    ),
    "build": (
        "ci.builder.commands:build_main",
        "build, repair and smoke-test cells: --cell 2.14.1+cu130 [--cell 2.14.1+cu130@3.12] or --all-local",
    ),
    "wheel-local": (
        "ci.builder.wheel_local:main",
        "the one Linux x86-64 wheel from parts built here: --archs 8.0 --classic 2.4 --out DIR",
    ),
    "merge": (
        "ci.builder.merge:main",
        "combine part wheels (bindings, kernel libraries) into one wheel: --out DIR [--slim] PARTS...",
    ),
    "merge-target": (
        "ci.builder.merge_target:main",
        "one target's wheels from its part wheels: the one wheel and the slim ones (the workflow's merge job)",
    ),
    "summary": ("ci.builder.commands:summary_main", "the summary table of the cells built so far (dist/cells)"),
    "index": ("ci.publish.index:main", "find-links pages and a PEP 503 index from a folder of wheels"),
    "cibw-env": (
        "ci.matrix.cibw:env_main",
        "the cibuildwheel environment of one part (the CI workflow appends it to $GITHUB_ENV)",
    ),
    "gh-matrix": (
        "ci.matrix.cibw:gh_matrix_main",
        "the CI workflow's job matrix, as JSON: the parts' wheel jobs, or (--jobs targets) the merge and smoke jobs",
    ),
    "toolkit-redist": (
        "ci.toolkit.redist:main",
        "a Windows CUDA cell's toolkit from NVIDIA's redistributable archives (into its CUDA_HOME)",
    ),
    "toolkit": (
        "ci.toolkit.debian:main",
        "CUDA 12.4 from Debian trixie's packages into a private CUDA_HOME, no system install (prints its path)",
    ),
    "pin-torch": (
        "ci.matrix.cibw:pin_torch_main",
        "write the part's torch pin to $PIP_CONSTRAINT (cibuildwheel's before-all on Windows and macOS)",
    ),
    "msvc-env": (
        "ci.toolkit.msvc_env:main",
        "Visual Studio's developer environment (vswhere, vcvarsall.bat) as NAME=VALUE lines for $GITHUB_ENV",
    ),
    "preflight": (
        "ci.matrix.preflight:main",
        "ask each cell's index whether its exact torch build exists, for each of its Pythons",
    ),
    "release-check": (
        "ci.publish.release:main",
        "before tagging: the tag matches the version, the matrix the "
        "published builds, and the repository settings to tick",
    ),
    "tag-check": (
        "ci.publish.release:tag_main",
        "the tag is v + the package version (the workflow's first step on a tag)",
    ),
    "release-manifests": (
        "ci.publish.release:manifests_main",
        "every release's manifests merged (the Pages job builds the index from them)",
    ),
    "publish-plan": (
        "ci.publish.plan:plan_main",
        "which targets of a tag run publish (every part of the target built and merged), the summary and notes",
    ),
    "pypi-dir": (
        "ci.publish.plan:pypi_main",
        "the plan's wheels that PyPI takes (no local version), into a folder for the upload",
    ),
    "release-upload": (
        "ci.publish.upload:upload_main",
        "the plan's wheels and per-target manifests as release assets, never replacing one",
    ),
    "rehearse": (
        "ci.publish.rehearse:main",
        "the tag run's publishing path here, with stand-ins for GitHub only (README: Cutting a release)",
    ),
    "pages-url-check": (
        "ci.publish.pages_url:main",
        "this repository's Pages URL is the one the loader's index URL is under (the Pages job)",
    ),
    "repair": (
        "ci.repair.check:main",
        "repair one wheel with the package's policy and check it (cibuildwheel's repair command)",
    ),
    "smoke": (
        "ci.builder.smoke:main",
        "smoke-test an installed or given wheel with no compiler (cibuildwheel's test command)",
    ),
    "part-check": (
        "ci.builder.part_check:main",
        "a part's wheel installed under this Python is whole and py3-none (cibuildwheel's test of a part)",
    ),
    "symbols": (
        "ci.repair.symbols:main",
        "audit what a wheel's libraries import (a stable-ABI plugin: only torch's C shims; none: no Python C API)",
    ),
    "cudart-exports": (
        "ci.repair.cudart_exports:main",
        "the cudart exports a CUDA kernel library may import (--update: make them from the matrix and PyPI)",
    ),
    "abi-proof": (
        "ci.repair.abi_proof:main",
        "install one wheel next to other torch releases and run the op tests there",
    ),
    "wheel": ("ci.builder.wheel:main", "build/venv/smoke helpers of the quick start"),
    "cross": (
        "ci.builder.cross:main",
        "cross-build the aarch64 CPU wheel here and run it under qemu (fetch, build, python, cuda-probe)",
    ),
    "dev": (
        "ci.builder.dev:main",
        "the dev loop: build the plugin in place into package/prerast (--cpu: the CPU "
        "library only), recompiling only what changed, then (after --) run pytest against it",
    ),
    "fact": (
        "ci.matrix.facts:main",
        "print one fact the code owns (stable-floor, plat) for the workflow's shell steps",
    ),
}


# What a command needs installed in the Python that runs it, checked before the command starts: the modules it
# imports or runs with this Python (`python -m pip`, `python -m twine`). A missing one ends the command with exit
# status 2 and the command that installs it: the requirements file of this repository that lists its
# distribution (ci/requirements-build.txt: the build, ci/requirements-ci.txt: the workflow's and the rehearsal's
# tools). A missing module found minutes later would cost a build and end in another tool's traceback.
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


# The one command that makes a virtualenv with everything a command needs, where the docs name one.
VENV_COMMANDS = {
    "rehearse": "python3.11 -m ci wheel venv .venv/build -r ci/requirements-build.txt ci/requirements-ci.txt",
}


def message(command, absent, python=sys.executable, root=ROOT):
    names = ", ".join(n.distribution for n in absent)
    lines = [
        f"python -m ci {command}: this Python ({python}) lacks {names}, which the command needs; "
        "install them first (from the repository root), then run it again:"
    ]
    lines += [f"    {c}" for c in install_commands(absent, python, root)]
    venv = VENV_COMMANDS.get(command.split()[0])
    if venv:
        lines += ["or make the virtualenv it runs from (README.md):", f"    {venv}"]
    return "\n".join(lines)


def check(name, args, table, find_spec=importlib.util.find_spec):
    """None when the command's Needs are all importable, else the message that names them and their install."""
    if "-h" in args or "--help" in args:
        return None
    absent = missing(needs(name, args, table), find_spec)
    if not absent:
        return None
    sub = f"{name} {args[0]}" if args else name
    return message(sub if sub in table else name, absent)


# command (or "command subcommand") -> what it needs installed in the Python that runs it (Need above): checked
# before the command starts, so that a missing package costs no work and ends with the command that installs it.
_BUILD = (
    Need("pip"),
    Need("torch"),
    Need("setuptools"),
    Need("wheel"),
    Need("auditwheel", platform="linux"),
)
REQUIRES = {
    "wheel-local": _BUILD,
    "wheel build": _BUILD,
    "dev": (Need("torch"), Need("setuptools"), Need("pytest", only_with="--")),
    # Without --wheels it builds the wheel it rehearses with first (python -m ci wheel build).
    "rehearse": (
        Need("pypiserver"),
        Need("twine"),
        Need("yaml", dist="pyyaml"),
        *(dataclasses.replace(n, unless="--wheels") for n in _BUILD),
    ),
    "repair": (
        Need("auditwheel", platform="linux"),
        Need("delvewheel", platform="win32"),
        Need("delocate", platform="darwin"),
    ),
    "smoke": (Need("torch", unless="--venv"),),
    "preflight": (Need("pip"),),
    "cross": (Need("pip"),),
    # The served-runtime audit reads auditwheel's manylinux policy table (ci/repair/served.py).
    "symbols": (Need("auditwheel", platform="linux"),),
    "cudart-exports": (Need("pip"), Need("auditwheel", platform="linux")),
    # Compiled against this Python's torch headers, then repaired with the package's policy.
    "cross build": _BUILD,
}


def usage():
    width = max(map(len, COMMANDS))
    # The braced list is argparse's form, which the docs' checker (docs/_ext/prerast_names.py) reads.
    lines = [f"usage: python -m ci {{{','.join(COMMANDS)}}} [--help] ...", "", __doc__.strip(), "", "commands:"]
    lines += [f"  {name:{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"python -m ci: no command {argv[0]!r}; the commands are: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    lacking = check(argv[0], argv[1:], REQUIRES)
    if lacking:
        print(lacking, file=sys.stderr)
        return 2
    module, _, function = COMMANDS[argv[0]][0].partition(":")
    return getattr(importlib.import_module(module), function)(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
