"""`localchat models`: what the catalog finds in the HF cache and in model folders, read from headers only."""

import json
import subprocess
import sys

import gguf
import huggingface_hub.constants
import numpy as np
import torch
from safetensors.torch import save_file

from localchat.engine.loading import model_catalog
from localchat.engine.loading.model_catalog import EMBEDDED_NAME, find_models


def _safetensors_model(folder, model_type, numel):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    save_file({"w": torch.zeros(numel)}, folder / "model.safetensors")


def _gguf_file(path, architecture):
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_finds_the_embedded_model_the_hf_cache_and_model_folders(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    repo = hub / "models--tiny-org--tiny-qwen"
    _safetensors_model(repo / "snapshots" / "old", "qwen2", 10)
    _safetensors_model(repo / "snapshots" / "abc", "qwen2", 1000)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    _gguf_file(hub / "models--x--y-GGUF" / "snapshots" / "1" / "y.Q4_0.gguf", "qwen3")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    extra = tmp_path / "mine"
    _safetensors_model(extra / "gpt", "gpt2", 10)
    _gguf_file(extra / "loose.gguf", "llama")
    monkeypatch.setenv(model_catalog.MODEL_DIRS_ENV, str(extra))

    found = {m.name: m for m in find_models()}
    embedded = found.pop(EMBEDDED_NAME)
    assert (embedded.source, embedded.format, embedded.architecture) == ("embedded", "gguf", "llama")
    assert embedded.size_bytes == model_catalog.embedded_gguf_path().stat().st_size > 90e6
    qwen = found.pop("tiny-org/tiny-qwen")  # refs/main's snapshot, not the older one
    assert (qwen.source, qwen.architecture, qwen.supported) == ("hf-cache", "qwen2", True)
    assert qwen.size_bytes == (repo / "snapshots" / "abc" / "model.safetensors").stat().st_size > 4000
    assert {(m.path.name, m.source, m.format, m.architecture, m.supported) for m in found.values()} == {
        ("y.Q4_0.gguf", "hf-cache", "gguf", "qwen3", True),
        ("gpt", "folder", "safetensors", "gpt2", False),
        ("loose.gguf", "folder", "gguf", "llama", True),
    }
    assert all(name == str(m.path) for name, m in found.items() if m.source == "folder")  # --model takes it


def test_a_model_named_by_a_path_outside_the_folders_is_described_and_its_header_read_once(tmp_path, monkeypatch):
    _gguf_file(tmp_path / "elsewhere" / "mine.gguf", "llama")
    _safetensors_model(tmp_path / "folder-model", "qwen2", 10)
    gguf_model = model_catalog.model_at(str(tmp_path / "elsewhere" / "mine.gguf"))
    assert (gguf_model.name, gguf_model.architecture, gguf_model.parameters) == (
        str(tmp_path / "elsewhere" / "mine.gguf"), "llama", 32)
    assert model_catalog.model_at(str(tmp_path / "folder-model")).parameters == 10
    assert model_catalog.model_at(str(tmp_path / "nothing.gguf")) is None and model_catalog.model_at("org/id") is None

    reads = []
    monkeypatch.setattr(model_catalog, "read_header", reads.append)
    model_catalog.model_at(str(tmp_path / "elsewhere" / "mine.gguf"))
    assert reads == []  # the same file, unchanged: its header is not read again


def test_the_catalog_imports_neither_torch_nor_transformers():
    code = ("import sys; from localchat.engine.loading.model_catalog import find_models; find_models(); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
