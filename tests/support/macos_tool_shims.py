"""Apple's otool, install_name_tool, lipo and codesign, which delocate runs, as shims over LLVM's Mach-O tools:
with the folder `write` fills first on PATH, delocate repairs a macOS wheel for real on Linux."""

import os
import shutil

# Apple's tool -> the LLVM tool that reads and edits Mach-O files the same way.
LLVM_TOOLS = {"otool": "llvm-otool-14", "install_name_tool": "llvm-install-name-tool-14", "lipo": "llvm-lipo-14"}

SCRIPTS = {
    # delocate runs `otool -arch all -m -L FILE`; -m (no archive(member) syntax) is Apple's only: dropped.
    "otool": 'for a do shift; [ "$a" = -m ] || set -- "$@" "$a"; done\nexec llvm-otool-14 "$@"\n',
    "install_name_tool": 'exec llvm-install-name-tool-14 "$@"\n',
    "lipo": 'exec llvm-lipo-14 "$@"\n',
    # delocate re-signs (ad hoc) what it edits, as arm64 macOS requires to load it; nothing loads it here.
    "codesign": "exit 0\n",
}


def missing():
    """The LLVM tools the shims need that are not on PATH."""
    return [tool for tool in LLVM_TOOLS.values() if shutil.which(tool) is None]


def write(folder):
    """Write the shims into folder; returns it (put it first on PATH)."""
    os.makedirs(folder, exist_ok=True)
    for name, body in SCRIPTS.items():
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
    return folder
