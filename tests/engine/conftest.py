"""Session fixtures shared by the engine tests."""

import fcntl
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_model
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from localchat.engine.loading.loader import embedded_gguf_path, resolve_model
from support import SESSION_HOME

__all__ = ["embedded_gguf_path"]


@pytest.fixture(scope="module")
def tokenizer():
    """The embedded model's tokenizer (tiny random models of other architectures borrow it)."""
    return resolve_model(None).tokenizer


@pytest.fixture(scope="session")
def hf_smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The embedded SmolLM2 GGUF loaded by transformers in float32 (eval mode) and its tokenizer: the reference.

    transformers' GGUF loader takes ~18 s, and each test worker needs the model: the first one to load it saves
    what it loaded (float32 safetensors, bit for bit, and the tokenizer) in the kept test cache, keyed by the
    file's size and time, and the others read that in about a second."""
    path = embedded_gguf_path()
    stat = path.stat()
    references = SESSION_HOME / "cache" / "test-references"  # the session's: a test may have a home of its own
    references.mkdir(parents=True, exist_ok=True)
    folder = references / f"transformers-{path.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker converts while the others wait for its result
        if not (folder / "model.safetensors").is_file():
            _save_transformers_copy(path, folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder)


def _save_transformers_copy(path: Path, folder: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        del model.config.quantization_config  # the weights are plain float32 now
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))  # last: its presence marks a complete copy
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
