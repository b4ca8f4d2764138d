"""What the guide pages state that the code decides: the fix commands of BinaryMismatchError shown in
docs/installing.md are the ones the loader prints for those environments."""
import os
import re

from prerast import _loader

import fresh_clone

INSTALLING = os.path.join(fresh_clone.ROOT, "docs", "installing.md")


def test_installing_shows_the_fix_commands_the_loader_prints():
    text = open(INSTALLING, encoding="utf-8").read()
    shown = re.findall(r"^(pip install --force-reinstall .*?)\s+# torch (\S+), (?:CUDA (\S+)|CPU-only)$", text, re.M)
    assert len(shown) == 3
    for command, torch_version, cuda in shown:
        assert command == _loader.fix_command({"torch_version": torch_version, "cuda_version": cuda or None})
