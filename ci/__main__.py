"""prerast's wheel builder: `python -m ci <command>` from the repository root (`python -m ci <command> --help`).

Each command is a main(argv) of a module of ci's subpackages, by job: ci/matrix (the cells, the workflow's job
matrix), ci/toolkit (Windows's CUDA toolkit and compiler, Debian's CUDA 12.4), ci/build (building cells and wheels
here), ci/repair (cibuildwheel's repair step and the checks of a repaired wheel), ci/publish (index, release and
its rehearsal).
"""

import importlib
import sys

# command -> ("module:function", help). The names are the workflow's and the docs' contract: never rename one.
COMMANDS = {
    "matrix": (
        "ci.build.commands:matrix_main",
        "list the cells of ci/matrix.toml and the parts of each target's wheel (--local: which cells this machine can "
        "build, and why not)",
    ),
    "build": (
        "ci.build.commands:build_main",
        "build, repair and smoke-test cells: --cell 2.14.1+cu130 [--cell 2.14.1+cu130@3.12] or --all-local",
    ),
    "wheel-local": (
        "ci.build.wheel_local:main",
        "the one Linux x86-64 wheel from parts built here: --archs 8.0 --classic 2.4 --out DIR",
    ),
    "merge": (
        "ci.build.merge:main",
        "combine part wheels (bindings, kernel libraries) into one wheel: --out DIR [--slim] PARTS...",
    ),
    "merge-target": (
        "ci.build.merge_target:main",
        "one target's wheels from its part wheels: the one wheel and the slim ones (the workflow's merge job)",
    ),
    "summary": ("ci.build.commands:summary_main", "the summary table of the cells built so far (dist/cells)"),
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
        "ci.build.smoke:main",
        "smoke-test an installed or given wheel with no compiler (cibuildwheel's test command)",
    ),
    "symbols": (
        "ci.repair.symbols:main",
        "audit what a wheel's libraries import (a stable-ABI plugin: only torch's C shims)",
    ),
    "cudart-exports": (
        "ci.repair.cudart_exports:main",
        "the cudart exports a CUDA kernel library may import (--update: make them from the matrix and PyPI)",
    ),
    "abi-proof": (
        "ci.repair.abi_proof:main",
        "install one wheel next to other torch releases and run the op tests there",
    ),
    "wheel": ("ci.build.wheel:main", "build/venv/smoke helpers of the quick start"),
    "cross": (
        "ci.build.cross:main",
        "cross-build the aarch64 CPU wheel here and run it under qemu (fetch, build, python, cuda-probe)",
    ),
    "dev": (
        "ci.build.dev:main",
        "the dev loop: build the plugin in place into package/prerast (--cpu: the CPU "
        "library only), recompiling only what changed, then (after --) run pytest against it",
    ),
    "fact": (
        "ci.matrix.facts:main",
        "print one fact the code owns (stable-floor, plat) for the workflow's shell steps",
    ),
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
    module, _, function = COMMANDS[argv[0]][0].partition(":")
    return getattr(importlib.import_module(module), function)(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
