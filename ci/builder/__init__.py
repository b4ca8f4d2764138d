"""Building cells and wheels on this machine: the cells (cells.py), the wheel helpers (wheel.py), the
aarch64 cross build (cross.py), the in-place dev loop (dev.py), what this machine has (local.py, tools.py) and can
build (buildable.py), progress output, the smoke test and the summary table."""
