"""`python -m ci` by file path, from any folder and any shell: python <checkout>/ci/cli.py COMMAND ...

cibuildwheel runs its repair and test commands (and before-all on Windows and macOS) from folders of its own; on
Windows the test runs from a temporary folder on C: while the checkout is on D:, and cmd.exe's `cd` does not
change drive (pypa/cibuildwheel#1448), so `cd {project} && python -m ci ...` never finds `ci`. Given the path of
this file, Python finds the package from here instead. Standard library only (it runs inside cibuildwheel).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    # sys.path[0] is this file's folder, ci/, whose modules (wheel.py, index.py, ...) would shadow packages of
    # the same names: the checkout's root takes its place, as `python -m ci` from the root would have it.
    sys.path[0] = ROOT
    from ci.__main__ import main

    sys.exit(main())
