"""The systemd user unit, the launchd agent and the desktop entry start the commands they document."""

import configparser
import plistlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"


def _ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


def test_systemd_unit_runs_serve_and_restarts_only_after_a_crash():
    unit = _ini(PACKAGING / "systemd" / "localchat.service")
    command = shlex.split(unit["Service"]["ExecStart"])
    assert command == ["/bin/sh", "-lc", "exec localchat serve"]
    assert unit["Service"]["Restart"] == "on-failure"  # `localchat stop` (exit 0) is not undone
    assert unit["Install"]["WantedBy"] == "default.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path):
    unit = tmp_path / "localchat.service"
    unit.write_text((PACKAGING / "systemd" / "localchat.service").read_text())
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0 and "localchat.service" not in result.stderr, result.stderr


def test_launchd_agent_runs_serve_and_restarts_only_after_a_crash():
    agent = plistlib.loads((PACKAGING / "launchd" / "dev.localchat.engine.plist").read_bytes())
    assert agent["Label"] == "dev.localchat.engine"
    assert agent["ProgramArguments"] == ["/bin/sh", "-lc", "exec localchat serve"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}


def test_desktop_entry_opens_the_terminal_ui_in_a_terminal():
    entry = _ini(PACKAGING / "desktop" / "localchat.desktop")["Desktop Entry"]
    assert (entry["Type"], entry["Exec"], entry["Terminal"]) == ("Application", "localchat", "true")
    assert entry["Name"] == "localchat" and entry["Categories"].endswith(";")
