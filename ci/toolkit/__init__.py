"""CUDA toolkits and compiler environments: CUDA from NVIDIA's redistributable archives for a Windows runner
(redist.py), CUDA 12.4 from Debian's packages into a private CUDA_HOME on a Debian machine (debian.py), and Visual
Studio's developer environment (msvc_env.py)."""
