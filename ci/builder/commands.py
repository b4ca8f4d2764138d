"""The commands about what this machine builds: `matrix` (the cells and the parts of each target's wheel; --local: which are buildable here, and why
not), `build` (build, repair and smoke-test cells) and `summary` (the table of the cells built so far).

    python -m ci matrix --local
    python -m ci build --cell 2.14.1+cu130 [--cell 2.14.1+cu130@3.12] | --all-local
        (exit codes: 1 a cell failed, 2 nothing buildable was asked for, 3 a program it needs is missing: checked
        before anything is downloaded or built)
    python -m ci summary
"""

import argparse
import json
import os
import shutil
import sys

from ci import matrix
from ci.builder import buildable, cells as builder, summary, tools
from ci.builder.cells import DEFAULT_DOWNLOADS, DEFAULT_OUT, DEFAULT_WORK
from ci.builder.progress import clock, log
from ci.matrix import parts


def part_lines(selected):
    """The parts of `selected` (ci/matrix/parts.py), then the wheels each target's merge makes of them."""
    width = max((len(p.id) for p in selected), default=12)
    lines = ["", "parts (one wheel job each; merged per target):"]
    for p in selected:
        flags = ("published" if p.published else "unpublished") + (", pr" if p.pr else "")
        lines.append(f"{p.id:{width}} {p.target.name:14} {p.describe()}  [{flags}]")
    for name, group in parts.by_target(selected).items():
        wheels = parts.merges(group)
        slim = ", ".join(f"+{m.local_tag}" for m in wheels if m.slim) or "none"
        lines.append(f"{name}: {wheels[0].wheel_name('<version>')} of {len(group)} parts; slim wheels: {slim}")
    return lines


def matrix_main(argv=None):
    m = argparse.ArgumentParser(
        prog="python -m ci matrix", description="The cells of ci/matrix.toml and the parts their wheels are made of."
    )
    m.add_argument("--published", action="store_true")
    m.add_argument("--pr", action="store_true", help="only the cells built on pull requests")
    m.add_argument("--local", action="store_true", help="say which cells this machine can build")
    m.add_argument("--python", default="3.11")
    m.add_argument("--json", action="store_true")
    a = m.parse_args(argv)
    all_cells = matrix.load()
    cells = matrix.select(all_cells, published=a.published, pr=a.pr)
    selected = parts.select(parts.load(cells=all_cells), published=a.published, pr=a.pr)
    if a.json:
        print(
            json.dumps(
                {
                    "cells": [
                        {
                            "id": c.id,
                            "kind": c.kind,
                            "torch": c.torch,
                            "platform": c.platform,
                            "pythons": list(c.pythons),
                            "archs": list(c.archs),
                            "published": c.published,
                            "pr": c.pr,
                            "local_tag": c.local_tag,
                            "serves": [f"{r}+{p}" for r, p in c.serves],
                            "target": c.target.name,
                            "os": c.target.os,
                            "machine": c.target.machine,
                            "platform_tag": c.target.plat,
                        }
                        for c in cells
                    ],
                    "parts": [
                        {
                            "id": p.id,
                            "kind": p.kind,
                            "target": p.target.name,
                            "runner": p.target.runner,
                            "compute": p.compute or None,
                            "abi": p.abi or None,
                            "toolkit": p.cuda or None,
                            "nvcc": p.nvcc,
                            "archs": list(p.archs),
                            "torch": p.cell.torch_build if p.cell else None,
                            "published": p.published,
                            "pr": p.pr,
                        }
                        for p in selected
                    ],
                },
                indent=2,
            )
        )
        return 0
    width = max(len(c.id) for c in cells) if cells else 14
    for c in cells:
        flags = ("published" if c.published else "unpublished") + (", pr" if c.pr else "")
        line = (
            f"{c.id:{width}} {c.kind:8} {c.target.os + ' ' + c.target.machine:15} py {' '.join(c.pythons):20} "
            f"{c.arch_list() or 'cpu':40} {flags}"
        )
        if a.local:
            ok, why = buildable.verdict(c, a.python if a.python in c.pythons else None)
            line += "  -> " + ("buildable here" if ok else why)
        print(line)
        tag = f"+{c.local_tag}" if c.local_tag else "no local tag"
        print(f"{'':{width}} {c.wheel_name('<version>')}: {tag}, serves {c.serves_text()} on {c.target.describe()}")
    print("\n".join(part_lines(selected)))
    return 0


def _requested(a, cells):
    """[(cell, python)] from --cell NAME[@PY] and --all-local."""
    runs = []
    if a.all_local:
        for c in cells:
            py = a.python if a.python in c.pythons else c.pythons[0]
            ok, why = buildable.verdict(c, py)
            if ok:
                runs.append((c, py))
    for name in a.cell or []:
        cell_name, _, py = name.partition("@")
        c = matrix.find(cell_name, cells)
        py = py or (a.python if a.python in c.pythons else c.pythons[0])
        ok, why = buildable.verdict(c, py)
        if not ok:
            print(f"cannot build {c.id} with Python {py} here: {why}", file=sys.stderr)
            return None
        if (c, py) not in runs:
            runs.append((c, py))
    return runs


def build_main(argv=None):
    b = argparse.ArgumentParser(prog="python -m ci build", description="Build, repair and smoke-test cells.")
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
    a = b.parse_args(argv)
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
            r = builder.build_cell(
                c, py, a.out, a.work, a.downloads, a.archs, a.keep_build_env, not a.drop_runtime_env, a.device
            )
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


def summary_main(argv=None):
    s = argparse.ArgumentParser(prog="python -m ci summary", description="The summary table of the cells built so far.")
    s.add_argument("--out", default=DEFAULT_OUT)
    s.add_argument("--python", default="3.11")
    a = s.parse_args(argv)
    path = os.path.join(a.out, "crosscheck.json")
    checks = json.load(open(path)) if os.path.exists(path) else []
    print(summary.table(builder.load_results(a.out), matrix.load(), checks, a.python))
    return 0
