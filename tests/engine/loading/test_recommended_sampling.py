"""The sampling values a model's authors recommend, where localchat finds them (engine/loading/recommended_sampling.py):
a GGUF's general.sampling.*, a folder's generation_config.json, else the family's published values."""

import json

import gguf
import numpy as np

from localchat.engine.loading.model_catalog import chosen_model, model_at
from localchat.engine.loading.recommended_sampling import RecommendedSampling, from_generation_config


def write_gguf(path, architecture: str, name: str, sampling: dict[str, float]) -> None:
    """A GGUF file with a header of these values and one small tensor (the catalog reads headers only)."""
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_basename(name)
    for key, value in sampling.items():
        (writer.add_uint32 if isinstance(value, int) else writer.add_float32)(f"general.sampling.{key}", value)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()


def test_a_gguf_files_own_values_come_first(tmp_path):
    write_gguf(tmp_path / "own.gguf", "qwen3", "Qwen3", {"temp": 0.5, "top_k": 30})
    own = model_at(str(tmp_path / "own.gguf")).sampling
    assert own == RecommendedSampling("the model file", temperature=0.5, top_k=30)


def test_without_its_own_a_file_gets_its_familys_values_by_its_name(tmp_path):
    write_gguf(tmp_path / "qwen.gguf", "qwen3", "Qwen3", {})
    write_gguf(tmp_path / "llama.gguf", "llama", "Llama-3.2", {})
    write_gguf(tmp_path / "other.gguf", "llama", "Someones-Model", {})
    write_gguf(tmp_path / "phi.gguf", "phi3", "Phi-3", {})
    qwen = model_at(str(tmp_path / "qwen.gguf")).sampling
    assert (qwen.source, qwen.values()) == ("Qwen 3's model card", {"temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                                                   "min_p": 0.0})
    assert model_at(str(tmp_path / "llama.gguf")).sampling.values() == {"temperature": 0.6, "top_p": 0.9}
    assert model_at(str(tmp_path / "other.gguf")).sampling is None  # a Llama-shaped model of another's
    assert model_at(str(tmp_path / "phi.gguf")).sampling is None  # a family that publishes none here
    embedded = chosen_model(None).sampling  # SmolLM2's file names no values
    assert embedded.source == "SmolLM2's model card"


def test_a_folders_generation_config_is_read_where_it_samples(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.7,
                                                                 "top_p": 0.8, "top_k": 20, "eos_token_id": 2}))
    assert from_generation_config(tmp_path).values() == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.7}))
    assert from_generation_config(tmp_path) is None  # greedy: every fork the same; the family's values instead
    (tmp_path / "generation_config.json").write_text("not json")
    assert from_generation_config(tmp_path) is None
