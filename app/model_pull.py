"""A GGUF model from the Hugging Face Hub: `localchat pull REPO [FILE]`, and the model lists of both UIs (through
/api/models/pull). The file goes into huggingface_hub's cache (HF_HUB_CACHE or HF_HOME; HF_ENDPOINT and the token of
`hf auth login` or HF_TOKEN are honoured), where `localchat models` finds it.

huggingface_hub reads the repo's files and each file's etag, size and address, and links the file into the cache's
snapshot of the repo; it does not keep a partial download, nor check what it received against the file's checksum.
So the bytes come in here, through its HTTP session: into `<blob>.part` beside the cache's blobs, which a pull run
again goes on from (a Range request); then the file is checked against its SHA-256 (an LFS file's; a git blob's
SHA-1 for a small file) and its size, and a file that does not match is deleted.
"""

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import httpx2  # huggingface_hub's HTTP client (its get_session())
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status, validate_repo_id

from localchat.app.protocol.models import ModelPull

PREFERRED_QUANTIZATION = "Q4_K_M"  # the file taken from a repo of several where none is named (as Ollama's default)
FILES_NAMED = 8  # in an error that lists a repo's GGUF files
SPLIT_FILE = re.compile(r"-\d{5}-of-\d{5}\.gguf$")  # one part of a model split in several files
TRIES = 5  # a connection lost while the bytes come in: this many times in all, each from where the last stopped
CHUNK_BYTES = 1 << 20  # of the check's reads

Progress = Callable[[ModelPull], None]


class PullError(Exception):
    """What went wrong, in a sentence for the user."""


def pull_model(repo: str, file: str | None = None, progress: Progress = lambda pulled: None) -> Path:
    """Download `file` (a GGUF file of the model repo `repo`; None: its only one, or its Q4_K_M) into the cache,
    going on from a partial download, checked against its checksum; the file in the cache's snapshot (what `--model`
    and the model lists take). progress(state) hears each change of the pull's state (one ModelPull, updated).
    PullError for what the user can act on."""
    state = ModelPull(repo=repo)
    try:
        return _pull(state, file, progress)
    except PullError:
        raise
    except Exception as error:  # the Hub's answers and the network's failures, in words
        raise PullError(_explained(error, repo, file)) from None


def check_repo(repo: str) -> None:
    """A PullError unless `repo` reads as a model repo's id on the Hub, OWNER/NAME."""
    try:
        validate_repo_id(repo)
        valid = repo.count("/") == 1
    except HFValidationError:
        valid = False
    if not valid:
        raise PullError(f"“{repo}” is not a model's name on the Hub: OWNER/NAME, as "
                        "bartowski/Qwen2.5-0.5B-Instruct-GGUF")


def _pull(state: ModelPull, file: str | None, progress: Progress) -> Path:
    repo = state.repo
    check_repo(repo)
    info = HfApi().model_info(repo, files_metadata=True)
    sibling = _chosen(repo, [s for s in info.siblings or [] if s.rfilename.endswith(".gguf")], file)
    url = hf_hub_url(repo, sibling.rfilename, revision=info.sha)
    metadata = get_hf_file_metadata(url)
    state.file, state.bytes_total = sibling.rfilename, metadata.size if metadata.size is not None else sibling.size
    blob = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model") / "blobs" / metadata.etag
    if not blob.is_file():
        partial = blob.with_name(blob.name + ".part")
        _download(state, metadata.location, url, partial, progress)
        state.state = "checking"
        progress(state)
        sha256 = sibling.lfs.sha256 if sibling.lfs else metadata.etag if _is_sha256(metadata.etag) else None
        _check(partial, sha256, metadata.etag, state.bytes_total)
        os.replace(partial, blob)
    path = Path(hf_hub_download(repo, sibling.rfilename))  # links the blob into the snapshot that refs/main names
    state.state, state.bytes_done, state.model = "done", state.bytes_total or blob.stat().st_size, str(path)
    progress(state)
    return path


def _chosen(repo: str, ggufs: list, file: str | None):
    """The GGUF file to pull: the one named, else the repo's only one, else its Q4_K_M."""
    names = [s.rfilename for s in ggufs]
    listed = ", ".join(names[:FILES_NAMED]) + (f" and {len(names) - FILES_NAMED} more" if len(names) > FILES_NAMED
                                               else "")
    if not ggufs:
        raise PullError(f"{repo} has no GGUF file: localchat pulls GGUF files, which repos named …-GGUF hold")
    if file is not None:
        chosen = next((s for s in ggufs if file in (s.rfilename, s.rfilename.rsplit("/", 1)[-1])), None)
        if chosen is None:
            raise PullError(f"{repo} has no GGUF file {file}; it has {listed}")
    elif len(ggufs) == 1:
        chosen = ggufs[0]
    else:
        preferred = [s for s in ggufs if PREFERRED_QUANTIZATION.lower() in s.rfilename.lower()]
        if len(preferred) != 1:
            raise PullError(f"{repo} has {len(ggufs)} GGUF files: name one (localchat pull {repo} FILE): {listed}")
        chosen = preferred[0]
    if SPLIT_FILE.search(chosen.rfilename):
        raise PullError(f"{chosen.rfilename} is one part of a model split in several files, which localchat does not "
                        "join: choose a file that holds the whole model")
    return chosen


def _download(state: ModelPull, location: str, url: str, partial: Path, progress: Progress) -> None:
    """The file's bytes into `partial`, from where an earlier pull stopped (state.resumed_from: what it had), going
    on again where the connection is lost meanwhile."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.is_file() else 0
    if state.bytes_total is not None and have > state.bytes_total:  # not the start of this file: from the beginning
        partial.unlink()
        have = 0
    state.state, state.resumed_from, state.bytes_done = "downloading", have, have
    progress(state)
    if have == state.bytes_total:  # all of it came before the pull was stopped: to the check
        return
    headers = build_hf_headers()
    if urlparse(location).netloc != urlparse(url).netloc:  # a CDN's signed address: the token is not for it
        headers.pop("authorization", None)
    for attempt in range(TRIES):
        try:
            _fetch(state, location, headers, partial, progress)
            return
        except httpx2.TransportError:
            if attempt == TRIES - 1:
                raise


def _fetch(state: ModelPull, location: str, headers: dict, partial: Path, progress: Progress) -> None:
    """The bytes from the partial file's end on (a Range request), appended to it as they come."""
    have = partial.stat().st_size if partial.is_file() else 0
    ranged = {**headers, "Range": f"bytes={have}-"} if have else headers
    with get_session().stream("GET", location, headers=ranged, follow_redirects=True,
                              timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        hf_raise_for_status(response)
        with open(partial, "ab" if response.status_code == 206 else "wb") as out:  # 200: the server sent it all
            state.bytes_done = have if response.status_code == 206 else 0
            for chunk in response.iter_bytes():
                out.write(chunk)
                state.bytes_done += len(chunk)
                progress(state)


def _check(partial: Path, sha256: str | None, etag: str, size: int | None) -> None:
    """The downloaded file against its checksum and its size; a file that does not match is deleted."""
    received = partial.stat().st_size
    if sha256 is not None:
        expected, digest = sha256, hashlib.sha256()
    else:  # a small file kept in git: its etag is its git blob's SHA-1
        expected, digest = etag, hashlib.sha1(f"blob {received}\0".encode())
    with open(partial, "rb") as data:
        while chunk := data.read(CHUNK_BYTES):
            digest.update(chunk)
    if digest.hexdigest() != expected or (size is not None and received != size):
        partial.unlink()
        raise PullError(f"the file downloaded does not match its checksum ({digest.name} {expected[:12]}… expected, "
                        f"{digest.hexdigest()[:12]}… received, {received:,} of {size or received:,} bytes): it was "
                        "deleted; pull it again")


def _is_sha256(etag: str | None) -> bool:
    return bool(etag and re.fullmatch(r"[0-9a-f]{64}", etag))


def _explained(error: Exception, repo: str, file: str | None) -> str:
    """An error of huggingface_hub or of the network, as a sentence that says what to do."""
    endpoint = constants.ENDPOINT
    if isinstance(error, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set (or TRANSFORMERS_OFFLINE): unset it to download models"
    if isinstance(error, GatedRepoError):
        return (f"{repo} is gated: accept its conditions on {endpoint}/{repo} while logged in, then log in here "
                "(`hf auth login`, or set HF_TOKEN)")
    if isinstance(error, RepositoryNotFoundError):
        return (f"no model {repo} on {endpoint}, or it is private: check the name (OWNER/NAME), or log in "
                "(`hf auth login`, or set HF_TOKEN)")
    if isinstance(error, RevisionNotFoundError | EntryNotFoundError):
        return f"{repo} has no file {file} on {endpoint}"
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        if status in (401, 403):
            return f"{endpoint} refused {repo} ({status}): log in (`hf auth login`, or set HF_TOKEN) with access to it"
        return f"{endpoint} answered {status} for {repo}: try again later"
    if isinstance(error, httpx2.TransportError):
        return (f"could not reach {endpoint} ({type(error).__name__}: {error}): is the network up? (HF_ENDPOINT sets "
                "another address)")
    if isinstance(error, OSError) and error.filename:
        return f"could not write {error.filename}: {error.strerror}"
    return f"the download failed: {type(error).__name__}: {error}"
