"""The models the engine runs: a torch module per architecture (llama.py, gemma3.py), and what the engine knows
about each family of models (family.py, families/). Imports nothing: the catalog reads families/ without torch."""


def head_dim(config) -> int:
    """Attention head size: the config's own, else hidden_size / heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
