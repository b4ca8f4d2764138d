"""The MSVC developer environment for the steps that follow, from Visual Studio's own vcvarsall.bat.

    python -m ci msvc-env >> "$GITHUB_ENV"      # a Windows runner (the workflow's shell there is git-bash)
    python -m ci msvc-env --arch x64            # prints NAME=VALUE lines: what vcvarsall.bat changed

nvcc needs cl.exe as its host compiler, and setuptools sets up Visual Studio only for the calls it makes itself,
so the wheel job puts MSVC's environment (PATH, INCLUDE, LIB, LIBPATH, VSINSTALLDIR, ...) into $GITHUB_ENV. This is
what the ilammy/msvc-dev-cmd action did, without an action that is unmaintained and runs on Node 20: vswhere.exe
(installed with every Visual Studio since 2017) finds the newest installation with the C++ x64 tools, cmd.exe
runs its vcvarsall.bat and then `set`, and the variables that differ from this process's environment are
printed, in GITHUB_ENV's multi-line form (NAME<<DELIMITER) only for a value with a line break.
Exit codes: 3 vswhere.exe or vcvarsall.bat missing (or no Visual Studio with the C++ tools), 1 vcvarsall.bat failed.
"""

import argparse
import ntpath
import os
import subprocess
import sys
import uuid

# The component every Visual Studio with the MSVC x64/x86 compilers has (Build Tools included).
VC_TOOLS = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"
# Printed between vcvarsall.bat's banner and `set`: only what follows it is the environment.
MARKER = "prerast-msvc-env-begin"


class MsvcMissing(Exception):
    """vswhere.exe, a Visual Studio with the C++ tools, or its vcvarsall.bat is not there."""

    exit_code = 3


class VcvarsFailed(Exception):
    exit_code = 1


def run_command(command):
    """subprocess.run with the output captured: a list for a program, a string for a cmd.exe line (passed to
    Windows as written, so that cmd.exe's own quoting rules apply)."""
    return subprocess.run(command, capture_output=True, text=True)


def vswhere_path(environ):
    base = environ.get("ProgramFiles(x86)") or r"C:\Program Files (x86)"
    return ntpath.join(base, "Microsoft Visual Studio", "Installer", "vswhere.exe")


def find_visual_studio(environ, run=run_command, exists=os.path.isfile):
    """The installation folder of the newest Visual Studio with the C++ x64 tools, as vswhere.exe names it."""
    vswhere = vswhere_path(environ)
    if not exists(vswhere):
        raise MsvcMissing(
            f"msvc-env: vswhere.exe not found at {vswhere}: expected with any Visual Studio 2017 or "
            "newer; install Visual Studio (Build Tools) with the C++ workload, or run on a windows-20xx "
            "runner"
        )
    out = run([vswhere, "-latest", "-products", "*", "-requires", VC_TOOLS, "-property", "installationPath"])
    found = out.stdout.strip().splitlines() if out.returncode == 0 else []
    if not found:
        raise MsvcMissing(
            f"msvc-env: vswhere.exe found no Visual Studio with {VC_TOOLS} (exit {out.returncode}"
            f"{': ' + out.stderr.strip() if out.stderr.strip() else ''}): add the C++ x64/x86 build "
            "tools to the installation"
        )
    return found[0].strip()


def vcvarsall_path(installation):
    return ntpath.join(installation, "VC", "Auxiliary", "Build", "vcvarsall.bat")


def parse_set(text):
    """{NAME: VALUE} from the output of cmd.exe's `set` after MARKER (vcvarsall.bat's banner comes before it)."""
    lines = text.splitlines()
    if MARKER not in (line.strip() for line in lines):
        return None
    start = [line.strip() for line in lines].index(MARKER) + 1
    env = {}
    for line in lines[start:]:
        name, sep, value = line.partition("=")
        if sep and name:  # cmd.exe's per-drive variables (=C:=C:\...) have no name
            env[name] = value
    return env


def developer_environment(environ, arch="x64", run=run_command, exists=os.path.isfile):
    """{NAME: VALUE} of every variable vcvarsall.bat `arch` sets or changes, relative to `environ`. Names compare
    as Windows compares them, without case (Path and PATH are one variable)."""
    vcvarsall = vcvarsall_path(find_visual_studio(environ, run, exists))
    if not exists(vcvarsall):
        raise MsvcMissing(
            f"msvc-env: {vcvarsall} not found: the Visual Studio that vswhere.exe named has no "
            "vcvarsall.bat; repair its C++ workload"
        )
    # cmd /s /c "...": cmd.exe strips the outer quotes and runs the rest, quoted path included, as written.
    out = run(f'cmd /d /s /c ""{vcvarsall}" {arch} && echo {MARKER} && set"')
    after = parse_set(out.stdout) if out.returncode == 0 else None
    if after is None:
        raise VcvarsFailed(
            f"msvc-env: {vcvarsall} {arch} failed (exit {out.returncode}):\n{(out.stdout + out.stderr).strip()}"
        )
    before = {k.upper(): v for k, v in environ.items()}
    return {k: v for k, v in after.items() if before.get(k.upper()) != v}


def github_env_lines(variables):
    """$GITHUB_ENV lines: NAME=VALUE, or NAME<<DELIMITER / VALUE / DELIMITER for a value with a line break."""
    lines = []
    for name, value in variables.items():
        if "\n" in value or "\r" in value:
            delimiter = f"EOF_{uuid.uuid4().hex}"
            lines += [f"{name}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{name}={value}")
    return "\n".join(lines)


def main(argv=None, environ=None, run=run_command, exists=os.path.isfile):
    p = argparse.ArgumentParser(
        prog="python -m ci msvc-env", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--arch", default="x64", help="vcvarsall.bat's argument (default x64: 64-bit tools and target)")
    a = p.parse_args(argv)
    try:
        variables = developer_environment(os.environ if environ is None else environ, a.arch, run, exists)
    except (MsvcMissing, VcvarsFailed) as e:
        print(e, file=sys.stderr)
        return e.exit_code
    # GITHUB_ENV is read line by line: \n, not the \r\n a Windows console stream would write.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(newline="\n")
    print(github_env_lines(variables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
