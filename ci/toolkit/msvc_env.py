"""The MSVC developer environment, from Visual Studio's own vcvarsall.bat: a command run in it, or its variables.

    python -m ci msvc-env --run -- python -m cibuildwheel ...   # the wheel job's Windows build step
    python -m ci msvc-env --arch x64            # prints NAME=VALUE lines: what vcvarsall.bat changed

nvcc needs cl.exe as its host compiler, and setuptools sets up Visual Studio only for the calls it makes itself,
so the wheel job builds in MSVC's environment (PATH, INCLUDE, LIB, LIBPATH, VSINSTALLDIR, ...), as the
ilammy/msvc-dev-cmd action would set it up, without an action that is unmaintained and runs on Node 20:
vswhere.exe (installed with every Visual Studio since 2017) finds the newest installation with the C++ x64 tools,
cmd.exe runs its vcvarsall.bat and then `set`, and the variables that differ from this process's environment are
taken.

--run starts the command in that environment with MSVC's folders first on PATH, and refuses to start it unless
link.exe and cl.exe resolve there. The workflow's steps run under Git's bash, which puts its usr\bin, holding GNU
coreutils' link.exe, in front of PATH at the start of every step, also in front of a PATH exported to $GITHUB_ENV
by an earlier step (ilammy/msvc-dev-cmd's README: "Name conflicts with shell: bash"); with DISTUTILS_USE_SDK=1
setuptools links with the first link.exe on PATH. Setting PATH in the process that starts the build does not
depend on the shell. Without --run the variables are printed in $GITHUB_ENV's form (NAME<<DELIMITER only for a
value with a line break).
Exit codes: 3 vswhere.exe or vcvarsall.bat missing (or no Visual Studio with the C++ tools, or link.exe/cl.exe not
MSVC's), 1 vcvarsall.bat failed; with --run otherwise the command's.
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


# The programs setuptools and nvcc take from PATH (setuptools' _msvccompiler: _find_exe, the first folder of PATH).
MSVC_PROGRAMS = ("link.exe", "cl.exe")


def path_key(env):
    """The name PATH has in `env` (Path in cmd.exe's `set`, PATH in Python's environ on Windows)."""
    return next((k for k in env if k.upper() == "PATH"), "PATH")


def _norm(entry):
    return ntpath.normcase(entry.rstrip("\\/"))


def first_on_path(program, path, exists=os.path.isfile):
    """The program's file in the first PATH folder holding it, as setuptools' _find_exe takes it, or None."""
    for folder in path.split(";"):
        if folder and exists(ntpath.join(folder, program)):
            return ntpath.join(folder, program)
    return None


def msvc_first(environ, changed):
    """`environ` with vcvarsall.bat's `changed` variables, and on PATH first the folders vcvarsall.bat added or
    that lie in Visual Studio (VSINSTALLDIR), in vcvarsall.bat's order, before anything the shell put there."""
    env = {k: v for k, v in environ.items() if k.upper() not in {c.upper() for c in changed}}
    env.update(changed)
    key = path_key(env)
    before = {_norm(e) for e in environ.get(path_key(environ), "").split(";") if e}
    vs = _norm(env.get("VSINSTALLDIR", "")) if env.get("VSINSTALLDIR") else None
    entries = [e for e in env.get(key, "").split(";") if e]
    ours = [e for e in entries if _norm(e) not in before or (vs and _norm(e).startswith(vs))]
    ours = list(dict.fromkeys(ours))
    env[key] = ";".join(ours + [e for e in entries if e not in ours])
    return env, ours


def check_programs(env, ours, exists=os.path.isfile):
    """Raise MsvcMissing unless link.exe and cl.exe on env's PATH are in MSVC's folders `ours`."""
    mine = {_norm(e) for e in ours}
    for program in MSVC_PROGRAMS:
        found = first_on_path(program, env.get(path_key(env), ""), exists)
        if found is None or _norm(ntpath.dirname(found)) not in mine:
            raise MsvcMissing(
                f"msvc-env: {program} on PATH is {found or 'missing'}, not the one of Visual Studio's folders "
                f"({'; '.join(ours) or 'vcvarsall.bat added none'}): the build would not link with MSVC"
            )


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


def main(argv=None, environ=None, run=run_command, exists=os.path.isfile, spawn=subprocess.call):
    p = argparse.ArgumentParser(
        prog="python -m ci msvc-env", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--arch", default="x64", help="vcvarsall.bat's argument (default x64: 64-bit tools and target)")
    p.add_argument(
        "--run",
        metavar="-- COMMAND",
        help="last: run COMMAND (every argument after --run --) in the environment, MSVC's folders first on PATH, "
        "instead of printing the environment",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    command = None
    if "--run" in argv:  # everything after it is the command's, options included
        at = argv.index("--run")
        argv, command = argv[:at], argv[at + 1 :]
        command = command[1:] if command[:1] == ["--"] else command
    a = p.parse_args(argv)
    if command is not None and not command:
        p.error("--run needs a command: --run -- python -m cibuildwheel ...")
    environ = os.environ if environ is None else environ
    try:
        variables = developer_environment(environ, a.arch, run, exists)
        if command is not None:
            env, ours = msvc_first(environ, variables)
            check_programs(env, ours, exists)
    except (MsvcMissing, VcvarsFailed) as e:
        print(e, file=sys.stderr)
        return e.exit_code
    if command is not None:
        print(f"msvc-env: link.exe {first_on_path('link.exe', env[path_key(env)], exists)}", flush=True)
        return spawn(command, env=env)
    # GITHUB_ENV is read line by line: \n, not the \r\n a Windows console stream would write.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(newline="\n")
    print(github_env_lines(variables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
