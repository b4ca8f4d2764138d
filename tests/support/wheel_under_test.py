import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_test_wheel():
    """The repaired wheel under test: the one ci/test.sh built (PRERAST_TEST_WHEEL), else the newest in dist/."""
    path = os.environ.get("PRERAST_TEST_WHEEL")
    if not path:
        found = sorted(glob.glob(os.path.join(ROOT, "dist", "prerast-*manylinux*.whl")), key=os.path.getmtime)
        path = found[-1] if found else None
    if not path:
        pytest.skip("no repaired wheel: run ci/test.sh (it builds one) or ci/quickstart.sh")
    return path
