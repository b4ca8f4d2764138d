"""Does each smoke job fit its runner's disk? What it installs, at the sizes the index gives, against ci/matrix.toml.

    python -m ci preflight --published --disk        # the workflow's preflight job

A smoke job installs PyPI's torch (and numpy) for its target into a fresh virtualenv with pip's cache off: pip
downloads every wheel into a temporary folder, unpacks each into the virtualenv, and removes the downloads at the
end, so the job needs the wheels' download sizes plus their unpacked sizes at once. This resolves what
`pip install torch===X numpy` installs on the target, as the target's pip would (each Requires-Dist marker
evaluated for the target's OS, machine and Python, not for the machine running this; the newest version of each
dependency that fits every specifier, with a wheel whose tags the target's pip accepts), reads each wheel's size
from the index (PEP 691 JSON: `size`; PEP 700) and its unpacked size from its zip directory (an HTTP range read of
the directory alone, not the download), and compares the sum with the runner's budget in ci/matrix.toml [disk].
The same questions of a local folder of wheels (a fake index in the tests) read the files themselves.
"""

import concurrent.futures
import dataclasses
import io
import json
import os
import re
import urllib.request
import zipfile

try:
    from packaging import requirements as _requirements, tags as _tags, version as _version
except ImportError:  # the workflow's bare Python: pip's own copy, the one its resolver uses
    from pip._vendor.packaging import (  # type: ignore[no-redef]
        requirements as _requirements,
        tags as _tags,
        version as _version,
    )

from ci import matrix

GIB = 1024**3
JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
# The environment markers of each target OS (PEP 508): what the target's pip evaluates Requires-Dist against.
OS_MARKERS = {
    "linux": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"},
    "windows": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"},
    "macos": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix"},
}


class DiskError(Exception):
    """The index could not say what a job installs or how big it is."""


@dataclasses.dataclass(frozen=True)
class Wheel:
    project: str
    version: str
    filename: str
    url: str
    size: int  # bytes downloaded
    unpacked: int = 0  # bytes once installed (the zip's members)


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def environment(target, python):
    """PEP 508 marker values of `target`'s runner under CPython `python` ('3.12')."""
    env = dict(OS_MARKERS[target.os])
    env.update(
        platform_machine=target.machine,
        python_version=python,
        python_full_version=python + ".0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        extra="",
    )
    return env


def supported_tags(target, python, platforms):
    """The wheel tags the target's pip accepts under CPython `python` on `platforms` (the target's platform tags,
    preflight.target_platforms), best first (packaging.tags, as pip does)."""
    major, minor = (int(x) for x in python.split("."))
    return list(_tags.cpython_tags((major, minor), platforms=platforms)) + list(
        _tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)
    )


def wheel_tags(filename):
    """(project, version, tags) of a wheel file name."""
    parts = filename[: -len(".whl")].split("-")
    return canonical(parts[0]), parts[1], _tags.parse_tag("-".join(parts[-3:]))


class Index:
    """A PEP 691 index (https://pypi.org/simple) or a local folder of wheels (the tests' fake index)."""

    def __init__(self, where, opener=urllib.request.urlopen):
        self.where, self.open = where, opener
        self.local = os.path.isdir(where)

    def files(self, project):
        """[(filename, url, size)] of the project's wheels."""
        project = canonical(project)
        if self.local:
            found = [n for n in sorted(os.listdir(self.where)) if n.endswith(".whl") and wheel_tags(n)[0] == project]
            return [(n, os.path.join(self.where, n), os.path.getsize(os.path.join(self.where, n))) for n in found]
        request = urllib.request.Request(f"{self.where.rstrip('/')}/{project}/", headers={"Accept": JSON_SIMPLE})
        try:
            with self.open(request, timeout=60) as r:
                page = json.load(r)
        except (OSError, ValueError) as e:
            raise DiskError(f"{self.where}: no JSON page for {project} ({e})") from e
        return [
            (f["filename"], f["url"], f.get("size"))
            for f in page.get("files", [])
            if f["filename"].endswith(".whl") and not f.get("yanked")
        ]

    def metadata(self, url):
        """The wheel's METADATA: PEP 658's separate file where the index has it, else read from the wheel."""
        if not self.local:
            try:
                with self.open(url + ".metadata", timeout=60) as r:
                    return r.read().decode()
            except OSError:
                pass
        with zipfile.ZipFile(self.reader(url)) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return z.read(name).decode()

    def unpacked(self, url):
        """The wheel's members' sizes summed, from its zip directory."""
        with zipfile.ZipFile(self.reader(url)) as z:
            return sum(i.file_size for i in z.infolist())

    def reader(self, url):
        return open(url, "rb") if self.local else RemoteFile(url, self.open)


class RemoteFile(io.RawIOBase):
    """A file on an HTTP server, read by byte ranges: zipfile reads a wheel's directory without downloading it."""

    def __init__(self, url, opener=urllib.request.urlopen):
        self.url, self.open, self.pos = url, opener, 0
        with self.open(urllib.request.Request(url, headers={"Range": "bytes=0-0"}), timeout=60) as r:
            total = (r.headers.get("Content-Range") or "").rpartition("/")[2]
            if r.status != 206 or not total.isdigit():
                raise DiskError(f"{url}: the server does not answer byte ranges")
            self.size = int(total)

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, size=-1):
        end = self.size if size is None or size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with self.open(request, timeout=120) as r:
            data = r.read()
        self.pos += len(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def requires(metadata_text, env, extras=()):
    """The Requirements of a METADATA text that apply in `env` (markers evaluated there, with the given extras)."""
    found = []
    for line in metadata_text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = _requirements.Requirement(line.partition(":")[2].strip())
        if req.marker is None or any(req.marker.evaluate(dict(env, extra=e)) for e in ("", *extras)):
            found.append(req)
    return found


def resolve(requirements, index, target, python, platforms):
    """[Wheel] that `pip install requirements` installs on the target: for each project the newest version that
    satisfies every specifier met so far and has a wheel the target accepts (its best-tagged one). No
    backtracking: torch pins its CUDA wheels exactly and its other dependencies are loose."""
    env, tags = environment(target, python), supported_tags(target, python, platforms)
    rank = {t: i for i, t in enumerate(tags)}
    specs, chosen, todo = {}, {}, [_requirements.Requirement(r) for r in requirements]
    while todo:
        req = todo.pop(0)
        name = canonical(req.name)
        specs.setdefault(name, []).append(req.specifier)
        if name in chosen:
            if not all(s.contains(chosen[name].version, prereleases=True) for s in specs[name]):
                raise DiskError(f"{name} {chosen[name].version} was chosen before a dependency asked for {req}")
            continue
        candidates = []
        for filename, url, size in index.files(name):
            _, version, wtags = wheel_tags(filename)
            best = min((rank[t] for t in wtags if t in rank), default=None)
            if best is None or not all(s.contains(version, prereleases=True) for s in specs[name]):
                continue
            candidates.append((_version.Version(version), -best, filename, url, size))
        if not candidates:
            raise DiskError(f"{index.where} has no wheel of {req} for {target.name} (Python {python})")
        version, _, filename, url, size = max(candidates)
        chosen[name] = Wheel(name, str(version), filename, url, size)
        todo += requires(index.metadata(url), env, req.extras)
    return list(chosen.values())


def with_sizes(wheels, index, jobs=8):
    """The wheels with their download size (the index's, else the file's) and their unpacked size."""

    def sized(w):
        size = w.size if w.size is not None else RemoteFile(w.url, index.open).size
        return dataclasses.replace(w, size=size, unpacked=index.unpacked(w.url))

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(sized, wheels))


@dataclasses.dataclass(frozen=True)
class Need:
    job: str
    runner: str
    wheels: tuple
    budget: float  # GiB the runner offers the job
    made_room: bool

    @property
    def download(self):
        return sum(w.size for w in self.wheels) / GIB

    @property
    def unpacked(self):
        return sum(w.unpacked for w in self.wheels) / GIB

    @property
    def total(self):
        return self.download + self.unpacked + budgets()["reserve"]

    def fits(self):
        return self.total <= self.budget

    def line(self):
        biggest = sorted(self.wheels, key=lambda w: -w.size)[:3]
        return (
            f"{self.job} on {self.runner}: needs {self.total:.1f} GiB ({self.download:.1f} downloaded + "
            f"{self.unpacked:.1f} unpacked + {budgets()['reserve']:g} reserve; {len(self.wheels)} wheels, the "
            f"largest {', '.join(f'{w.filename} {w.size / GIB:.2f} GiB' for w in biggest)}), the runner offers "
            f"{self.budget:g} GiB{' after making room' if self.made_room else ''}"
        )


def budgets(path=None):
    """ci/matrix.toml's [disk]: {"reserve": GiB, "free": {label: GiB}, "room": {label: GiB}}."""
    return matrix._load_toml(path or matrix.MATRIX_FILE)["disk"]


def runner_budget(target, offered=None):
    """GiB a smoke job may fill on the target's runner: the free disk, plus what the job's clean-up step frees
    where it has one (Linux). `offered` ({runner: GiB}) replaces ci/matrix.toml's numbers."""
    if offered and target.runner in offered:
        return offered[target.runner]
    table = budgets()
    if target.runner not in table["free"]:
        raise DiskError(f"ci/matrix.toml [disk.free] has no budget for {target.runner}")
    return table["free"][target.runner] + (table.get("room", {}).get(target.runner, 0) if target.os == "linux" else 0)


SMOKE_PYTHON = "3.12"  # the smoke job's actions/setup-python (tests/builder/test_workflow.py checks it)


def smoke_needs(target_rows, pypi, platforms_of, offered=None, opener=urllib.request.urlopen):
    """[Need] of each smoke job of the workflow's target rows (python -m ci gh-matrix --jobs targets), from the
    index `pypi`; platforms_of(target) gives the target's platform tags (preflight.target_platforms)."""
    index = Index(pypi, opener)

    def need(row):
        target = matrix.targets()[row["target"]]
        requirements = [row["smoke_torch"], "numpy"]
        wheels = with_sizes(resolve(requirements, index, target, SMOKE_PYTHON, platforms_of(target)), index)
        budget = runner_budget(target, offered)
        return Need(f"smoke {row['target']}", target.runner, tuple(wheels), budget, target.os == "linux")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(need, target_rows))
