"""The summary table of a local run: one row per built (cell, Python), then the matrix cells this machine cannot
build with the reason, then the wrong-torch cross-checks. Markdown, so that it pastes into a release note."""

import os

from ci.builder import buildable
from ci.builder.progress import clock


def _size(n):
    return f"{n / 1e6:.1f} MB"


def _smoke(r):
    s = r.get("smoke")
    if not s:
        return "-"
    if "qemu" in s.get("device", ""):  # a cross-built cell: rendered under qemu-user
        took = f" in {s['qemu_run_s']:.0f} s" if "qemu_run_s" in s else ""
        return f"ok: render under qemu ({s['machine']}, torch {s['torch']}){took}, cpu-only wheel"
    parts = [f"ok: cpu render {s['first_frame_s'] * 1000:.0f} ms"]
    parts.append("gpu " + ("ok" if s.get("gpu") else "n/a (no GPU here)") if r.get("archs") else "cpu-only wheel")
    parts.append("venv read-only" if s.get("venv_read_only") else "venv watched")
    return ", ".join(parts)


def _cache(r, key):
    c = r.get(key) or {}
    total = c.get("hits", 0) + c.get("misses", 0)
    return f"{c.get('hits', 0)}/{total} hits" if total else "no cacheable compiles"


def _warm(r):
    t = r.get("times", {})
    if "warm" not in t:
        return "warm build not measured (no ccache)"
    return f"{clock(t['warm'])} ({_cache(r, 'ccache_warm')})"


def built_rows(results):
    head = (
        "| cell | python | wheel | size | archs | platform tag | build cold | build warm (ccache) | smoke |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for r in results:
        t = r.get("times", {})
        if r.get("status") != "ok":
            rows.append(
                f"| {r['cell']} | {r['python']} | FAILED at {r.get('step')} | | | | "
                f"{clock(t['cold']) if 'cold' in t else '-'} | | {r.get('error', '')[:120]!r} |"
            )
            continue
        archs = " ".join(r["archs"]) or "cpu"
        rows.append(
            f"| {r['cell']} | {r['python']} | {os.path.basename(r['wheel'])} | {_size(r['size'])} | {archs} | "
            f"{r['platform_tag']} | {clock(t['cold'])} | {_warm(r)} | "
            f"{_smoke(r)} |"
        )
    return "\n".join(rows)


def unbuilt_rows(cells, results, python_version):
    built = {r["cell"] for r in results}
    rows = ["| cell | pythons | archs | not built here because |", "|---|---|---|---|"]
    for c in cells:
        if c.id in built:
            continue
        ok, why = buildable.verdict(c, python_version if python_version in c.pythons else None)
        why = why or "buildable here, not requested in this run"
        rows.append(f"| {c.id} | {' '.join(c.pythons)} | {' '.join(c.archs) or 'cpu'} | {why} |")
    return "\n".join(rows)


def cross_rows(checks):
    rows = ["| wheel built for | installed next to torch | result |", "|---|---|---|"]
    for c in checks:
        first = next((line for line in c["message"].splitlines() if "mismatch:" in line), c["message"][-120:])
        if c.get("expect_load"):
            verdict = "loads (it serves that torch)" if c["ok"] else "FAILED TO LOAD although it serves that torch"
        else:
            verdict = "refused with BinaryMismatchError" if c["ok"] else "NOT REFUSED AS EXPECTED"
        rows.append(f"| {c['wheel_cell']} | {c['runtime']} | {verdict}: `{first.strip()}` |")
    return "\n".join(rows)


def table(results, cells, checks, python_version="3.11"):
    parts = ["### Built and smoke-tested here", built_rows(results)]
    if checks:
        parts += ["", "### Each wheel installed next to another cell's torch: served, or refused", cross_rows(checks)]
    parts += ["", "### Matrix cells not built on this machine", unbuilt_rows(cells, results, python_version)]
    return "\n".join(parts)
