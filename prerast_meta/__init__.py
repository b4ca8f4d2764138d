"""What building, repairing and checking a prerast binary needs to know, importable without torch and without
loading the plugin: the version, which binary serves which torch and how its wheel is named (compat), the build
metadata's schema (build_info), the build inputs (sources), the build environment (build_env), the libraries'
stamps (integrity), the repair policy (repair) and the progress of long commands (progress).

The runtime package `prerast` imports it, and so do setup.py and ci/ (importing `prerast` itself loads the
plugin, which a build cannot do). It imports nothing outside the standard library and nothing of `prerast`.
"""
