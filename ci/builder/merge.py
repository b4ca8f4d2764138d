"""python -m ci merge: wheels of parts (a binding for one torch ABI, a kernel library for one compute) combined into
the one wheel of their target.

    python -m ci merge --out DIR PARTS...          # prerast-<version>-py3-none-<plat>.whl: what PyPI gets
    python -m ci merge --out DIR --slim PARTS...   # one binding, the CPU kernels and at most one CUDA kernel
                                                   # library: prerast-<version>+cu12-...whl (the index pages)

A part is a repaired wheel of one build (setup.py with PRERAST_PARTS=binding or kernels: python -m ci wheel-local
makes them here, the workflow's jobs in CI). Parts of another version, platform tag or source tree are refused,
and so is a part whose libraries are not the files its build stamped. The merged wheel's _build_info.json lists
every binding and kernel library, which the loader chooses from at import (prerast_meta.build_info.choose), and
one record per part (its ABI and torch range or compute, archs, file, SHA-256 and size), which
`python -m prerast doctor` shows. The first binding (the stable one, where there is one) keeps its file names;
another binding's files get its tag (_C_pt24.abi3.so), so that every library lies in prerast/ as the repair left
it. Standard library only.

The same parts make the same bytes, whenever, wherever and under whatever timezone or umask the merge runs (a
re-run of a tag's merge jobs must give the wheels already published): every member is dated $SOURCE_DATE_EPOCH,
else the newest member date of the parts; mode 0755 where the part's member was executable, else 0644; members in
one fixed order, deflated at one level.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
import time
import zipfile

from prerast_meta import build_info, compat, integrity
from prerast_meta.repair import INFO, record_hash

LIBRARY = re.compile(r"\.(so|pyd|dll|dylib)$")  # a compiled library in the package folder


class MergeRefused(ValueError):
    """The parts cannot make one wheel; the message says which part and why."""


@dataclasses.dataclass
class Part:
    path: str
    version: str  # the wheel's version, with the part's local tag
    tags: str  # "py3-none-manylinux_2_28_x86_64"
    info: dict
    members: dict  # archive name -> bytes
    executable: frozenset = frozenset()  # the archive names with an executable mode
    newest: tuple = (1980, 1, 1, 0, 0, 0)  # the newest member date (zip's date_time fields)

    @property
    def name(self):
        return os.path.basename(self.path)

    def is_binding(self):
        return bool(self.info.get("library"))


def wheel_fields(path):
    """('prerast', '0.1.0+kernels.cu12', 'py3-none-manylinux_2_28_x86_64') from a wheel's file name."""
    stem = os.path.basename(path)[: -len(".whl")]
    parts = stem.split("-")
    if not path.endswith(".whl") or len(parts) != 5:
        raise MergeRefused(f"{path}: not a wheel file name (name-version-python-abi-platform.whl)")
    return parts[0], parts[1], "-".join(parts[2:])


def read_part(path):
    """The part at path, its libraries checked against the stamps its build wrote."""
    _, version, tags = wheel_fields(path)
    try:
        with zipfile.ZipFile(path) as z:
            items = [item for item in z.infolist() if not item.is_dir()]
            members = {item.filename: z.read(item.filename) for item in items}
    except (OSError, zipfile.BadZipFile) as e:
        raise MergeRefused(f"{path}: cannot be read as a wheel: {e}") from e
    if INFO not in members:
        raise MergeRefused(f"{path}: has no {INFO}; it is no prerast part")
    info = json.loads(members[INFO])
    for name, stamp in sorted(info.get("libraries", {}).items()):
        data = members.get("prerast/" + name)
        found = None if data is None else integrity.stamp_bytes(data)
        if found != stamp:
            what = "is missing" if data is None else f"is {found['size']} bytes, SHA-256 {found['sha256'][:16]}..."
            raise MergeRefused(
                f"{path}: prerast/{name} {what}, but its build stamped {stamp['size']} bytes, SHA-256 "
                f"{stamp['sha256'][:16]}...: a damaged part is not merged"
            )
    stamped = {"prerast/" + name for name in info.get("libraries", {})}
    # Directly in prerast/ (what a repair grafts lies in prerast/.dylibs/ or prerast.libs/).
    loose = [n for n in members if n.startswith("prerast/") and n.count("/") == 1 and LIBRARY.search(n)]
    stray = sorted(n for n in loose if n not in stamped)
    if stray:
        raise MergeRefused(
            f"{path}: carries {', '.join(stray)}, which its build did not stamp (another part's library left in the "
            "source tree it was built from?): build each part from a fresh copy of the sources"
        )
    executable = frozenset(item.filename for item in items if (item.external_attr >> 16) & 0o111)
    newest = max((item.date_time for item in items), default=(1980, 1, 1, 0, 0, 0))
    return Part(path, version, tags, info, members, executable, newest)


def member_date(parts, environ=None):
    """The date of every member of a merged wheel: $SOURCE_DATE_EPOCH (UTC, clamped to zip's 1980..2107), else the
    newest member date of the parts, so that the date follows from the inputs and never from the clock."""
    environ = os.environ if environ is None else environ
    epoch = environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        if not epoch.isdigit():
            raise MergeRefused(
                f"SOURCE_DATE_EPOCH={epoch!r}: expected whole seconds since 1970 (git log -1 --format=%ct)"
            )
        date = tuple(time.gmtime(int(epoch))[:6])
        return min(max(date, (1980, 1, 1, 0, 0, 0)), (2107, 12, 31, 23, 59, 58))
    return max(p.newest for p in parts)


def binding_tag(info):
    """'stable', or 'pt24' for a classic binding of torch 2.4: the name its files get in a merged wheel."""
    if compat.is_stable(info):
        return "stable"
    major, minor = compat.release(info["torch_version"])[:2]
    return f"pt{major}{minor}"


def renamed(name, tag):
    """'_C.abi3.so', 'pt24' -> '_C_pt24.abi3.so'."""
    stem, dot, rest = name.partition(".")
    return f"{stem}_{tag}{dot}{rest}"


def binding_order(part):
    """Stable first, then classic bindings by torch release."""
    return (0, ()) if compat.is_stable(part.info) else (1, compat.release(part.info["torch_version"]))


MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")


def tag_family(tags):
    """What parts must share: 'py3-none-manylinux_2_28_x86_64' -> 'py3-none-manylinux_*_x86_64' (the glibc a
    part needs may differ: the merged wheel needs the newest), any other tag as it is."""
    m = MANYLINUX.search(tags)
    return tags[: m.start()] + f"manylinux_*_{m.group(3)}" if m else tags


def merged_tags(parts):
    """The tags of the merged wheel: the parts' own, with the newest manylinux glibc any part needs."""

    def level(tags):
        m = MANYLINUX.search(tags)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    return max((p.tags for p in parts), key=level)


def check_alike(parts):
    """Refuse parts of different versions, platforms (Python, ABI and platform tags) or sources, and a part whose
    Python and ABI tags are not py3-none (compat.WHEEL_TAG): a part built by older sources (cp310-abi3)
    would give the merged wheel a tag that shuts out the free-threaded Pythons."""
    first = parts[0]
    for p in parts:
        if not p.tags.startswith(compat.WHEEL_TAG + "-"):
            raise MergeRefused(
                f"{p.name} is tagged {p.tags}: a part is {compat.WHEEL_TAG}-<platform> (setup.py's bdist_wheel); "
                "rebuild it from these sources"
            )
    for p in parts[1:]:
        if compat.base_version(p.version) != compat.base_version(first.version):
            raise MergeRefused(
                f"{p.name} is prerast {p.version}, {first.name} is {first.version}: parts of one version only"
            )
        if tag_family(p.tags) != tag_family(first.tags):
            raise MergeRefused(
                f"{p.name} is tagged {p.tags}, {first.name} {first.tags}: parts of one platform tag only"
            )
        if p.info.get("source_hash") != first.info.get("source_hash"):
            raise MergeRefused(
                f"{p.name} was built from sources {p.info.get('source_hash')}, {first.name} from "
                f"{first.info.get('source_hash')}: parts of one source tree only"
            )


def part_record(part):
    """What the merged metadata records of one part."""
    info = part.info
    data = open(part.path, "rb").read()
    record = {
        "wheel": part.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "files": sorted(info.get("libraries", {})),
    }
    if part.is_binding():
        record.update(kind="binding", abi=info["abi"], torch=compat.serves(info), torch_version=info["torch_version"])
        record["cuda_part"] = bool(info.get("cuda_library"))
    for key, kern in sorted(info.get("kernels", {}).items()):
        record.setdefault("kind", "kernels")
        record.setdefault("kernels", {})[key] = {"cuda_version": kern["cuda_version"], "cuda_archs": kern["cuda_archs"]}
    return record


def slim_tag(binding, kernels):
    """The local version of a wheel of one binding and its kernels: cu12 / cu13 / cpu for the stable binding,
    pt24cu121 / pt24cpu for a classic one (the torch build it serves, as compat.local_tag names it)."""
    cuda = [k for k in kernels if k != "cpu"]
    if compat.is_stable(binding):
        if cuda:
            return cuda[0]
        return compat.local_tag(binding["torch_version"], None, "stable") or ""
    return compat.local_tag(binding["torch_version"], binding.get("cuda_version") if cuda else None, "classic")


def merged_info(parts, bindings, kernels, version):
    """The _build_info.json of the merged wheel and {old archive name: new archive name} of the renamed files."""
    primary = bindings[0].info
    info = {k: v for k, v in primary.items() if k not in ("libraries", "kernels", "bindings", "parts")}
    info["prerast_version"] = version
    info["kernels"] = kernels
    info.update(build_info.newest_cuda_fields(kernels))
    moves, others = {}, []
    for part in bindings[1:]:
        tag = binding_tag(part.info)
        entry = {k: part.info.get(k) for k in ("abi", "torch_floor", "torch_version", "cuda_version", "cxx11_abi")}
        for key in ("library", "cuda_library"):
            name = part.info.get(key)
            entry[key] = renamed(name, tag) if name else None
            if name:
                moves[(part.path, "prerast/" + name)] = "prerast/" + entry[key]
        others.append(entry)
    info["bindings"] = others
    info["parts"] = [part_record(p) for p in parts]
    return info, moves


def gather(parts):
    """(bindings in load order, kernels by compute); refuses a set that cannot make a plugin."""
    bindings = sorted([p for p in parts if p.is_binding()], key=binding_order)
    if not bindings:
        raise MergeRefused("no part carries a binding (PRERAST_PARTS=binding): nothing would call the kernels")
    seen = {}
    for b in bindings:
        tag = binding_tag(b.info)
        if tag in seen:
            raise MergeRefused(f"{b.name} and {seen[tag]} both carry the {tag} binding")
        seen[tag] = b.name
    kernels, source = {}, {}
    for p in parts:
        for key, kern in p.info.get("kernels", {}).items():
            if key in kernels:
                raise MergeRefused(f"{p.name} and {source[key]} both carry the {key} kernel library")
            kernels[key], source[key] = kern, p.name
    if "cpu" not in kernels:
        raise MergeRefused("no part carries the CPU kernel library (PRERAST_PARTS=kernels without CUDA)")
    return bindings, kernels


def merge(paths, out_dir, slim=False):
    """Merge the part wheels at `paths` into one wheel in out_dir; returns its path."""
    if not paths:
        raise MergeRefused("no parts given")
    # By file name: the order the parts are given in (a folder's listing, a shell glob) changes nothing.
    parts = sorted((read_part(p) for p in paths), key=lambda p: p.name)
    check_alike(parts)
    bindings, kernels = gather(parts)
    base = compat.base_version(parts[0].version)
    if slim:
        cuda = [k for k in kernels if k != "cpu"]
        if len(bindings) != 1 or len(cuda) > 1:
            raise MergeRefused(
                f"--slim takes one binding, the CPU kernels and at most one CUDA kernel library; got "
                f"{len(bindings)} bindings and the kernel libraries {sorted(kernels)}"
            )
        tag = slim_tag(bindings[0].info, kernels)
        version = f"{base}+{tag}" if tag else base
    else:
        version = base
    info, moves = merged_info(parts, bindings, kernels, version)
    members, executable = {}, set()
    for part in [bindings[0]] + [p for p in parts if p is not bindings[0]]:
        for name, data in part.members.items():
            if ".dist-info/" in name or name == INFO:
                continue
            old, name = name, moves.get((part.path, name), name)
            if name not in members and old in part.executable:
                executable.add(name)
            if name in members and members[name] != data and name.split("/")[0].endswith(".libs"):
                raise MergeRefused(f"{part.name} and another part both carry {name}, with different contents")
            members.setdefault(name, data)  # the Python package and shipped sources: the first binding's copy
    info["libraries"] = {n: integrity.stamp_bytes(members["prerast/" + n]) for n in build_info.library_names(info)}
    members[INFO] = json.dumps(info, indent=2, sort_keys=True).encode()
    return write_wheel(bindings[0], version, members, out_dir, merged_tags(parts), member_date(parts), executable)


def member_info(name, date, executable):
    """The zip entry of one member, with nothing of the machine, the clock or the umask in it."""
    item = zipfile.ZipInfo(name, date_time=date)
    item.compress_type = zipfile.ZIP_DEFLATED
    item.create_system = 3  # Unix, whatever the merging OS: the mode bits below are Unix's
    item.external_attr = (0o100755 if executable else 0o100644) << 16
    return item


def write_wheel(primary, version, members, out_dir, tags, date, executable=frozenset()):
    """The wheel of members with the primary part's dist-info, renamed to `version` and tagged `tags`, and a fresh
    RECORD; every member dated `date`, mode 0755 for the names in `executable`, else 0644."""
    old_dist = next(n.split("/")[0] for n in primary.members if n.split("/")[0].endswith(".dist-info"))
    dist = f"prerast-{version}.dist-info"
    for name, data in primary.members.items():
        if not name.startswith(old_dist + "/") or name.endswith("/RECORD"):
            continue
        if name.endswith("/METADATA"):
            lines = [
                f"Version: {version}" if line.startswith("Version: ") else line for line in data.decode().split("\n")
            ]
            data = "\n".join(lines).encode()
        if name.endswith("/WHEEL"):
            data = data.decode().replace(f"Tag: {primary.tags}", f"Tag: {tags}").encode()
        members[dist + name[len(old_dist) :]] = data
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in sorted(members.items()))
    members[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"prerast-{version}-{tags}.whl")
    tmp = out + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        # RECORD last, the dist-info after the package, as wheel writers order them.
        for name in sorted(members, key=lambda n: (".dist-info/" in n, n.endswith("/RECORD"), n)):
            z.writestr(member_info(name, date, name in executable), members[name], compresslevel=6)
    os.replace(tmp, out)
    return out


def describe(path):
    """Lines saying what a merged wheel carries: its size, and each binding and kernel library."""
    with zipfile.ZipFile(path) as z:
        info = json.loads(z.read(INFO))
    lines = [f"{os.path.basename(path)}: {os.path.getsize(path) / 1e6:.1f} MB"]
    for b in [info] + info["bindings"]:
        cuda = " + CUDA part" if b.get("cuda_library") else ""
        lines.append(f"  binding   {compat.serves(b)}, built with torch {b['torch_version']}{cuda}")
    for key, k in sorted(info["kernels"].items()):
        archs = f", GPU archs {' '.join(k['cuda_archs'])}" if k["cuda_archs"] else ""
        toolkit = f" (CUDA {k['cuda_version']}{archs})" if k["cuda_version"] else ""
        lines.append(f"  kernels   {key}{toolkit}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ci merge", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the merged wheel")
    ap.add_argument("--slim", action="store_true", help="the tagged wheel of one binding and its kernels")
    ap.add_argument("parts", nargs="+", help="the part wheels")
    args = ap.parse_args(argv)
    try:
        out = merge(args.parts, args.out, slim=args.slim)
    except MergeRefused as e:
        print(f"python -m ci merge: {e}", file=sys.stderr)
        return 1
    print("\n".join(describe(out)))
    print(out)
    return 0
