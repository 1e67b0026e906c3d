"""Session fixtures shared by the engine tests."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from localchat.engine.loader import embedded_gguf_path

__all__ = ["embedded_gguf_path"]


@pytest.fixture(scope="session")
def hf_smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The embedded SmolLM2 GGUF loaded by transformers in float32 (eval mode) and its tokenizer: the reference."""
    path = embedded_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model.eval(), tokenizer
