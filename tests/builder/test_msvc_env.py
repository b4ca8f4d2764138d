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
