"""`python -m ci fact NAME`: one fact that the code owns, printed for the workflow's shell steps, so that no step
spells a value of its own.

    stable-floor    the oldest torch a stable wheel serves (prerast_meta.compat.STABLE_FLOOR), e.g. 2.10
    plat            the platform tag of this machine's wheels (its ci/matrix.toml target), e.g. manylinux_2_28_x86_64
"""

import argparse
import sys


def stable_floor():
    from prerast_meta import compat

    return compat.floor_text()


def plat():
    from ci import matrix

    try:
        return matrix.policy_platform()
    except matrix.MatrixError as e:
        raise SystemExit(f"fact plat: {e}, or run this on a machine the matrix builds for") from e


FACTS = {"stable-floor": stable_floor, "plat": plat}


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m ci fact", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("name", choices=sorted(FACTS))
    print(FACTS[p.parse_args(argv).name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
