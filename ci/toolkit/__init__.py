"""The toolchains a Windows runner lacks: CUDA from NVIDIA's redistributable archives (redist.py) and Visual
Studio's developer environment (msvc_env.py)."""
