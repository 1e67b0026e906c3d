"""The limits of every sampling setting: the one place where the ranges live. SamplingParams checks them, the
server's wire types state them (its OpenAPI schema, its 400s quote them), and the UIs read them from the server
(GET /api/limits). Constants only, with no imports: the wire types, which the UIs load too, take them from here."""

# name -> (lowest, highest or None); every bound is inclusive
LIMITS: dict[str, tuple[float, float | None]] = {
    "n": (1, 16),
    "temperature": (0.0, 2.0),
    "top_p": (0.001, 1.0),
    "top_k": (-1, None),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (0.1, 2.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "max_tokens": (1, None),
    "logprobs": (0, 20),
    "seed": (-(2**63), 2**64 - 1),  # any signed or unsigned 64-bit value
    "thinking_token_budget": (0, None),  # tokens of a reply's thinking; 0: it answers at once
}
MIN_TEMPERATURE = 0.01  # below it (and above 0, which is greedy) the logits overflow: refused
MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 256  # characters of one stop string
