"""ci/matrix.toml expanded into cells: one (torch release, compute platform) pair each, one wheel each.

Two kinds of cell: a stable-ABI cell builds one wheel with the newest torch that serves every torch release from
the stable floor (2.10) on, per target (OS and machine: Linux x86-64 and aarch64, Windows x86-64, macOS arm64) and
CUDA major; a classic cell (Linux x86-64 only) builds one wheel against the lowest patch release of a
torch minor below the floor and serves every patch release of that minor. `Cell.serves` lists the torch builds
(release, platform) a cell's wheel serves: the find-links pages it is listed on.

Everything that needs to know which wheels exist asks this module or ci/matrix/parts.py (the parts CI builds and
merges into each target's wheels); nothing else reads the TOML file.
"""

import dataclasses
import os
import re
import sys

from prerast_meta import compat

MATRIX_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "matrix.toml")
PUBLISHED_FILE = os.path.join(os.path.dirname(MATRIX_FILE), "published_builds.toml")


class MatrixError(ValueError):
    """The matrix file is inconsistent, or a cell name matches no cell."""


def _load_toml(path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise MatrixError("reading ci/matrix.toml needs Python >= 3.11 (tomllib) or the tomli package") from None
    with open(path, "rb") as f:
        return tomllib.load(f)


def _vkey(version):
    """'2.14.1' -> (2, 14, 1), for ordering and comparison."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0]))


# cibuildwheel's build-identifier platform per (os, machine): cp310-manylinux_x86_64, cp310-win_amd64, ...
IDENTIFIER_PLATFORM = {"linux": "manylinux_{machine}", "windows": "win_{machine_lower}", "macos": "macosx_{machine}"}
# The sys.platform key (prerast_meta.platforms) of each target os.
SYSTEM = {"linux": "linux", "windows": "win32", "macos": "darwin"}


@dataclasses.dataclass(frozen=True)
class Target:
    """One (OS, machine) pair wheels are built for: a [target.*] table of ci/matrix.toml."""

    name: str  # "linux-x86_64"
    os: str  # "linux", "windows", "macos": cibuildwheel's --platform
    machine: str  # "x86_64", "aarch64", "AMD64", "arm64": cibuildwheel's --archs
    plat: str  # the wheel's platform tag: "manylinux_2_28_x86_64", "win_amd64", "macosx_11_0_arm64"
    runner: str  # the GitHub runner of its jobs: a label of [runners]
    repair: str  # "auditwheel", "delvewheel", "delocate"
    platforms: tuple  # compute platforms torch publishes there, from the stable floor on
    pypi: str  # the build plain `pip install torch` gets there
    image: str = ""  # manylinux image (Linux): the target's manylinux policy
    toolkit: str = ""  # NVIDIA's repository (Linux) or redistributable archives (Windows) of its CUDA toolkit
    archs: tuple = ()  # ((CUDA version, (arch, ...)), ...) where they differ from [cuda."X"]
    kernels: tuple = ()  # ((CUDA major, toolkit version), ...) where they differ from [kernels] cuda
    cross: str = ""  # the machine that cross-builds it (python -m ci cross), "" if built natively only

    @property
    def system(self):
        """prerast_meta.platforms' key of its OS: 'linux', 'win32', 'darwin'."""
        return SYSTEM[self.os]

    def runs_here(self, system=None, machine=None):
        """Is this target the running OS and CPU architecture (sys.platform, platform.machine(), unless given)?"""
        import platform

        from prerast_meta import platforms

        return platforms.key(system) == self.system and (machine or platform.machine()).lower() == self.machine.lower()

    @property
    def has_cuda(self):
        return any(p != "cpu" for p in self.platforms)

    @property
    def manylinux(self):
        """'manylinux_2_28' for a Linux target, else None."""
        m = re.fullmatch(r"(manylinux_\d+_\d+)_" + re.escape(self.machine), self.plat)
        return m.group(1) if m else None

    def identifier(self, python):
        """cibuildwheel's build identifier for CPython `python` ('3.12' -> 'cp312-manylinux_aarch64')."""
        plat = IDENTIFIER_PLATFORM[self.os].format(machine=self.machine, machine_lower=self.machine.lower())
        return f"cp{python.replace('.', '')}-{plat}"

    def describe(self):
        """'Linux x86-64', 'Linux AArch64', 'Windows x86-64', 'macOS arm64': as the loader names platforms."""
        from prerast_meta import platforms

        return platforms.describe_running(self.system, self.machine)


# The value of a [runners] label whose retirement GitHub has not announced.
NONE_ANNOUNCED = "none announced"


def _load_runners(data):
    """{label: the date GitHub retires its image, or None}: the [runners] table."""
    import datetime

    runners = {}
    for label, when in data.get("runners", {}).items():
        if when != NONE_ANNOUNCED and not isinstance(when, datetime.date):
            raise MatrixError(
                f"[runners] {label} = {when!r}: expected its retirement date (e.g. 2026-11-02, no "
                f'quotes) or "{NONE_ANNOUNCED}"'
            )
        runners[label] = None if when == NONE_ANNOUNCED else when
    return runners


def _check_runner(label, user, runners):
    if label not in runners:
        raise MatrixError(
            f"{user}: runner {label!r} is not a label of [runners] ({', '.join(runners)}): add it "
            'there with its retirement date, or "none announced"'
        )


def _load_targets(data):
    runners = _load_runners(data)
    _check_runner(data["policy"].get("tool_runner"), "[policy] tool_runner", runners)
    targets = {}
    for name, t in data.get("target", {}).items():
        if t.get("os") not in SYSTEM:
            raise MatrixError(f"[target.{name}]: os {t.get('os')!r} is not one of {sorted(SYSTEM)}")
        # Linux: the manylinux policy is the image and, with the machine, the platform tag (one value, not two).
        tag = ("manylinux",) if t["os"] == "linux" else ("plat",)
        missing = {"machine", "runner", "repair", "platforms", "pypi", *tag} - set(t)
        if missing:
            raise MatrixError(f"[target.{name}] lacks {sorted(missing)}")
        if t["os"] == "linux":
            if not re.fullmatch(r"manylinux_\d+_\d+", t["manylinux"]):
                raise MatrixError(
                    f"[target.{name}]: manylinux {t['manylinux']!r} is not a policy such as manylinux_2_28"
                )
            if {"plat", "image"} & set(t):
                raise MatrixError(
                    f"[target.{name}]: a Linux target names its manylinux policy only "
                    f'(manylinux = "manylinux_2_28"): drop plat and image, which follow from it'
                )
            t = dict(t, plat=f"{t['manylinux']}_{t['machine']}", image=t["manylinux"])
        if t["pypi"] not in t["platforms"]:
            raise MatrixError(f"[target.{name}]: pypi {t['pypi']!r} is not among its platforms {t['platforms']}")
        if not t["plat"].endswith(t["machine"].lower()):
            raise MatrixError(f"[target.{name}]: platform tag {t['plat']} is not one of machine {t['machine']}")
        if any(p != "cpu" for p in t["platforms"]) and not t.get("toolkit"):
            raise MatrixError(f"[target.{name}]: CUDA builds need a toolkit source")
        _check_runner(t["runner"], f"[target.{name}]", runners)
        targets[name] = Target(
            name=name,
            os=t["os"],
            machine=t["machine"],
            plat=t["plat"],
            runner=t["runner"],
            repair=t["repair"],
            platforms=tuple(t["platforms"]),
            pypi=t["pypi"],
            image=t.get("image", ""),
            toolkit=t.get("toolkit", ""),
            archs=tuple((v, tuple(a)) for v, a in sorted(t.get("archs", {}).items())),
            kernels=tuple(sorted(t.get("kernels", {}).items())),
            cross=t.get("cross", ""),
        )
    default = data["policy"].get("default_target")
    if default not in targets:
        raise MatrixError(f"[policy] default_target {default!r} is not a [target.*] table")
    return targets, targets[default]


@dataclasses.dataclass(frozen=True)
class Cell:
    torch: str  # torch release, e.g. "2.14.1"
    platform: str  # "cpu" or "cu130"
    pythons: tuple  # CPython versions torch ships wheels for, e.g. ("3.10", ..., "3.13")
    archs: tuple  # GPU archs compiled ("" for cpu)
    host_gcc: int  # newest gcc the CUDA version's nvcc accepts (0 for cpu)
    on_pypi: bool  # plain `torch==<torch>` on PyPI is this build
    published: bool
    pr: bool
    policy: dict  # the [policy] table
    kind: str = "classic"  # "stable" (torch's stable C ABI) or "classic" (one torch minor)
    serves: tuple = ()  # ((torch release, platform), ...) that the wheel serves
    target: Target = None  # the OS and machine it is built for
    default_target: bool = True  # its target is the matrix's default: the id names none

    @property
    def id(self):
        """'2.14.1+cu130': torch's own name for the build it runs on, then the target unless it is the default
        ('2.14.1+cu130-linux-aarch64')."""
        return self.torch_build + ("" if self.default_target else f"-{self.target.name}")

    @property
    def torch_build(self):
        """'2.14.1+cu130': the torch build it is built with (the same name on every target)."""
        return f"{self.torch}+{self.platform}"

    @property
    def cuda(self):
        """'13.0' for cu130, None for cpu."""
        if self.platform == "cpu":
            return None
        digits = self.platform[2:]
        return f"{digits[:-1]}.{digits[-1]}"

    @property
    def local_tag(self):
        """The wheel's local version, as the build stamps it (prerast_meta.compat.local_tag)."""
        return compat.local_tag(self.torch, self.cuda, self.kind, self.target.system)

    @property
    def page(self):
        """The find-links page of the torch build it is built with."""
        return compat.find_links_page(self.torch, self.platform)

    @property
    def pages(self):
        """Every find-links page that lists its wheel: one per torch build it serves, named as prerast's loader
        names it in its fix-it message."""
        return [compat.find_links_page(release, platform) for release, platform in self.serves]

    def serves_text(self):
        """'torch 2.4.0, 2.4.1 (cu121)' or 'torch >= 2.10: 2.10.0 ... 2.15.0 (cpu, cu126, cu128, cu130, cu132)'."""
        releases = sorted({r for r, _ in self.serves}, key=_vkey)
        platforms = sorted({p for _, p in self.serves}, key=lambda p: (p != "cpu", _vkey(p) if p != "cpu" else ()))
        head = "torch >= " + ".".join(releases[0].split(".")[:2]) + ": " if self.kind == "stable" else "torch "
        return head + ", ".join(releases) + f" ({', '.join(platforms)})"

    @property
    def manylinux(self):
        return self.target.manylinux

    def wheel_name(self, version, plat=None):
        """The repaired wheel's file name for prerast `version` (without local tag)."""
        plat = plat or self.target.plat
        local = f"+{self.local_tag}" if self.local_tag else ""
        return f"prerast-{version}{local}-{compat.tags_for(plat)}.whl"

    def torch_requirement(self):
        """(requirement, extra pip arguments) that install this cell's torch. The PyPI build is asked for with
        `===` (exactly that version string): `==2.13.0` also matches 2.13.0+cpu, which a find-links folder or
        an extra index may offer instead."""
        if self.on_pypi:
            return f"torch==={self.torch}", []
        return f"torch=={self.torch}+{self.platform}", ["--extra-index-url", self.torch_index()]

    def host_torch_requirement(self):
        """(requirement, extra pip arguments) of the torch a cross build of this CPU cell compiles with on the
        build machine: the CPU build of its release there, for its headers (the library links against the
        target's own torch, ci/builder/cross.py)."""
        return f"torch=={self.torch}+cpu", ["--extra-index-url", self.policy["torch_index"].format(platform="cpu")]

    def torch_index(self):
        return self.policy["torch_index"].format(platform=self.platform)

    def build_identifiers(self):
        """cibuildwheel's identifiers for this cell: one per Python it is tested under."""
        return [self.target.identifier(p) for p in self.pythons]

    def arch_list(self):
        return ";".join(self.archs)


def _cuda_major(platform):
    return None if platform == "cpu" else platform[2:-1]


def _cell_platform(rel, platform, cuda, target=None):
    """(archs, host_gcc) of a platform on a target, checked."""
    if not re.fullmatch(r"cpu|cu\d{3,4}", platform):
        raise MatrixError(f"torch {rel['version']}: bad platform {platform!r}: expected cpu or cuXYZ")
    if platform == "cpu":
        return (), 0
    cv = f"{platform[2:-1]}.{platform[-1]}"
    if cv not in cuda:
        raise MatrixError(f'torch {rel["version"]}: platform {platform} needs a [cuda."{cv}"] table')
    archs = dict(target.archs).get(cv, cuda[cv]["archs"]) if target else cuda[cv]["archs"]
    return tuple(archs), int(cuda[cv]["host_gcc"])


def _check_release(rel, policy, stable_floor):
    version, platforms = rel["version"], rel["platforms"]
    if rel["pypi"] not in platforms:
        raise MatrixError(f"torch {version}: pypi platform {rel['pypi']!r} is not among its platforms {platforms}")
    for key in ("publish", "pr"):
        unknown = set(rel.get(key, [])) - set(platforms)
        if unknown:
            raise MatrixError(f"torch {version}: {key} names {sorted(unknown)}, not among platforms {platforms}")
    floor = compat.PYTHON_FLOOR
    if any(_vkey(p) < floor for p in rel["pythons"]):
        raise MatrixError(
            f"torch {version}: Pythons {rel['pythons']} go below the Python floor {compat.python_floor_text()}"
        )
    patches = rel.get("patches", [version])
    if version not in patches or any(minor(p) != minor(version) for p in patches):
        raise MatrixError(f"torch {version}: patches {patches} must be releases of {minor(version)} including it")
    if _vkey(version)[:2] < stable_floor and version != min(patches, key=_vkey):
        raise MatrixError(
            f"torch {version}: a classic cell is built against the lowest patch release of its minor "
            f"({min(patches, key=_vkey)}), so that it serves all of {patches}"
        )
    if _vkey(version)[:2] >= stable_floor and (rel.get("publish") or rel.get("pr")):
        raise MatrixError(
            f"torch {version}: releases from {'.'.join(map(str, stable_floor))} on are served by the "
            "[[stable.cell]] wheels; they have no cells of their own to publish or build"
        )
    return patches


def load(path=MATRIX_FILE):
    """All cells of the matrix: the stable cells, then the classic ones ordered by torch release and platform."""
    data = _load_toml(path)
    policy = data["policy"]
    targets, default = _load_targets(data)
    cuda = data.get("cuda", {})
    stable = data["stable"]
    stable_floor = compat.STABLE_FLOOR
    pypi_major = compat.PYPI_CUDA_MAJOR
    cells, served_by_stable, releases = [], [], {}
    for rel in data["torch"]:
        patches = _check_release(rel, policy, stable_floor)
        releases[rel["version"]] = rel
        for p in patches:
            releases.setdefault(p, rel)
        if _vkey(rel["version"])[:2] >= stable_floor:
            served_by_stable += [(p, platform) for p in patches for platform in rel["platforms"]]
            continue
        for platform in rel["platforms"]:
            archs, gcc = _cell_platform(rel, platform, cuda)
            cells.append(
                Cell(
                    torch=rel["version"],
                    platform=platform,
                    pythons=tuple(rel["pythons"]),
                    archs=archs,
                    host_gcc=gcc,
                    on_pypi=platform == rel["pypi"],
                    published=platform in rel.get("publish", rel["platforms"]),
                    pr=platform in rel.get("pr", []),
                    policy=policy,
                    kind="classic",
                    serves=tuple((p, platform) for p in patches),
                    target=default,
                )
            )
    classic = sorted(cells, key=lambda c: (_vkey(c.torch), c.platform != "cpu", _vkey(c.cuda or "0")))
    stable_cells = []
    for entry in stable["cell"]:
        rel = releases.get(entry["torch"])
        if rel is None or _vkey(entry["torch"])[:2] < stable_floor:
            raise MatrixError(
                f"stable cell {entry['torch']}+{entry['platform']}: build with a torch release "
                f">= {compat.floor_text()} listed under [[torch]]"
            )
        platform = entry["platform"]
        target = targets.get(entry.get("target", default.name))
        name = f"{entry['torch']}+{platform}" + (f" ({entry['target']})" if "target" in entry else "")
        if target is None:
            raise MatrixError(f"stable cell {name}: no [target.{entry['target']}] table")
        if platform not in rel["platforms"] or platform not in target.platforms:
            raise MatrixError(f"stable cell {name}: torch {rel['version']} has no {platform} build for {target.name}")
        archs, gcc = _cell_platform(rel, platform, cuda, target)
        major = _cuda_major(platform)
        # A CUDA wheel serves the torch builds of its CUDA major there; the PyPI one (and a CPU-only one) CPU
        # torch too.
        serves = tuple(
            (r, p)
            for r, p in served_by_stable
            if p in target.platforms
            and ((p == "cpu" and major in (None, pypi_major)) or (major and _cuda_major(p) == major))
        )
        pypi_here = rel["pypi"] if target is default else target.pypi
        stable_cells.append(
            Cell(
                torch=entry["torch"],
                platform=platform,
                pythons=tuple(rel["pythons"]),
                archs=archs,
                host_gcc=gcc,
                on_pypi=platform == pypi_here and entry["torch"] == rel["version"],
                published=entry.get("publish", True),
                pr=entry.get("pr", False),
                policy=policy,
                kind="stable",
                serves=serves,
                target=target,
                default_target=target is default,
            )
        )
    cells = stable_cells + classic
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        raise MatrixError("a cell is listed twice in the matrix")
    return cells


def releases(path=MATRIX_FILE):
    """{'2.4': {'patches': [...], 'platforms': [...]}, ...}: every torch release the matrix knows of."""
    return {
        minor(r["version"]): {"patches": r.get("patches", [r["version"]]), "platforms": r["platforms"]}
        for r in _load_toml(path)["torch"]
    }


def cuda_archs(version, path=MATRIX_FILE):
    """The GPU archs the matrix compiles with CUDA `version` ('12.4'): its [cuda."12.4"] table."""
    table = _load_toml(path).get("cuda", {})
    if version not in table:
        raise KeyError(f'ci/matrix.toml has no [cuda."{version}"] table (it has {", ".join(table)})')
    return list(table[version]["archs"])


def policy(path=MATRIX_FILE):
    """The [policy] table: torch's index, the default target, the runner of the jobs that build nothing."""
    return _load_toml(path)["policy"]


def targets(path=MATRIX_FILE):
    """{name: Target}: every [target.*] table, in the file's order."""
    return _load_targets(_load_toml(path))[0]


def runners(path=MATRIX_FILE):
    """{label: retirement date or None}: the GitHub-hosted runner labels the matrix knows (its [runners] table)."""
    return _load_runners(_load_toml(path))


def runners_in_use(path=MATRIX_FILE):
    """{label: [who runs on it]}: each target's runner and the [policy] tool_runner of the jobs that build nothing."""
    used = {policy(path)["tool_runner"]: ["[policy] tool_runner"]}
    for t in targets(path).values():
        used.setdefault(t.runner, []).append(f"[target.{t.name}]")
    return used


def retired_runners(labels, today=None, path=MATRIX_FILE):
    """What is wrong with running jobs on `labels` ({label: [who]}) on `today` (default: today's date): a label
    the [runners] table lacks, or one GitHub has retired by then (its jobs would never be picked up)."""
    import datetime

    today = today or datetime.date.today()
    known = runners(path)
    problems = []
    for label, users in labels.items():
        if label not in known:
            problems.append(f"{', '.join(users)}: runner {label!r} is not in ci/matrix.toml's [runners] table")
        elif known[label] and known[label] <= today:
            problems.append(
                f"{', '.join(users)}: runner {label!r} was retired on {known[label]}: move to a label of "
                "[runners] that is not retired (ci/matrix.toml)"
            )
    return problems


def default_target(path=MATRIX_FILE):
    return _load_targets(_load_toml(path))[1]


def running_target(path=MATRIX_FILE, system=None, machine=None):
    """The target of this OS and machine (sys.platform, platform.machine()); None if no target has them."""
    return next((t for t in targets(path).values() if t.runs_here(system, machine)), None)


def policy_platform(path=MATRIX_FILE, machine=None, system=None):
    """The platform tag a CI wheel of this machine's target carries, from the matrix's [target.*] tables
    (manylinux_2_28_<machine> on Linux, win_amd64, ...); `machine`, `system`: platform.machine(), sys.platform.
    A machine no target builds for is an error, not another machine's tag."""
    import platform

    target = running_target(path, system, machine)
    if target is None:
        where = "ci/matrix.toml" if path == MATRIX_FILE else path
        raise MatrixError(
            f"no [target.*] of {where} is this machine ({system or sys.platform}, {machine or platform.machine()}): "
            "add one to build wheels here"
        )
    return target.plat


def target_of_tag(plat_tag, path=MATRIX_FILE, among=None):
    """The target a wheel's platform tag ('manylinux_2_34_aarch64', 'linux_x86_64', 'win_amd64',
    'macosx_14_0_arm64', or several joined by '.') belongs to, among `among` (default: the matrix file's); None
    if no target has its OS and machine."""
    for tag in plat_tag.split("."):
        m = re.fullmatch(r"(?:many)?linux(?:_\d+_\d+|\d+)?_(\w+)|win_(\w+)|macosx_\d+_\d+_(\w+)", tag)
        if not m:
            continue
        os_name = "linux" if m.group(1) else "windows" if m.group(2) else "macos"
        machine = (m.group(1) or m.group(2) or m.group(3)).lower()
        for t in targets(path).values() if among is None else among:
            if t.os == os_name and t.machine.lower() == machine:
                return t
    return None


def toolkit(path=MATRIX_FILE):
    """The [toolkit] table: NVIDIA's packages a CUDA build installs."""
    return _load_toml(path)["toolkit"]


def published_builds(path=PUBLISHED_FILE):
    """The torch builds PyTorch publishes: {'2.14': {'cpu', 'cu126', ...}} (ci/published_builds.toml)."""
    return {minor: set(platforms) for minor, platforms in _load_toml(path)["builds"].items()}


def minor(version):
    """'2.14.1' -> '2.14'."""
    return ".".join(version.split(".")[:2])


def find(name, cells=None):
    """The cell named `name`: '2.14.1+cu130', a minor release '2.12+cu130' (its listed patch release), either with
    a target after a dash ('2.14.1+cu130-linux-aarch64'; none: the default target)."""
    cells = load() if cells is None else cells
    m = re.fullmatch(r"(\d+\.\d+)(\.\d+)?\+(cpu|cu\d+)(?:-([a-z0-9_]+-[A-Za-z0-9_]+))?", name.strip())
    if not m:
        raise MatrixError(
            f"bad cell name {name!r}: expected <torch release>+<platform>[-<target>], e.g. 2.14.1+cu130, "
            "2.12+cu130 or 2.14.1+cu130-linux-aarch64"
        )
    target = m.group(4)
    for c in cells:
        if (
            c.platform == m.group(3)
            and (c.target.name == target if target else c.default_target)
            and (
                c.torch == m.group(1) + (m.group(2) or "") or (not m.group(2) and c.torch.startswith(m.group(1) + "."))
            )
        ):
            return c
    known = ", ".join(c.id for c in cells)
    served = [
        c
        for c in cells
        if m.group(2)
        and (m.group(1) + m.group(2), m.group(3)) in c.serves
        and (c.target.name == target if target else c.default_target)
    ]
    if served:
        raise MatrixError(
            f"no cell {name!r} in ci/matrix.toml: torch {m.group(1)}{m.group(2)}+{m.group(3)} is served "
            f"by the wheel of cell {served[0].id} ({served[0].kind}); cells: {known}"
        )
    raise MatrixError(f"no cell {name!r} in ci/matrix.toml; cells: {known}")


def cell_for_build(info, cells=None, target=None):
    """The cell whose wheel a build with metadata `info` (prerast/_build_info.json) is, on `target` (a Target or
    its name; None: the default target): stable by CUDA major (the exact platform first), classic by torch minor
    and platform. None when the matrix has no such cell."""
    cells = load() if cells is None else cells
    name = getattr(target, "name", target)
    cells = [c for c in cells if (c.target.name == name if name else c.default_target)]
    cuda = info.get("cuda_version")
    platform = compat.compute_platform(cuda)
    if info.get("abi") == "stable":
        same = [c for c in cells if c.kind == "stable" and c.platform == platform]
        major = cuda.split(".")[0] if cuda else None
        same += [c for c in cells if c.kind == "stable" and (c.cuda or "").split(".")[0] == (major or "x")]
        return same[0] if same else None
    for c in cells:
        if c.kind == "classic" and c.platform == platform and minor(c.torch) == minor(info["torch_version"]):
            return c
    return None


def select(cells, published=False, pr=False):
    return [c for c in cells if (not published or c.published) and (not pr or c.pr)]
