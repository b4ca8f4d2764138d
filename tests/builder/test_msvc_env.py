"""`python -m ci msvc-env` with stand-ins for vswhere.exe and cmd.exe: the commands it runs, the variables it
prints for $GITHUB_ENV (those vcvarsall.bat changed, nothing else), and its errors when Visual Studio is missing."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ci.toolkit import msvc_env  # noqa: E402

VS = r"C:\Program Files\Microsoft Visual Studio\2022\Enterprise"
VSWHERE = r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe"
VCVARSALL = VS + r"\VC\Auxiliary\Build\vcvarsall.bat"
MSVC_BIN = VS + r"\VC\Tools\MSVC\14.44.35207\bin\HostX64\x64"
BEFORE = {
    "Path": r"C:\Windows\system32;C:\hostedtoolcache\windows\Python\3.12.10\x64",
    "ProgramFiles(x86)": r"C:\Program Files (x86)",
    "TEMP": r"C:\Users\runneradmin\AppData\Local\Temp",
    "INCLUDE": "",
}
# What cmd.exe prints for vcvarsall.bat x64 && echo MARKER && set: the banner, then every variable.
CMD_OUTPUT = (
    "\r\n".join(
        [
            "**********************************************************************",
            "** Visual Studio 2022 Developer Command Prompt v17.14.8",
            "**********************************************************************",
            "[vcvarsall.bat] Environment initialized for: 'x64'",
            msvc_env.MARKER + " ",
            "INCLUDE="
            + VS
            + r"\VC\Tools\MSVC\14.44.35207\include;C:\Program Files (x86)\Windows Kits\10\include\10.0.26100.0\ucrt",
            "LIB=" + VS + r"\VC\Tools\MSVC\14.44.35207\lib\x64",
            "Path=" + MSVC_BIN + ";" + BEFORE["Path"],
            "ProgramFiles(x86)=" + BEFORE["ProgramFiles(x86)"],
            "TEMP=" + BEFORE["TEMP"],
            "VSINSTALLDIR=" + VS + "\\",
            "VSCMD_ARG_TGT_ARCH=x64",
        ]
    )
    + "\r\n"
)


class FakeWindows:
    """vswhere.exe and cmd.exe as a Windows runner answers; records what was run."""

    def __init__(self, files=(VSWHERE, VCVARSALL), vswhere_out=VS + "\r\n", cmd_out=CMD_OUTPUT, cmd_code=0):
        self.files, self.vswhere_out, self.cmd_out, self.cmd_code = set(files), vswhere_out, cmd_out, cmd_code
        self.ran = []

    def exists(self, path):
        return path in self.files

    def run(self, command):
        self.ran.append(command)
        if isinstance(command, list) and command[0] == VSWHERE:
            return subprocess.CompletedProcess(command, 0 if self.vswhere_out else 1, self.vswhere_out, "")
        assert isinstance(command, str) and command.startswith("cmd ")
        return subprocess.CompletedProcess(command, self.cmd_code, self.cmd_out, "")


def test_prints_exactly_the_variables_vcvarsall_changed(capsys):
    fake = FakeWindows()
    assert msvc_env.main([], environ=BEFORE, run=fake.run, exists=fake.exists) == 0
    out = capsys.readouterr().out
    printed = dict(line.split("=", 1) for line in out.splitlines())
    # The three of the sample that vcvarsall.bat changed or set, plus its own two; TEMP and ProgramFiles(x86)
    # are what they were, and the banner and the marker are not variables.
    assert set(printed) == {"INCLUDE", "LIB", "Path", "VSINSTALLDIR", "VSCMD_ARG_TGT_ARCH"}
    assert printed["Path"].split(";")[0] == MSVC_BIN and printed["VSINSTALLDIR"] == VS + "\\"
    assert "\r" not in out
    # vswhere: the newest installation with the C++ x64 tools; then vcvarsall.bat x64 and set, in one cmd.exe.
    assert fake.ran[0] == [
        VSWHERE,
        "-latest",
        "-products",
        "*",
        "-requires",
        "Microsoft.VisualStudio.Component.VC.Tools.x86.x64",
        "-property",
        "installationPath",
    ]
    assert fake.ran[1] == f'cmd /d /s /c ""{VCVARSALL}" x64 && echo {msvc_env.MARKER} && set"'


def test_names_compare_without_case_as_on_windows():
    fake = FakeWindows()
    environ = {k.upper(): v for k, v in BEFORE.items()}  # os.environ on Windows: PATH, not Path
    changed = msvc_env.developer_environment(environ, run=fake.run, exists=fake.exists)
    assert set(changed) == {"INCLUDE", "LIB", "Path", "VSINSTALLDIR", "VSCMD_ARG_TGT_ARCH"}  # not ProgramFiles(x86)


def test_a_value_with_a_line_break_uses_the_multiline_form():
    text = msvc_env.github_env_lines({"A": "1", "B": "two\nlines"})
    lines = text.splitlines()
    assert lines[0] == "A=1" and lines[1].startswith("B<<") and lines[2:4] == ["two", "lines"]
    assert lines[4] == lines[1][len("B<<") :] and "two" not in lines[4]


@pytest.mark.parametrize(
    "fake, message",
    [
        (FakeWindows(files=()), "vswhere.exe not found at " + VSWHERE),
        (FakeWindows(vswhere_out=""), "found no Visual Studio with Microsoft.VisualStudio.Component.VC.Tools.x86.x64"),
        (FakeWindows(files=(VSWHERE,)), VCVARSALL + " not found"),
    ],
    ids=["no vswhere", "no C++ tools", "no vcvarsall"],
)
def test_missing_visual_studio_exits_3_and_says_what(fake, message, capsys):
    assert msvc_env.main([], environ=BEFORE, run=fake.run, exists=fake.exists) == 3
    out, err = capsys.readouterr()
    assert out == "" and message in err


def test_a_failing_vcvarsall_exits_1_with_its_output(capsys):
    fake = FakeWindows(cmd_out="[ERROR:vcvarsall.bat] Invalid argument found : arm65\r\n", cmd_code=1)
    assert msvc_env.main(["--arch", "arm65"], environ=BEFORE, run=fake.run, exists=fake.exists) == 1
    out, err = capsys.readouterr()
    assert out == "" and "vcvarsall.bat arm65 failed (exit 1)" in err and "Invalid argument found" in err
    assert fake.ran[1].endswith('" arm65 && echo prerast-msvc-env-begin && set"')


def test_the_command_is_listed_and_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ci", "msvc-env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, **{"ProgramFiles(x86)": str(tmp_path)}),
    )
    assert out.returncode == 3 and "vswhere.exe not found at " + str(tmp_path) in out.stderr
    assert (
        "msvc-env"
        in subprocess.run([sys.executable, "-m", "ci", "--help"], cwd=ROOT, capture_output=True, text=True).stdout
    )


# A bash step's PATH on a windows-2022 runner, as the Python it starts sees it: Git for Windows' bash.exe puts
# its mingw64\bin and usr\bin (GNU coreutils' link.exe) in front of the PATH the runner gave the step, then
# setup-python's folders ($GITHUB_PATH) and the image's own.
GIT = r"C:\Program Files\Git"
GIT_LINK = GIT + r"\usr\bin\link.exe"
RUNNER_PATH = ";".join(
    [
        r"C:\hostedtoolcache\windows\Python\3.12.10\x64\Scripts",
        r"C:\hostedtoolcache\windows\Python\3.12.10\x64",
        r"C:\Program Files\PowerShell\7",
        r"C:\Windows\system32",
        r"C:\Windows",
        GIT + r"\bin",
        GIT + r"\cmd",
    ]
)


def git_bash(path):
    """The PATH of a process a bash step starts, given the PATH the runner gave the step."""
    return ";".join([GIT + r"\mingw64\bin", GIT + r"\usr\bin", path])


def vcvars_output(shell_path, msvc_dirs):
    """cmd.exe's answer to vcvarsall.bat x64 && set, started from a process whose PATH is shell_path: vcvarsall.bat
    puts its folders in front."""
    return CMD_OUTPUT.replace("Path=" + MSVC_BIN + ";" + BEFORE["Path"], "Path=" + ";".join([*msvc_dirs, shell_path]))


MSVC_DIRS = [MSVC_BIN, VS + r"\Common7\IDE", r"C:\Program Files (x86)\Windows Kits\10\bin\10.0.26100.0\x64"]
TOOLS = (VSWHERE, VCVARSALL, GIT_LINK, MSVC_BIN + r"\link.exe", MSVC_BIN + r"\cl.exe")


class Spawned:
    def __init__(self):
        self.calls = []

    def __call__(self, command, env):
        self.calls.append((command, env))
        return 7


def bash_environ():
    return dict(BEFORE, Path=git_bash(RUNNER_PATH))


def test_the_old_way_links_with_gits_link_exe():
    # What failed on every Windows part: MSVC's PATH exported to $GITHUB_ENV, then the next bash step's own prefix.
    exported = msvc_env.developer_environment(
        bash_environ(),
        run=FakeWindows(cmd_out=vcvars_output(git_bash(RUNNER_PATH), MSVC_DIRS)).run,
        exists=set(TOOLS).__contains__,
    )["Path"]
    assert msvc_env.first_on_path("link.exe", exported, set(TOOLS).__contains__) == MSVC_BIN + r"\link.exe"
    assert msvc_env.first_on_path("link.exe", git_bash(exported), set(TOOLS).__contains__) == GIT_LINK


@pytest.mark.parametrize("order", ["vcvarsall first", "shell first"])
def test_run_starts_the_build_with_msvcs_link_and_cl_first_on_a_runners_path(order, capsys):
    shell_path = git_bash(RUNNER_PATH)
    # "shell first": a PATH where Git's folders come before MSVC's even in vcvarsall.bat's answer.
    answer = vcvars_output(shell_path, MSVC_DIRS)
    if order == "shell first":
        answer = answer.replace(
            "Path=" + ";".join(MSVC_DIRS) + ";" + shell_path, "Path=" + shell_path + ";" + ";".join(MSVC_DIRS)
        )
    fake, spawned = FakeWindows(files=TOOLS, cmd_out=answer), Spawned()
    command = ["python", "-m", "cibuildwheel", "--platform", "windows", "--output-dir", "wheelhouse"]
    code = msvc_env.main(
        ["--run", "--", *command], environ=bash_environ(), run=fake.run, exists=fake.exists, spawn=spawned
    )
    assert code == 7  # the command's own status
    ((ran, env),) = spawned.calls
    assert ran == command
    path = env[msvc_env.path_key(env)]
    assert msvc_env.first_on_path("link.exe", path, fake.exists) == MSVC_BIN + r"\link.exe"
    assert msvc_env.first_on_path("cl.exe", path, fake.exists) == MSVC_BIN + r"\cl.exe"
    assert path.split(";")[:3] == MSVC_DIRS and GIT + r"\usr\bin" in path  # Git's tools stay, behind MSVC's
    assert env["VSINSTALLDIR"] == VS + "\\" and env["TEMP"] == BEFORE["TEMP"]
    assert len([k for k in env if k.upper() == "PATH"]) == 1
    assert "msvc-env: link.exe " + MSVC_BIN + r"\link.exe" in capsys.readouterr().out


def test_run_refuses_to_build_when_link_exe_is_not_msvcs(capsys):
    # A Visual Studio whose folders hold no link.exe: Git's would be taken, so nothing starts.
    files = tuple(f for f in TOOLS if f != MSVC_BIN + r"\link.exe")
    fake, spawned = FakeWindows(files=files, cmd_out=vcvars_output(git_bash(RUNNER_PATH), MSVC_DIRS)), Spawned()
    assert (
        msvc_env.main(
            ["--run", "--", "python"], environ=bash_environ(), run=fake.run, exists=fake.exists, spawn=spawned
        )
        == 3
    )
    assert (
        spawned.calls == []
        and f"link.exe on PATH is {GIT_LINK}, not the one of Visual Studio" in capsys.readouterr().err
    )
