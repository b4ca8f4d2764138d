"""Stand-in part wheels for the release rehearsal's re-runs (ci/publish/rerun.py): every part of the published
selection, made of the two real parts built here (the Linux x86-64 CPU kernels and stable binding).

A stand-in is a real part relabelled: the file name, version, tags and _build_info.json of the part it stands for
(its compute, toolkit and archs; its binding's ABI, torch and CUDA), with the real part's library bytes under the
names that part's build gives them (_kernels_cu12.abi3.so, _C_cuda.abi3.so), stamped as its build would stamp
them, so that python -m ci merge-target takes them as it takes parts of the workflow's jobs. Other targets' stand-ins
carry Linux libraries: they are merged, listed, uploaded and indexed, never installed here. Made the same way
from the same real parts, a stand-in is the same bytes (dated by the real part's newest member).
"""

import json
import os
import re
import shutil
import zipfile

from ci import matrix
from ci.builder import merge as _merge
from prerast_meta import build_info, compat, integrity
from prerast_meta.repair import INFO, record_hash


def read(path):
    with zipfile.ZipFile(path) as z:
        items = [i for i in z.infolist() if not i.is_dir()]
        return {i.filename: z.read(i) for i in items}, max(i.date_time for i in items)


def relabel_kernels(part, info, members):
    """The CPU kernels part's library as `part`'s kernel library."""
    cpu = info["kernels"]["cpu"]
    if part.compute == "cpu":
        return info
    name = cpu["library"].replace("_kernels_cpu", f"_kernels_{part.compute}")
    members["prerast/" + name] = members.pop("prerast/" + cpu["library"])
    entry = build_info.kernel_entry(name, part.toolkit, part.toolkit, part.archs)
    return dict(info, kernels={part.compute: entry}, libraries={name: None})


def relabel_binding(part, info, members):
    """The stable binding part as `part`'s binding: its ABI and torch, and a CUDA part (a copy of the CPU one) for
    a CUDA torch's binding."""
    cell = part.cell
    info = dict(
        info,
        abi=part.abi,
        torch_floor=compat.floor_text() if part.abi == "stable" else None,
        torch_version=cell.torch_build,
        cuda_version=cell.cuda,
    )
    cuda = info.get("cuda_library")
    if cell.cuda and not cuda:
        cuda = info["library"].replace("_C", "_C_cuda", 1)
        members["prerast/" + cuda] = members["prerast/" + info["library"]]
    elif not cell.cuda and cuda:
        members.pop("prerast/" + cuda)
        cuda = None
    info["cuda_library"] = cuda
    info["libraries"] = {n: None for n in (info["library"], cuda) if n}
    return info


def part_wheel(part, real, version, out):
    """The wheel of `part` in out: the real part where it is one (and needs no relabelling), else a stand-in made of
    real {"kernels-cpu": wheel, "binding-stable": wheel}; returns its path."""
    base = real["kernels-cpu" if part.kind == "kernels" else "binding-stable"]
    members, date = read(base)
    info = json.loads(members[INFO])
    relabel = relabel_kernels if part.kind == "kernels" else relabel_binding
    new_info = relabel(part, info, members)
    if new_info is info and matrix.target_of_tag(_merge.wheel_fields(base)[2].split("-")[-1]) == part.target:
        return shutil.copy(base, out)  # the real part itself
    for name in new_info["libraries"]:
        new_info["libraries"][name] = integrity.stamp_bytes(members["prerast/" + name])
    _, full, tags = _merge.wheel_fields(part.wheel_name(version))
    old_dist = next(n.split("/")[0] for n in members if n.split("/")[0].endswith(".dist-info"))
    dist = f"prerast-{full}.dist-info"
    files = {}
    for name, data in members.items():
        if name == INFO:
            data = json.dumps(new_info, indent=2, sort_keys=True).encode()
        elif name == f"{old_dist}/WHEEL":
            data = re.sub(rb"(?m)^Tag: .*$", f"Tag: {tags}".encode(), data)
        elif name == f"{old_dist}/METADATA":
            data = re.sub(rb"(?m)^Version: .*$", f"Version: {full}".encode(), data)
        if not name.endswith("/RECORD"):
            files[name.replace(old_dist + "/", dist + "/", 1)] = data
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in sorted(files.items()))
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    path = os.path.join(out, part.wheel_name(version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files, key=lambda n: (".dist-info/" in n, n.endswith("/RECORD"), n)):
            z.writestr(_merge.member_info(name, date, name.endswith((".so", ".pyd"))), files[name])
    return path
