"""cibuildwheel's repair step and the checks of a repaired wheel: its platform tag and grafted libraries
(check.py), the symbols its libraries import (symbols.py), and the proof that it loads under other torch releases
(abi_proof.py)."""
