"""packaging/check_wheel.py from the test suite, so that CI builds, installs and uses the wheel."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a wheel build and a fresh venv: left out of `./dev test --fast`

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_into_a_fresh_venv_and_works():
    result = subprocess.run([sys.executable, ROOT / "packaging" / "check_wheel.py"], capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("packaging check passed")
    for check in ("localchat --version: localchat ", "localchat chat 'Say hello'", "localchat serve answers /health",
                  "the wheel holds only the localchat package", "licence in the metadata: MIT",
                  "what the wheel requires is installed", "the installed packages import from the new venv"):
        assert f"ok   {check}" in result.stdout, check
