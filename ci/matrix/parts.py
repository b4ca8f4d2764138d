"""The parts each target's one wheel is merged from: what the workflow's wheel jobs build, and the wheels each
target's merge makes of them. Everything that builds, merges or publishes parts asks this module.

A target's wheel (ci/builder/merge.py) is made of parts, each built by a job of its own on the target's runner:
  kernels   torch-free kernel libraries: the CPU one, and one per CUDA major that the target's cells use (the
            majors of their cuXXX platforms), each compiled by ONE toolkit of that major ([kernels] cuda of
            ci/matrix.toml, or the target's `kernels` table) for that toolkit's archs: nvcc runs once per (target,
            CUDA major), never per torch release;
  binding   the op library for one torch ABI, compiled with the host compiler only: the stable one, with the torch
            of the target's newest stable cell (a CUDA build of it where the target has CUDA, so that its CUDA part
            is built), and on the default target one classic binding per torch minor below the floor, with the
            torch build PyPI serves for that minor's lowest patch release.
A cell needs its target's CPU kernels, the CUDA kernels of its CUDA major and the binding of its torch; a part is
published (built on pull requests) when a published (pr) cell needs it. A cell that is neither adds no part: the
unpublished cu118 cells ask for no CUDA 11 kernels.

A target's merge (python -m ci merge-target) makes the one wheel of all its parts, with no local version (what PyPI
gets), and the slim wheels the index pages serve next to it: the stable binding with the CPU kernels (+cpu) and
with each CUDA kernel library (+cu12, +cu13), each classic binding with the CUDA kernels of its torch's major
(+pt24cu121) and with the CPU ones (+pt24cpu). A target without CUDA kernels (macOS) has the one wheel only.
"""

import dataclasses

from ci import matrix
from prerast_meta import compat


@dataclasses.dataclass(frozen=True)
class Part:
    name: str  # "kernels-cu12", "binding-stable", "binding-pt24": its id on the default target
    kind: str  # "kernels" or "binding"
    target: matrix.Target
    default_target: bool
    published: bool
    pr: bool
    compute: str = ""  # kernels: "cpu" or "cu12"
    toolkit: str = ""  # CUDA kernels: the CUDA version of the nvcc that compiles them ("12.8")
    archs: tuple = ()  # CUDA kernels: the GPU archs compiled
    host_gcc: int = 0  # CUDA kernels: the newest gcc that nvcc accepts (Linux: its gcc-toolset)
    abi: str = ""  # binding: "stable" or "classic"
    # The cell whose torch build the build environment gets: a binding's, which it is compiled against; None for a
    # kernels part, except where the repair tool wants torch (see torch_for_repair).
    cell: matrix.Cell = None

    @property
    def id(self):
        """'kernels-cu12', then the target unless it is the default ('kernels-cu12-linux-aarch64'), as cell ids."""
        return self.name + ("" if self.default_target else f"-{self.target.name}")

    @property
    def nvcc(self):
        """Does its build compile CUDA code?"""
        return bool(self.toolkit)

    @property
    def headers(self):
        """The CUDA toolkit whose headers a binding's CUDA part compiles with, where its torch brings none:
        Windows, whose CUDA torch carries its CUDA DLLs itself and no nvidia-* wheels (setup.py reads the headers
        of those wheels elsewhere). Nothing of it is run: no nvcc. '' for every other part."""
        if self.kind == "binding" and self.cell.cuda and self.target.os == "windows":
            return self.cell.cuda
        return ""

    @property
    def cuda(self):
        """The CUDA toolkit version its job installs: the kernels' nvcc, or a Windows binding's headers ('': none)."""
        return self.toolkit or self.headers

    @property
    def python(self):
        """The CPython its wheel is built with (any: every part is py3-none): its torch's oldest, else the floor."""
        return self.cell.pythons[0] if self.cell else compat.python_floor_text()

    @property
    def torch_for_repair(self):
        """A kernels part with torch in its build environment only for the repair: delocate (macOS) is pointed at
        torch's lib folder before it runs, also for a library that links no torch (prerast_meta/repair.py,
        tool_env), and stops without one. The compile never imports it (PRERAST_PARTS=kernels)."""
        return self.kind == "kernels" and self.cell is not None

    @property
    def local_tag(self):
        """The local version its build stamps: 'kernels.cpu', 'kernels.cu12', 'binding.stable', 'binding.pt24'."""
        if self.kind == "kernels":
            return compat.kernels_tag(self.compute[2:] if self.compute != "cpu" else None)
        return compat.binding_tag(self.cell.torch, self.abi)

    def wheel_name(self, version):
        return f"prerast-{version}+{self.local_tag}-{compat.tags_for(self.target.plat)}.whl"

    def arch_list(self):
        return ";".join(self.archs)

    def describe(self):
        """What it is, in a line of `python -m ci matrix`."""
        if self.kind == "kernels" and not self.nvcc:
            return "CPU kernels: no toolkit, no torch" + (" (torch for delocate only)" if self.torch_for_repair else "")
        if self.kind == "kernels":
            host = f" (gcc {self.host_gcc})" if self.target.os == "linux" else ""
            return f"CUDA {self.compute[2:]} kernels: nvcc {self.toolkit}{host}, archs {self.arch_list()}"
        where = "PyPI" if self.cell.on_pypi else self.cell.torch_index()
        serves = (
            f"torch >= {compat.floor_text()}" if self.abi == "stable" else f"torch {matrix.minor(self.cell.torch)}.x"
        )
        cuda = ""
        if self.cell.cuda:
            cuda = f", CUDA part with the headers of toolkit {self.headers}" if self.headers else ", CUDA part"
        return f"{self.abi} binding for {serves}: torch {self.cell.torch_build} ({where}){cuda}"


@dataclasses.dataclass(frozen=True)
class Merge:
    """One wheel a target's merge makes: the one wheel of all its parts (slim False, no local version) or a slim
    one of a binding and its kernels."""

    target: matrix.Target
    parts: tuple  # Part
    slim: bool
    local_tag: str  # "" for the one wheel; "cu12", "pt24cu121", ... as ci/builder/merge.py's slim_tag gives it

    def wheel_name(self, version):
        local = f"+{self.local_tag}" if self.local_tag else ""
        return f"prerast-{version}{local}-{compat.tags_for(self.target.plat)}.whl"


def _stable_build_cell(cells, target):
    """The stable cell whose torch the target's stable binding is built with: the newest published one, a build
    of PyPI's CUDA major where there is one (its nvidia-* wheels give the CUDA part its headers)."""
    stable = [c for c in cells if c.target == target and c.kind == "stable"]
    return max(
        stable,
        key=lambda c: (
            c.published,
            matrix._vkey(c.torch),
            bool(c.cuda),
            compat.cuda_major(c.cuda) == compat.PYPI_CUDA_MAJOR,
        ),
    )


def _classic_build_cell(cells, target, minor):
    """The classic cell of `minor` whose torch its binding is built with: the lowest patch release's PyPI build."""
    for c in cells:
        if c.kind == "classic" and c.target == target and matrix.minor(c.torch) == minor and c.on_pypi:
            return c
    raise matrix.MatrixError(f"torch {minor}: no classic cell of the build PyPI serves to build its binding with")


def _kernel_toolkit(data, target, major):
    """(toolkit version, archs, host_gcc) of the target's CUDA `major` kernels."""
    toolkits = dict(data.get("kernels", {}).get("cuda", {}), **dict(target.kernels))
    version = toolkits.get(major)
    if version is None:
        raise matrix.MatrixError(
            f"[target.{target.name}]: its cells use CUDA {major}, but no toolkit builds its CUDA {major} kernels: "
            f'add "{major}" = "{major}.<minor>" to [kernels] cuda'
        )
    table = data.get("cuda", {}).get(version)
    if compat.cuda_major(version) != major or table is None:
        raise matrix.MatrixError(
            f"[target.{target.name}]: the CUDA {major} kernels name toolkit {version!r}: a CUDA {major}.x version "
            'with a [cuda."X.Y"] table'
        )
    return version, tuple(dict(target.archs).get(version, table["archs"])), int(table["host_gcc"])


def load(path=matrix.MATRIX_FILE, cells=None):
    """Every part of every target, target by target: kernels (CPU, then by CUDA major), stable binding, classic
    bindings by torch release."""
    data = matrix._load_toml(path)
    cells = matrix.load(path) if cells is None else cells
    parts = []
    for target in matrix.targets(path).values():
        here = [c for c in cells if c.target == target and (c.published or c.pr)]
        if not here:
            continue

        def part(name, kind, needing, target=target, default=here[0].default_target, **fields):
            published, pr = any(c.published for c in needing), any(c.pr for c in needing)
            return Part(name, kind, target, default, published, pr, **fields)

        stable = [c for c in here if c.kind == "stable"]
        stable_cell = _stable_build_cell(cells, target) if stable else None
        repair_torch = stable_cell if target.repair == "delocate" else None
        parts.append(part("kernels-cpu", "kernels", here, compute="cpu", cell=repair_torch))
        for major in sorted({compat.cuda_major(c.cuda) for c in here if c.cuda}, key=int):
            version, archs, gcc = _kernel_toolkit(data, target, major)
            needing = [c for c in here if compat.cuda_major(c.cuda) == major]
            parts.append(
                part(
                    f"kernels-cu{major}",
                    "kernels",
                    needing,
                    compute=f"cu{major}",
                    toolkit=version,
                    archs=archs,
                    host_gcc=gcc,
                    cell=repair_torch,
                )
            )
        if stable:
            parts.append(part("binding-stable", "binding", stable, abi="stable", cell=stable_cell))
        for minor in sorted({matrix.minor(c.torch) for c in here if c.kind == "classic"}, key=matrix._vkey):
            needing = [c for c in here if c.kind == "classic" and matrix.minor(c.torch) == minor]
            build = _classic_build_cell(cells, target, minor)
            parts.append(part(f"binding-pt{minor.replace('.', '')}", "binding", needing, abi="classic", cell=build))
    return parts


def select(parts, published=False, pr=False):
    return [p for p in parts if (not published or p.published) and (not pr or p.pr)]


def find(part_id, parts=None):
    parts = load() if parts is None else parts
    for p in parts:
        if p.id == part_id:
            return p
    raise matrix.MatrixError(f"no part {part_id!r} in ci/matrix.toml; parts: {', '.join(p.id for p in parts)}")


def by_target(parts):
    """{target name: [its parts]}, in the parts' order."""
    found = {}
    for p in parts:
        found.setdefault(p.target.name, []).append(p)
    return found


def merges(target_parts):
    """The wheels a target's merge makes of `target_parts` (the parts of one target a run builds): the one wheel of
    them all first, then the slim ones. Slim wheels only where there are CUDA kernels: without them a slim wheel
    would be the one wheel under another name."""
    target = target_parts[0].target
    out = [Merge(target, tuple(target_parts), False, "")]
    kernels = {p.compute: p for p in target_parts if p.kind == "kernels"}
    cpu, cuda = kernels.get("cpu"), [k for c, k in kernels.items() if c != "cpu"]
    if cpu is None or not cuda:
        return out
    for b in (p for p in target_parts if p.kind == "binding"):
        torch = b.cell.torch
        if b.abi == "stable":
            out.append(Merge(target, (b, cpu), True, compat.local_tag(torch, None, "stable", target.system)))
            out += [Merge(target, (b, cpu, k), True, k.compute) for k in cuda]
            continue
        own = kernels.get(f"cu{compat.cuda_major(b.cell.cuda)}") if b.cell.cuda else None
        if own:
            out.append(Merge(target, (b, cpu, own), True, compat.local_tag(torch, b.cell.cuda, "classic")))
        out.append(Merge(target, (b, cpu), True, compat.local_tag(torch, None, "classic")))
    return out


def target_wheels(parts, version):
    """{target name: [the file names of its merged wheels]} of a run that builds `parts`."""
    return {name: [m.wheel_name(version) for m in merges(ps)] for name, ps in by_target(parts).items()}
