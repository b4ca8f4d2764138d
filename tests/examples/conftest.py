import os
import sys

import pytest

# The example programs import their shared module as `common`, from their own folder.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/examples" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.examples)
