"""What the guide pages state that the code decides: the fix commands of BinaryMismatchError shown in
docs/installing.md are the ones the loader prints for those environments, and the release the commands of every
page name is the package's. (Prose reads such facts through substitutions, docs/conf.py; commands stay literal,
so that they can be copied and tested, and are checked here.)"""

import glob
import os
import re

import fresh_clone
from prerast import _loader
from prerast_meta import compat

INSTALLING = os.path.join(fresh_clone.ROOT, "docs", "installing.md")


def test_installing_shows_the_fix_commands_the_loader_prints():
    text = open(INSTALLING, encoding="utf-8").read()
    shown = re.findall(r"^(pip install --force-reinstall .*?)\s+# torch (\S+), (?:CUDA (\S+)|CPU-only)$", text, re.M)
    assert len(shown) == 3
    for command, torch_version, cuda in shown:
        assert command == _loader.fix_command({"torch_version": torch_version, "cuda_version": cuda or None})


def versions_in_commands(path):
    """(line, version) of each prerast release a ```bash block of the page names: prerast==V, prerast-V-..."""
    found, in_block = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_block = line.strip() == "```bash"
            continue
        if in_block:
            found += [(line.strip(), v) for v in re.findall(r"prerast(?:==|-)(\d+\.\d+\.\d+\w*)", line)]
    return found


def test_commands_name_this_release():
    pages = sorted(glob.glob(os.path.join(fresh_clone.ROOT, "docs", "*.md")))
    found = [(os.path.basename(p), line, v) for p in pages for line, v in versions_in_commands(p)]
    assert len(found) >= 5
    stale = [f for f in found if f[2] != compat.base_version(compat.__version__)]
    assert not stale, f"commands that name another release than {compat.__version__}: {stale}"
