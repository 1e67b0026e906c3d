"""What `localchat serve` keeps on disk, against real processes: anything that is not a KV block file in the disk
tier's folder (a folder, a FIFO, a file it cannot read) is a bad block like any other and the engine serves on,
restart after restart; and every file and folder it writes is the user's alone under a 022 umask."""

import os
import stat
import subprocess

import pytest
from base_models import BASE_LLAMA, base_model_file

from support import Server, make_home, second_model_dir, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

CHAT = "/v1/chat/completions"
QUESTION = {"messages": [{"role": "user", "content": "Explain how a paged KV cache works. " * 8}], "max_tokens": 12,
            "temperature": 0}
# root reads any file whatever its mode: the server runs without that power, so that mode 000 means unreadable
WITHOUT_ROOT_POWERS = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                        "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else [])


def start(server: Server, umask: int | None = None) -> Server:
    with open(server.log, "ab") as log:
        server.process = subprocess.Popen(
            WITHOUT_ROOT_POWERS + server.command("serve", "--port", str(server.port), *server.args), env=server.env,
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=None if umask is None else lambda: os.umask(umask))
    return server.wait_ready()


def block_files(home) -> list:
    return sorted((home / "cache" / "kv").rglob("*.kv"))


def plant(path, kind: str) -> None:
    """Put something that is not a block file where a block file is."""
    if kind == "unreadable":  # and, for root, who reads it anyway, not a block file's bytes
        path.write_bytes(b"not a block")
        path.chmod(0o000)
        return
    path.unlink()
    if kind == "folder":
        path.mkdir()
        (path / "inside").write_text("a file in it")
    else:
        os.mkfifo(path)  # an open() that waits for a writer would stop the engine


def test_things_in_the_disk_tier_never_stop_the_engine(tmp_path):
    """A folder, a FIFO and an unreadable file in place of a chat's block files: the restarted engine serves the same
    reply (the first block, unreadable, fails its check when read: the chat is computed, and its blocks written
    again), the start removes the folders and the FIFOs, and the tier stays on. Each kind mid-run:
    tests/engine/core/test_kv_disk_tier.py."""
    home = make_home(tmp_path / "home")
    server = Server(home, args=["--kv-blocks", "256"])
    try:
        with start(server).client() as api:
            expected = api.post(CHAT, json=QUESTION).json()["choices"][0]["message"]["content"]
            assert server.wait_idle()
        server.stop()  # the tier's last writes are done
        files = sorted(block_files(home), key=lambda p: p.stat().st_mtime_ns)  # written in the chat's order
        assert len(files) >= 8
        for path, kind in zip(files, ["unreadable", "folder", "fifo", "folder", "fifo"]):
            plant(path, kind)
        planted_at = files[0].stat().st_mtime_ns
        with start(server).client() as api:
            reply = api.post(CHAT, json=QUESTION)
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == expected
            assert api.get("/health").json()["status"] == "ready"
            assert server.metrics()["localchat_kv_disk_enabled"] == 1
        server.stop()
        tier = home / "cache" / "kv"
        assert not [p for p in tier.rglob("*") if p.parent != tier and not stat.S_ISREG(p.lstat().st_mode)]
        # read, failed, removed, and written again whole; or never read, where a block before it in the chain (the
        # files' times give the order the writers finished in, not the chain's) was a folder or a FIFO
        unreadable = files[0].stat()
        assert stat.S_IMODE(unreadable.st_mode) == 0o600 or unreadable.st_atime_ns <= planted_at
        log = server.log.read_text()
        assert "not block files" in log and "Traceback" not in log
    finally:
        server.stop()


def test_every_file_the_engine_writes_is_private_under_a_022_umask(tmp_path):
    """Its own home, not sharing the test session's model cache: the model cache is written here too (a base model's
    file, converted on its first start), and the KV blocks, and the remembered choice of model."""
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    os.chmod(home / "cache", 0o755)  # as a cache folder made by something else would be: fixed on start
    models = second_model_dir(tmp_path / "models")
    server = Server(home, args=["--kv-blocks", "64", "--model", str(base_model_file(BASE_LLAMA))],
                    env={"LOCALCHAT_MODEL_DIRS": str(models)})
    try:
        with start(server, umask=0o022).client() as api:
            api.post("/v1/completions", json={"prompt": "Once upon a time " * 8, "max_tokens": 4})
            switched = api.post("/api/models/current", json={"model": str(models / "tiny-llama")})
            assert switched.status_code == 202, (switched.text, api.get("/api/models").text)
            server.wait_ready()
            cid = api.post("/api/conversations", json={}).json()["id"]
            stream_api(api, f"/api/conversations/{cid}/messages",
                       {"content": "Hi " * 40, "settings": {"max_tokens": 2}})
            server.wait_idle()
        server.stop()
        written = [p for p in home.rglob("*") if p != server.log]  # the log is the test's own file
        assert (home / "data" / "model").is_file() and block_files(home)
        assert list((home / "cache" / "models").rglob("*.safetensors"))  # the base model's converted weights
        wrong = {str(p.relative_to(home)): oct(stat.S_IMODE(p.stat().st_mode)) for p in written
                 if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)}
        assert not wrong
    finally:
        server.stop()
