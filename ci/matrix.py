"""ci/matrix.toml expanded into cells: one (torch release, compute platform) pair each, one wheel each.

Everything that needs to know which wheels exist asks this module; nothing else reads the TOML file.
"""
import dataclasses
import os
import re

MATRIX_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matrix.toml")
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


@dataclasses.dataclass(frozen=True)
class Cell:
    torch: str            # torch release, e.g. "2.14.1"
    platform: str         # "cpu" or "cu130"
    pythons: tuple        # CPython versions torch ships wheels for, e.g. ("3.10", ..., "3.13")
    archs: tuple          # GPU archs compiled ("" for cpu)
    host_gcc: int         # newest gcc the CUDA version's nvcc accepts (0 for cpu)
    on_pypi: bool         # plain `torch==<torch>` on PyPI is this build
    published: bool
    pr: bool
    policy: dict          # the [policy] table

    @property
    def id(self):
        """'2.14.1+cu130': torch's own name for the build it runs on."""
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
        """The wheel's local version: 'pt214cu130' (same rule as ci/build_env.local_tag)."""
        major, minor = self.torch.split(".")[:2]
        return f"pt{major}{minor}{self.platform}"

    @property
    def page(self):
        """Its find-links page, as prerast's loader names it in its fix-it message."""
        return f"torch-{self.id}.html"

    @property
    def manylinux(self):
        return self.policy["manylinux"]

    def wheel_name(self, version, plat=None):
        """The repaired wheel's file name for prerast `version` (without local tag)."""
        plat = plat or f"{self.policy['manylinux']}_{self.policy['machine']}"
        floor = "cp" + self.policy["python_floor"].replace(".", "")
        return f"prerast-{version}+{self.local_tag}-{floor}-abi3-{plat}.whl"

    def torch_requirement(self):
        """(requirement, extra pip arguments) that install this cell's torch. The PyPI build is asked for with
        `===` (exactly that version string): `==2.13.0` also matches 2.13.0+cpu, which a find-links folder or
        an extra index may offer instead."""
        if self.on_pypi:
            return f"torch==={self.torch}", []
        return f"torch=={self.torch}+{self.platform}", ["--extra-index-url", self.torch_index()]

    def torch_index(self):
        return self.policy["torch_index"].format(platform=self.platform)

    def build_identifiers(self):
        """cibuildwheel's identifiers for this cell: one per Python it is tested under."""
        return [f"cp{p.replace('.', '')}-manylinux_{self.policy['machine']}" for p in self.pythons]

    def arch_list(self):
        return ";".join(self.archs)


def load(path=MATRIX_FILE):
    """All cells of the matrix, ordered by torch release then platform."""
    data = _load_toml(path)
    policy = data["policy"]
    cuda = data.get("cuda", {})
    cells = []
    for rel in data["torch"]:
        version, platforms = rel["version"], rel["platforms"]
        if rel["pypi"] not in platforms:
            raise MatrixError(f"torch {version}: pypi platform {rel['pypi']!r} is not among its platforms {platforms}")
        for key in ("publish", "pr"):
            unknown = set(rel.get(key, [])) - set(platforms)
            if unknown:
                raise MatrixError(f"torch {version}: {key} names {sorted(unknown)}, not among platforms {platforms}")
        floor = _vkey(policy["python_floor"])
        if any(_vkey(p) < floor for p in rel["pythons"]):
            raise MatrixError(f"torch {version}: Pythons {rel['pythons']} go below the abi3 floor {policy['python_floor']}")
        for platform in platforms:
            if not re.fullmatch(r"cpu|cu\d{3,4}", platform):
                raise MatrixError(f"torch {version}: bad platform {platform!r}: expected cpu or cuXYZ")
            archs, gcc = (), 0
            if platform != "cpu":
                cv = f"{platform[2:-1]}.{platform[-1]}"
                if cv not in cuda:
                    raise MatrixError(f"torch {version}: platform {platform} needs a [cuda.\"{cv}\"] table")
                archs, gcc = tuple(cuda[cv]["archs"]), int(cuda[cv]["host_gcc"])
            cells.append(Cell(
                torch=version, platform=platform, pythons=tuple(rel["pythons"]), archs=archs, host_gcc=gcc,
                on_pypi=platform == rel["pypi"], published=platform in rel.get("publish", platforms),
                pr=platform in rel.get("pr", []), policy=policy))
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        raise MatrixError("a torch release is listed twice in the matrix")
    return sorted(cells, key=lambda c: (_vkey(c.torch), c.platform != "cpu", _vkey(c.cuda or "0")))


def policy(path=MATRIX_FILE):
    """The [policy] table: manylinux tag, image, machine, abi3 floor, torch's index."""
    return _load_toml(path)["policy"]


def toolkit(path=MATRIX_FILE):
    """The [toolkit] table: NVIDIA packages for the manylinux image."""
    return _load_toml(path)["toolkit"]


def published_builds(path=PUBLISHED_FILE):
    """The torch builds PyTorch publishes: {'2.14': {'cpu', 'cu126', ...}} (ci/published_builds.toml)."""
    return {minor: set(platforms) for minor, platforms in _load_toml(path)["builds"].items()}


def minor(version):
    """'2.14.1' -> '2.14'."""
    return ".".join(version.split(".")[:2])


def find(name, cells=None):
    """The cell named `name`: '2.14.1+cu130', or a minor release '2.12+cu130' (its listed patch release)."""
    cells = load() if cells is None else cells
    m = re.fullmatch(r"(\d+\.\d+)(\.\d+)?\+(cpu|cu\d+)", name.strip())
    if not m:
        raise MatrixError(f"bad cell name {name!r}: expected <torch release>+<platform>, e.g. 2.14.1+cu130 or 2.12+cu130")
    for c in cells:
        if c.platform == m.group(3) and (c.torch == m.group(1) + (m.group(2) or "")
                                         or (not m.group(2) and c.torch.startswith(m.group(1) + "."))):
            return c
    known = ", ".join(c.id for c in cells)
    raise MatrixError(f"no cell {name!r} in ci/matrix.toml; cells: {known}")


def select(cells, published=False, pr=False):
    return [c for c in cells if (not published or c.published) and (not pr or c.pr)]
