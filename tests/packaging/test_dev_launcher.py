"""`./dev` puts `localchat` where a new shell finds it (the README's examples call it by name)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/bin:/bin"  # nothing of localchat's


def dev(home: Path, path: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "PATH": path, "PYTHON": sys.executable}  # the Python ./dev checks the version of
    return subprocess.run([ROOT / "dev", "--version"], env=env, capture_output=True, text=True, timeout=600)


def dev_interleaved(home: Path, path: str) -> str:
    """./dev --version's stderr and stdout in the order they were written."""
    env = {"HOME": str(home), "PATH": path, "PYTHON": sys.executable}
    return subprocess.run([ROOT / "dev", "--version"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600).stdout


def new_shell(home: Path, path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "localchat --version"], env={"HOME": str(home), "PATH": path},
                          capture_output=True, text=True)


def test_dev_links_localchat_into_a_folder_on_the_path(tmp_path):
    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    path = f"{bin_dir}:{SYSTEM_PATH}"
    assert new_shell(tmp_path, path).returncode == 127  # not found before
    first = dev(tmp_path, path)
    assert first.returncode == 0, first.stderr
    assert os.readlink(bin_dir / "localchat") == str(ROOT / ".venv" / "bin" / "localchat")
    said = f"localchat is linked at {bin_dir / 'localchat'}"
    # said before the app starts (a terminal UI would cover it) and again after it ends, around its output
    assert first.stderr.count(said) == 2 and first.stdout.startswith("localchat ")
    assert first.stderr.index(said) < first.stderr.rindex(said)
    found = new_shell(tmp_path, path)
    assert found.returncode == 0 and found.stdout.startswith("localchat ")
    assert "linked" not in dev(tmp_path, path).stderr  # said once


def test_dev_says_where_it_linked_before_and_after_the_app(tmp_path):
    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    said, version, again = dev_interleaved(tmp_path, f"{bin_dir}:{SYSTEM_PATH}").strip().splitlines()
    assert said == again == f"localchat is linked at {bin_dir / 'localchat'}: a new shell runs it as `localchat`"
    assert version.startswith("localchat ")


def test_dev_says_how_to_reach_the_link_when_no_folder_of_the_path_takes_it(tmp_path):
    result = dev(tmp_path, SYSTEM_PATH)
    assert result.returncode == 0, result.stderr
    link = tmp_path / ".local" / "bin" / "localchat"
    assert link.is_symlink() and f"{link.parent} is not on your PATH: add it" in result.stderr


def test_dev_leaves_another_localchat_alone(tmp_path):
    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "localchat").write_text("#!/bin/sh\necho pipx's localchat\n")
    result = dev(tmp_path, f"{bin_dir}:{SYSTEM_PATH}")
    assert result.returncode == 0 and "is another localchat: left as it is" in result.stderr
    assert not (bin_dir / "localchat").is_symlink()


def test_dev_links_into_the_users_own_folder_whatever_else_on_the_path_is_writable(tmp_path):
    """As pipx does: ~/.local/bin, never another folder of the PATH (~/bin, or /usr/local/bin for root: a link there
    is machine-wide), and how to put ~/.local/bin on the PATH when it is not."""
    other = tmp_path / "bin"
    other.mkdir()
    system_link = Path("/usr/local/bin/localchat")
    existed = system_link.exists() or system_link.is_symlink()
    result = dev(tmp_path, f"{other}:/usr/local/bin:{SYSTEM_PATH}")
    assert result.returncode == 0, result.stderr
    link = tmp_path / ".local" / "bin" / "localchat"
    assert os.readlink(link) == str(ROOT / ".venv" / "bin" / "localchat")
    assert not (other / "localchat").exists() and (system_link.exists() or system_link.is_symlink()) == existed
    assert f"{link.parent} is not on your PATH: add it, e.g. echo 'export PATH=\"{link.parent}:$PATH\"'" in (
        result.stderr)
