"""`localchat pull REPO [FILE]` against a fake Hugging Face Hub on 127.0.0.1 (tests/fake_hub.py), never the network
(issue 56): a download that `localchat models` then lists, an interrupted one that goes on where it stopped (a
Range request), a corrupted one refused, and a clear line for each thing a user can get wrong."""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_hub import FakeHub, HubFile, HubRepo, tiny_gguf

REPO, FILE = "tiny-org/tiny-GGUF", "tiny.Q4_K_M.gguf"
MB = 2**20


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory) -> bytes:
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / FILE, megabytes=3)


@pytest.fixture
def hub(gguf_bytes):
    with FakeHub() as hub:
        hub.repos[REPO] = HubRepo({FILE: HubFile(gguf_bytes), "README.md": HubFile(b"# tiny\n", lfs=False)})
        hub.repos["tiny-org/tiny-safetensors"] = HubRepo({"model.safetensors": HubFile(b"\0" * 64),
                                                          "config.json": HubFile(b"{}", lfs=False)})
        hub.repos["tiny-org/gated-GGUF"] = HubRepo({FILE: HubFile(gguf_bytes)}, gated=True)
        hub.repos["tiny-org/many-GGUF"] = HubRepo({"m.Q8_0.gguf": HubFile(gguf_bytes[:4096]),
                                                   "m.Q4_K_M.gguf": HubFile(gguf_bytes)})
        yield hub


@pytest.fixture
def env(hub, tmp_path) -> dict[str, str]:
    """The pull's environment: the fake Hub, a cache of its own, online, no token."""
    variables = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME")}
    return {**variables, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}


def localchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localchat.app.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def blobs(env: dict[str, str], repo: str = REPO) -> list[Path]:
    folder = Path(env["HF_HUB_CACHE"]) / f"models--{repo.replace('/', '--')}" / "blobs"
    return sorted(folder.glob("*")) if folder.is_dir() else []


def test_a_pull_downloads_the_file_checks_it_and_models_lists_it(env, hub, gguf_bytes):
    pulled = localchat(env, "pull", REPO)
    assert pulled.returncode == 0, pulled.stderr
    path = Path(pulled.stdout.strip())
    assert path.name == FILE and path.read_bytes() == gguf_bytes
    assert "100%" in pulled.stderr and "3.00M/3.00M" in pulled.stderr  # the progress bar, to its end
    assert f"checking {FILE} against its checksum" in pulled.stderr
    assert [r.range for r in hub.downloads(FILE)] == [None]  # one request for the bytes, from the start
    assert [b.name for b in blobs(env)] == [hashlib.sha256(gguf_bytes).hexdigest()]  # the cache's blob, by etag

    listed = localchat(env, "models")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split() for line in listed.stdout.splitlines() if line.startswith(str(path))]
    assert row[1:3] == ["llama", "F32"] and row[-1] == "hf-cache"

    again = localchat(env, "pull", REPO, FILE)  # already here: nothing is downloaded again
    assert again.returncode == 0 and Path(again.stdout.strip()) == path
    assert len(hub.downloads(FILE)) == 1


def test_an_interrupted_pull_goes_on_where_it_stopped(env, hub, gguf_bytes):
    file = hub.repos[REPO].files[FILE]
    file.stall_after = 1 * MB  # the Hub sends a megabyte, then nothing: the user presses Ctrl+C
    # a stall longer than a loaded machine's wait for the Ctrl+C: huggingface_hub's read timeout (10 s) would
    # otherwise retry from where it stopped and finish before the interrupt comes
    pulling = subprocess.Popen([sys.executable, "-m", "localchat.app.cli", "pull", REPO],
                               env={**env, "HF_HUB_DOWNLOAD_TIMEOUT": "120"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = None
    deadline = time.monotonic() + 60
    while partial is None or partial.stat().st_size < MB:
        assert pulling.poll() is None and time.monotonic() < deadline, "the pull did not get its first megabyte"
        partial = next((b for b in blobs(env) if b.name.endswith(".part")), None)
        time.sleep(0.05)
    pulling.send_signal(signal.SIGINT)
    assert pulling.wait(60) == 130
    assert partial.stat().st_size == MB and not [b for b in blobs(env) if not b.name.endswith(".part")]

    file.stall_after = None
    file.released.set()
    resumed = localchat(env, "pull", REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert f"going on from {MB:,} bytes an earlier pull left" in resumed.stderr
    assert [r.range for r in hub.downloads(FILE)] == [None, f"bytes={MB}-"]  # the rest, by a Range request
    assert Path(resumed.stdout.strip()).read_bytes() == gguf_bytes  # and whole: its SHA-256 checked


def test_a_connection_lost_midway_goes_on_in_the_same_pull(env, hub, gguf_bytes):
    hub.repos[REPO].files[FILE].drop_after = 2 * MB  # the connection closes once, two megabytes in
    pulled = localchat(env, "pull", REPO)
    assert pulled.returncode == 0, pulled.stderr
    assert [r.range for r in hub.downloads(FILE)] == [None, f"bytes={2 * MB}-"]
    assert Path(pulled.stdout.strip()).read_bytes() == gguf_bytes


def test_a_corrupted_download_is_refused_and_deleted(env, hub):
    hub.repos[REPO].files[FILE].corrupt = True  # one byte changed on the way
    pulled = localchat(env, "pull", REPO)
    assert pulled.returncode == 1 and "Traceback" not in pulled.stderr
    assert pulled.stderr.splitlines()[-1].startswith("localchat: the file downloaded does not match its checksum "
                                                     "(sha256 ")
    assert "it was deleted; pull it again" in pulled.stderr
    assert blobs(env) == [] and not list(Path(env["HF_HUB_CACHE"]).rglob("*.gguf"))
    assert REPO.split("/")[1] not in localchat(env, "models").stdout


@pytest.mark.parametrize("args, changes, says", [
    (["tiny-org/tiny-safetensors"], {}, "tiny-org/tiny-safetensors has no GGUF file"),
    (["tiny-org/gated-GGUF"], {}, "tiny-org/gated-GGUF is gated: accept its conditions on"),
    (["tiny-org/gated-GGUF"], {"HF_TOKEN": "hf_not_accepted"}, "tiny-org/gated-GGUF is gated"),
    (["tiny-org/nothing-here"], {}, "no model tiny-org/nothing-here on http://127.0.0.1:"),
    ([REPO, "other.gguf"], {}, f"{REPO} has no GGUF file other.gguf; it has {FILE}"),
    (["not a repo"], {}, "“not a repo” is not a model's name on the Hub: OWNER/NAME"),
    ([REPO], {"HF_ENDPOINT": "http://127.0.0.1:9"}, "could not reach http://127.0.0.1:9 (ConnectError"),
    ([REPO], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
])
def test_each_thing_a_user_can_get_wrong_gets_a_line_that_says_what_to_do(env, hub, args, changes, says):
    pulled = localchat({**env, **changes}, "pull", *args)
    assert pulled.returncode == 1 and "Traceback" not in pulled.stderr
    (line,) = pulled.stderr.strip().splitlines()
    assert line.startswith(f"localchat: {says}"), line
    assert not list(Path(env["HF_HUB_CACHE"]).rglob("*.gguf"))


def test_of_several_files_the_q4_k_m_is_taken_unless_one_is_named(env, hub, gguf_bytes):
    pulled = localchat(env, "pull", "tiny-org/many-GGUF")
    assert pulled.returncode == 0 and Path(pulled.stdout).name.strip() == "m.Q4_K_M.gguf"
    named = localchat(env, "pull", "tiny-org/many-GGUF", "m.Q8_0.gguf")
    assert named.returncode == 0 and Path(named.stdout.strip()).read_bytes() == gguf_bytes[:4096]


def follow(api, until: str = "done|failed") -> dict:
    """The pull the API started, once it ends (or reaches the state `until` names)."""
    deadline = time.monotonic() + 60
    while (pull := api.get("/api/models/pull").json())["state"] not in until.split("|"):
        assert time.monotonic() < deadline, pull
        time.sleep(0.05)
    return pull


@pytest.mark.slow  # a real `localchat serve`
def test_the_api_pulls_one_model_at_a_time_and_lists_it(hub_server, fake_hub, gguf_bytes):
    fake_hub.repos["api-org/tiny-GGUF"] = HubRepo({FILE: HubFile(gguf_bytes, stall_after=MB)})
    fake_hub.repos["api-org/gated-GGUF"] = HubRepo({FILE: HubFile(gguf_bytes)}, gated=True)
    with hub_server.client() as api:
        started = api.post("/api/models/pull", json={"repo": "api-org/tiny-GGUF"})
        assert started.status_code == 202 and started.json()["repo"] == "api-org/tiny-GGUF"
        pulling = follow(api, "downloading")
        while pulling["bytes_done"] < MB:
            pulling = api.get("/api/models/pull").json()
        assert (pulling["file"], pulling["bytes_done"], pulling["bytes_total"]) == (FILE, MB, len(gguf_bytes))
        refused = api.post("/api/models/pull", json={"repo": "api-org/gated-GGUF"})
        assert refused.status_code == 409 and "one pull at a time" in refused.json()["error"]["message"]
        fake_hub.repos["api-org/tiny-GGUF"].files[FILE].stall_after = None
        fake_hub.repos["api-org/tiny-GGUF"].files[FILE].released.set()
        # the stalled connection ends; the pull goes on from its megabyte
        done = follow(api)
        assert done["state"] == "done" and Path(done["model"]).read_bytes() == gguf_bytes
        assert [r.range for r in fake_hub.requests if r.method == "GET" and "api-org/tiny-GGUF/resolve" in r.path
                ] == [None, f"bytes={MB}-"]
        assert Path(done["model"]).is_relative_to(hub_server.hub_cache)
        listed = {m["name"]: m for m in api.get("/api/models").json()["models"]}
        assert (listed[done["model"]]["source"], listed[done["model"]]["architecture"]) == ("hf-cache", "llama")

        assert api.post("/api/models/pull", json={"repo": "api-org/gated-GGUF"}).status_code == 202
        failed = follow(api)
        assert failed["state"] == "failed" and failed["error"].startswith("api-org/gated-GGUF is gated")
        bad = api.post("/api/models/pull", json={"repo": "no repo"})
        assert bad.status_code == 400 and "is not a model's name on the Hub" in bad.json()["error"]["message"]
