"""What differs between the operating systems prerast runs on, in one table: the file names of the plugin's
libraries, the binary format the dynamic loader takes, the default build-cache folder, and how a shell sets an
environment variable. Everything else asks here (build_info's LIBRARY_GLOB, integrity's header checks, the build
cache, the first-use build and the doctor), so a new OS is one row. Standard library only.

The library file names are setuptools' for a py_limited_api extension (build_ext.get_abi3_suffix): '.abi3'
before the interpreter's shared-library suffix on Linux and macOS (_C.abi3.so), plain '.pyd' on Windows (_C.pyd).
setuptools releases that read Python 3.13's SOABI_PLATFORM put the platform in too (_C.abi3-x86_64-linux-gnu.so),
so libraries are looked for by their extension (library_ext), and library_suffix is what a 3.11 build gives.
"""

import collections
import os
import platform as _platform
import sys

Platform = collections.namedtuple(
    "Platform",
    "key name library_suffix library_ext binary_format cache_parts posix_permissions torch_cuda compilers",
)

# key: sys.platform with the version digits dropped ("linux", "darwin", "win32").
# cache_parts: (environment variable or None, path under it or under the home folder when it is unset).
# torch_cuda: PyTorch publishes CUDA builds for this OS (not for macOS: CPU and MPS only).
# compilers: the compiler families a build may use there, the default first (their flags: compiler_flags.py).
PLATFORMS = {
    "linux": Platform(
        "linux", "Linux", ".abi3.so", ".so", "ELF", ("XDG_CACHE_HOME", (".cache",)), True, True, ("gcc", "clang")
    ),
    "darwin": Platform(
        "darwin", "macOS", ".abi3.so", ".so", "Mach-O", (None, ("Library", "Caches")), True, False, ("apple-clang",)
    ),
    "win32": Platform(
        "win32", "Windows", ".pyd", ".pyd", "PE", ("LOCALAPPDATA", ("AppData", "Local")), False, True, ("msvc",)
    ),
}
# Cache folder names under the base above: Windows' convention puts the application first (<app>\Cache).
CACHE_LEAF = {"win32": ("prerast", "Cache")}
LIBRARY_STEMS = ("_C", "_C_cuda")  # the CPU library and the CUDA kernels

# platform.machine() spellings of one architecture, and the name messages use.
MACHINES = {
    "x86_64": "x86-64",
    "amd64": "x86-64",
    "aarch64": "AArch64",
    "arm64": "arm64",
    "i386": "x86",
    "i686": "x86",
    "x86": "x86",
    "ppc64le": "PowerPC64",
    "s390x": "s390",
    "riscv64": "RISC-V",
}


def key(system=None):
    system = sys.platform if system is None else system
    for k in PLATFORMS:
        if system.startswith(k):
            return k
    return "linux" if system.startswith(("freebsd", "openbsd", "netbsd", "sunos")) else system


def current(system=None):
    """This OS's row (a Unix-like OS that is not listed is treated as Linux: ELF, .abi3.so)."""
    return PLATFORMS.get(key(system), PLATFORMS["linux"])


def machine(raw=None):
    """The running CPU architecture as messages name it ("x86-64", "arm64")."""
    raw = _platform.machine() if raw is None else raw
    return MACHINES.get(raw.lower(), raw or "unknown")


def describe_running(system=None, raw_machine=None):
    """'Linux x86-64', 'macOS arm64', 'Windows x86-64'."""
    return f"{current(system).name} {machine(raw_machine)}"


def library_name(stem="_C", system=None):
    return stem + current(system).library_suffix


def library_names(system=None):
    return [library_name(s, system) for s in LIBRARY_STEMS]


def library_glob(system=None):
    return "_C*" + current(system).library_ext


def all_library_globs():
    """The library names of every OS: what a package folder is searched for, so that a library of another OS
    copied there is found and named rather than overlooked."""
    return sorted({"_C*" + p.library_ext for p in PLATFORMS.values()})


def platform_of_library_name(name):
    """The rows whose plugin libraries are named like `name` ([] for a name no OS uses)."""
    return [p for p in PLATFORMS.values() if name.endswith(p.library_ext)]


def default_cache_dir(system=None, environ=None, home=None):
    """Linux: $XDG_CACHE_HOME/prerast or ~/.cache/prerast; macOS: ~/Library/Caches/prerast; Windows:
    %LOCALAPPDATA%\\prerast\\Cache (or ~\\AppData\\Local\\prerast\\Cache)."""
    row = current(system)
    environ = os.environ if environ is None else environ
    home = os.path.expanduser("~") if home is None else home
    var, under_home = row.cache_parts
    base = (environ.get(var) if var else None) or os.path.join(home, *under_home)
    return os.path.join(base, *CACHE_LEAF.get(row.key, ("prerast",)))


def set_env(var, value="1", system=None, shell=None):
    """The line a user types to set an environment variable for the commands that follow: `export VAR=1` in a
    POSIX shell; on Windows `set VAR=1` (cmd) or `$env:VAR = "1"` (PowerShell, shell="powershell")."""
    if current(system).key != "win32":
        return f"export {var}={value}"
    if shell == "powershell":
        return f'$env:{var} = "{value}"'
    return f"set {var}={value}"


def set_env_lines(var, value="1", system=None):
    """Every line that sets var on this OS: one on Unix, cmd's and PowerShell's on Windows."""
    if current(system).key != "win32":
        return [set_env(var, value, system)]
    return [set_env(var, value, system) + "   (cmd)", set_env(var, value, system, "powershell") + "   (PowerShell)"]


def remove_folder(path, system=None):
    """The command that deletes a folder and what is in it."""
    if current(system).key == "win32":
        return f'rmdir /s /q "{path}"'
    return f"rm -rf '{path}'"
