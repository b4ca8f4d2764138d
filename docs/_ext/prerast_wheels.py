"""Sphinx extension: the table of one release's wheels per platform, made from ci/matrix.toml.

``{prerast-wheel-table}`` (a MyST directive) writes one row per target of the matrix: its platform, the wheel
without a local version (PyPI's: CUDA 13.x torch and CPU-only torch, or the CPU wheel where torch has no CUDA
build) and the CUDA 12.x one. A new platform is a [target.*] table there and nothing here.
"""

import os
import sys

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_CUDA = "(torch has no CUDA build there)"


def rows(cells):
    """[[platform, PyPI wheel, CUDA 12 wheel]] of the published stable cells, one row per target in matrix order."""
    table, cuda = {}, set()
    for cell in cells:
        if cell.kind != "stable" or not cell.published:
            continue
        row = table.setdefault(cell.target.name, [cell.target.describe(), "", NO_CUDA])
        if cell.cuda:
            cuda.add(cell.target.name)
        wheel = f"`{cell.wheel_name('<v>')}`"
        if not cell.local_tag:
            row[1] = wheel
        elif cell.cuda and cell.cuda.startswith("12."):
            row[2] = wheel
    return [[r[0] + ("" if name in cuda else " (CPU)"), *r[1:]] for name, r in table.items()]


def markdown(cells):
    head = ["| platform | CUDA 13.x torch and CPU-only torch (PyPI) | CUDA 12.x torch |", "| --- | --- | --- |"]
    return head + [f"| {' | '.join(r)} |" for r in rows(cells)]


class WheelTable(Directive):
    """The table, parsed as the page's own markup (MyST: Markdown)."""

    def run(self):
        if ROOT not in sys.path:
            sys.path.insert(0, ROOT)
        from ci import matrix

        holder = nodes.container()
        self.state.nested_parse(StringList(markdown(matrix.load()), source="ci/matrix.toml"), 0, holder)
        return holder.children


def setup(app):
    app.add_directive("prerast-wheel-table", WheelTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
