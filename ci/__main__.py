"""prerast's wheel builder: `python -m ci <command>` from the repository root.

    matrix      list the cells of ci/matrix.toml (--local: which this machine can build, and why not)
    build       build, repair and smoke-test cells: --cell 2.14.1+cu130 [--cell 2.14.1+cu130@3.12] or --all-local
                (exit codes: 1 a cell failed, 2 nothing buildable was asked for, 3 a program it needs is missing:
                checked before anything is downloaded or built)
    summary     the summary table of the cells built so far (dist/cells)
    index       find-links pages and a PEP 503 index from a folder of wheels
    cibw-env    the cibuildwheel environment of one cell (the CI workflow appends it to $GITHUB_ENV)
    gh-matrix   the CI workflow's job matrix, as JSON
    toolkit-redist  a Windows CUDA cell's toolkit from NVIDIA's redistributable archives (into its CUDA_HOME)
    pin-torch   write the cell's torch pin to $PIP_CONSTRAINT (cibuildwheel's before-all on Windows and macOS)
    msvc-env    Visual Studio's developer environment (vswhere, vcvarsall.bat) as NAME=VALUE lines for $GITHUB_ENV
    preflight   ask each cell's index whether its exact torch build exists, for each of its Pythons
    release-check   before tagging: the tag matches the version, the matrix the published builds, and the
                repository settings to tick
    tag-check   the tag is v + the package version (the workflow's first step on a tag)
    release-manifests   every release's manifests merged (the Pages job builds the index from them)
    publish-plan    which targets of a tag run publish (every cell of the target passed), the summary and notes
    pypi-dir    the plan's wheels that PyPI takes (no local version), into a folder for the upload
    release-upload  the plan's wheels and per-target manifests as release assets, never replacing one
    rehearse    the tag run's publishing path here, with stand-ins for GitHub only (README: Cutting a release)
    pages-url-check     this repository's Pages URL is the one the loader's index URL is under (the Pages job)
    repair      repair one wheel with the package's policy and check it (cibuildwheel's repair command)
    smoke       smoke-test an installed or given wheel with no compiler (cibuildwheel's test command)
    symbols     audit what a wheel's libraries import (a stable-ABI plugin: only torch's C shims)
    abi-proof   install one wheel next to other torch releases and run the op tests there
    wheel       build/venv/smoke helpers of the quick start
    dev         the dev loop: build the plugin in place into package/prerast (--cpu: the CPU library only),
                recompiling only what changed, then (after --) run pytest against it
    fact        print one fact the code owns (stable-floor, plat) for the workflow's shell steps
"""
import argparse
import json
import os
import shutil
import sys


def cmd_matrix(a):
    from ci import local, matrix

    cells = matrix.select(matrix.load(), published=a.published, pr=a.pr)
    if a.json:
        print(json.dumps([{"id": c.id, "kind": c.kind, "torch": c.torch, "platform": c.platform,
                           "pythons": list(c.pythons), "archs": list(c.archs), "published": c.published, "pr": c.pr,
                           "local_tag": c.local_tag, "serves": [f"{r}+{p}" for r, p in c.serves],
                           "target": c.target.name, "os": c.target.os, "machine": c.target.machine,
                           "platform_tag": c.target.plat} for c in cells],
                         indent=2))
        return 0
    width = max(len(c.id) for c in cells) if cells else 14
    for c in cells:
        flags = ("published" if c.published else "unpublished") + (", pr" if c.pr else "")
        line = (f"{c.id:{width}} {c.kind:8} {c.target.os + ' ' + c.target.machine:15} py {' '.join(c.pythons):20} "
                f"{c.arch_list() or 'cpu':40} {flags}")
        if a.local:
            ok, why = local.verdict(c, a.python if a.python in c.pythons else None)
            line += "  -> " + ("buildable here" if ok else why)
        print(line)
        tag = f"+{c.local_tag}" if c.local_tag else "no local tag"
        print(f"{'':{width}} {c.wheel_name('<version>')}: {tag}, serves {c.serves_text()} on {c.target.describe()}")
    return 0


def _requested(a, cells):
    """[(cell, python)] from --cell NAME[@PY] and --all-local."""
    from ci import local, matrix

    runs = []
    if a.all_local:
        for c in cells:
            py = a.python if a.python in c.pythons else c.pythons[0]
            ok, why = local.verdict(c, py)
            if ok:
                runs.append((c, py))
    for name in a.cell or []:
        cell_name, _, py = name.partition("@")
        c = matrix.find(cell_name, cells)
        py = py or (a.python if a.python in c.pythons else c.pythons[0])
        ok, why = local.verdict(c, py)
        if not ok:
            print(f"cannot build {c.id} with Python {py} here: {why}", file=sys.stderr)
            return None
        if (c, py) not in runs:
            runs.append((c, py))
    return runs


def cmd_build(a):
    from ci import cells as builder, matrix, summary, tools
    from ci.progress import clock, log

    all_cells = matrix.load()
    runs = _requested(a, all_cells)
    if runs is None:
        return 2
    if not runs:
        print("nothing to build: give --cell NAME or --all-local", file=sys.stderr)
        return 2
    try:
        tools.check([py for _, py in runs], log)
    except tools.ToolsMissing as e:
        print(e, file=sys.stderr)
        return tools.ToolsMissing.exit_code
    log("cells to build: " + ", ".join(f"{c.id} (Python {py})" for c, py in runs))
    results = []
    for i, (c, py) in enumerate(runs, 1):
        log(f"=== cell {i}/{len(runs)}: {c.id} with Python {py}")
        if c.target.runs_here():
            r = builder.build_cell(c, py, a.out, a.work, a.downloads, a.archs, a.keep_build_env,
                                   not a.drop_runtime_env, a.device)
        else:  # verdict() said this machine cross-builds it
            r = builder.build_cross_cell(c, py, a.out, a.work, a.downloads, a.keep_build_env)
        log(f"=== {c.id} py{py}: {r['status']} (" + ", ".join(f"{k} {clock(v)}" for k, v in r["times"].items()) + ")")
        if any(o["cell"] == r["cell"] and o.get("runtime_venv") for o in results) and r.get("runtime_venv"):
            shutil.rmtree(r["runtime_venv"], ignore_errors=True)  # one runtime per torch build does for cross-checks
            r["runtime_venv"] = None
            builder.save_result(r, a.out)
        results.append(r)
    checks = builder.cross_check_all(builder.load_results(a.out), a.out) if not a.no_cross_check else []
    print()
    print(summary.table(builder.load_results(a.out), all_cells, checks, a.python))
    return 0 if all(r["status"] == "ok" for r in results) and all(c["ok"] for c in checks) else 1


def cmd_summary(a):
    from ci import cells as builder, matrix, summary

    path = os.path.join(a.out, "crosscheck.json")
    checks = json.load(open(path)) if os.path.exists(path) else []
    print(summary.table(builder.load_results(a.out), matrix.load(), checks, a.python))
    return 0


def cmd_index(a):
    from ci import index

    index.main(a)
    return 0


def cmd_cibw_env(a):
    from ci import cibw, matrix

    print(cibw.env_lines(matrix.find(a.cell)))
    return 0


def cmd_gh_matrix(a):
    from ci import cibw, matrix

    cells = matrix.select(matrix.load(), published=a.published, pr=a.pr)
    # A job on a retired runner label is never picked up: say so here rather than leave the run queued for days.
    problems = matrix.retired_runners(matrix.runners_in_use())
    if problems:
        print("gh-matrix: " + "\n".join(problems), file=sys.stderr)
        return 1
    print(json.dumps(cibw.github_matrix(cells), separators=(",", ":")))
    return 0


def cmd_repair(a):
    from ci import cibw

    print(cibw.repair_and_check(a.wheel, a.dest_dir, a.plat))
    return 0


def main(argv=None):
    from ci.cells import DEFAULT_DOWNLOADS, DEFAULT_OUT, DEFAULT_WORK

    p = argparse.ArgumentParser(prog="python -m ci", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("matrix", help="list the cells")
    m.add_argument("--published", action="store_true")
    m.add_argument("--pr", action="store_true", help="only the cells built on pull requests")
    m.add_argument("--local", action="store_true", help="say which cells this machine can build")
    m.add_argument("--python", default="3.11")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_matrix)

    b = sub.add_parser("build", help="build, repair and smoke-test cells")
    b.add_argument("--cell", action="append", help="NAME or NAME@PYTHON, e.g. 2.14.1+cu130@3.12 (repeatable)")
    b.add_argument("--all-local", action="store_true", help="every cell this machine can build")
    b.add_argument("--python", default="3.11", help="Python for cells named without @ (default 3.11)")
    b.add_argument("--archs", help="GPU arch list instead of the matrix's, e.g. '8.0;9.0+PTX'")
    b.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"], help="smoke-test device")
    b.add_argument("--out", default=DEFAULT_OUT)
    b.add_argument("--work", default=DEFAULT_WORK)
    b.add_argument("--downloads", default=DEFAULT_DOWNLOADS, help="local cache of torch wheels")
    b.add_argument("--keep-build-env", action="store_true")
    b.add_argument("--drop-runtime-env", action="store_true", help="delete runtime venvs (no cross-checks later)")
    b.add_argument("--no-cross-check", action="store_true")
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("summary", help="summary table of the cells built so far")
    s.add_argument("--out", default=DEFAULT_OUT)
    s.add_argument("--python", default="3.11")
    s.set_defaults(func=cmd_summary)

    i = sub.add_parser("index", help="find-links pages + PEP 503 index from wheels")
    i.add_argument("wheels", nargs="*", help="folders (searched recursively) or wheel files")
    i.add_argument("--out", required=True)
    i.add_argument("--base-url", help="URL the wheels are served from (default: relative links to the files)")
    i.add_argument("--manifest", help="manifest.json of an earlier index whose wheels the new index keeps")
    i.set_defaults(func=cmd_index)

    e = sub.add_parser("cibw-env", help="cibuildwheel environment of one cell, as NAME=VALUE lines")
    e.add_argument("--cell", required=True)
    e.set_defaults(func=cmd_cibw_env)

    g = sub.add_parser("gh-matrix", help="the CI job matrix as JSON")
    g.add_argument("--published", action="store_true")
    g.add_argument("--pr", action="store_true")
    g.set_defaults(func=cmd_gh_matrix)

    r = sub.add_parser("repair", help="repair a wheel with the package's policy and check the result")
    r.add_argument("wheel")
    r.add_argument("dest_dir")
    r.add_argument("--plat", help="the exact platform tag (default: the tag of the wheel's target in ci/matrix.toml)")
    r.set_defaults(func=cmd_repair)

    # commands with parsers of their own
    delegated = {"smoke": "ci.smoke", "wheel": "ci.wheel", "dev": "ci.dev", "preflight": "ci.preflight", "symbols": "ci.symbols",
                 "abi-proof": "ci.abi_proof", "release-check": "ci.release", "tag-check": "ci.release:tag_main",
                 "release-manifests": "ci.release:manifests_main", "toolkit-redist": "ci.toolkit_redist",
                 "pin-torch": "ci.cibw:pin_torch_main", "msvc-env": "ci.msvc_env",
                 "pages-url-check": "ci.pages_url",
                 "publish-plan": "ci.publish:plan_main",
                 "pypi-dir": "ci.publish:pypi_main",
                 "release-upload": "ci.release:upload_main",
                 "rehearse": "ci.rehearse", "fact": "ci.facts"}
    for name in delegated:
        sub.add_parser(name, help=f"see python -m ci {name} --help")
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in delegated:
        module, _, function = delegated[argv[0]].partition(":")
        return getattr(__import__(module, fromlist=["main"]), function or "main")(argv[1:]) or 0
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
