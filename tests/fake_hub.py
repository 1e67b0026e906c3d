"""A stand-in for the Hugging Face Hub on 127.0.0.1, for the tests of `localchat pull` (never the network): the few
endpoints huggingface_hub calls, answered as the Hub answers them.

    GET  /api/models/OWNER/NAME[/revision/REV]     model info: sha, gated, siblings (size, blobId, lfs.sha256)
    HEAD /OWNER/NAME/resolve/REV/FILE              X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size
    GET  /OWNER/NAME/resolve/REV/FILE              the bytes; a Range request gets 206 and Content-Range

A repo unknown is a 401 RepoNotFound, a gated one's files a 401 (no token) or 403 GatedRepo, as the Hub's. A file can
be served wrong on purpose: `stall_after` bytes then nothing (a pull to interrupt), `drop_after` bytes then a closed
connection (once), or `corrupt` (a byte changed, the headers those of the real file). Every request is recorded."""

import hashlib
import http.server
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class HubFile:
    data: bytes
    lfs: bool = True  # stored with git LFS (a GGUF is): its etag is its SHA-256
    stall_after: int | None = None
    drop_after: int | None = None
    corrupt: bool = False
    released: threading.Event = field(default_factory=threading.Event)  # ends a stall

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(f"blob {len(self.data)}\0".encode() + self.data).hexdigest()


@dataclass
class HubRepo:
    files: dict[str, HubFile]
    gated: bool = False


@dataclass
class Served:
    method: str
    path: str
    range: str | None
    authorization: str | None


class FakeHub:
    def __init__(self):
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[Served] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.hub = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for repo in self.repos.values():
            for file in repo.files.values():
                file.released.set()
        self.server.shutdown()
        self.server.server_close()

    def downloads(self, name: str) -> list[Served]:
        """The GETs of a file's bytes."""
        return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path and r.path.endswith(name)]


def tiny_gguf(path: Path, megabytes: float = 3.0) -> bytes:
    """A GGUF file of a llama-shaped header and one float32 tensor (random, seeded) of about `megabytes`; its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny-pulled")
    rows = int(megabytes * 2**20 / 4 / 256)
    writer.add_tensor("token_embd.weight", np.random.default_rng(0).standard_normal((rows, 256), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/[^/?]+)?(?:\?.*)?$")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/[^/]+/(?P<file>[^?]+)")


class Handler(http.server.BaseHTTPRequestHandler):
    """The fake Hub's answers (the server's `hub` holds its repos and records the requests)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.answer(send_body=True)

    def do_HEAD(self) -> None:
        self.answer(send_body=False)

    def answer(self, send_body: bool) -> None:
        self.server.hub.requests.append(Served(self.command, self.path, self.headers.get("Range"),
                                               self.headers.get("Authorization")))
        if info := INFO.match(self.path):
            self.model_info(info["repo"])
        elif resolve := RESOLVE.match(self.path):
            self.resolve(resolve["repo"], resolve["file"], send_body)
        else:
            self.error(404, "RepoNotFound", "not an endpoint of this fake Hub")

    def error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def model_info(self, repo_id: str) -> None:
        repo = self.server.hub.repos.get(repo_id)
        if repo is None:
            self.error(401, "RepoNotFound", "Repository not found")
            return
        siblings = [{"rfilename": name, "size": len(f.data), "blobId": f.git_sha1,
                     **({"lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}} if f.lfs else {})}
                    for name, f in repo.files.items()]
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": COMMIT, "private": False,
                           "gated": "manual" if repo.gated else False, "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def resolve(self, repo_id: str, name: str, send_body: bool) -> None:
        repo = self.server.hub.repos.get(repo_id)
        if repo is None:
            self.error(401, "RepoNotFound", "Repository not found")
            return
        if repo.gated:
            authorized = self.headers.get("Authorization") is not None
            self.error(403 if authorized else 401, "GatedRepo", f"Access to model {repo_id} is restricted")
            return
        file = repo.files.get(name)
        if file is None:
            self.error(404, "EntryNotFound", f"{name} does not exist")
            return
        start = int(m[1]) if (m := re.match(r"bytes=(\d+)-", self.headers.get("Range") or "")) else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{file.git_sha1}"')
        if file.lfs:
            self.send_header("X-Linked-Etag", f'"{file.sha256}"')
            self.send_header("X-Linked-Size", str(len(file.data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(file.data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(file.data) - 1}/{len(file.data)}")
        self.end_headers()
        if send_body:
            self.send_bytes(file, start)

    def send_bytes(self, file: HubFile, start: int) -> None:
        data = bytearray(file.data)
        if file.corrupt:
            data[len(data) // 2] ^= 0xFF
        end = len(data)
        if file.stall_after is not None and start < file.stall_after:
            end = file.stall_after
        if file.drop_after is not None and start < file.drop_after:
            end, file.drop_after = file.drop_after, None
        self.wfile.write(bytes(data[start:end]))
        self.wfile.flush()
        if end < len(data):
            if file.stall_after is not None and end == file.stall_after:
                file.released.wait(60)  # the client is stopped meanwhile
            self.close_connection = True
