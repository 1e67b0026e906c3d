"""The one table of sampling defaults. A reply samples with its request's values; where the request names none, with the
values the model's authors recommend (engine/loading/recommended_sampling.py: its file's own, else its family's), and
where they name none either, with localchat's below (llama.cpp's own defaults). Every API applies the result through
app/server/sampling.py; the engine says it (GET /health's `sampling`, /v1/models, /api/show) and the UIs show it."""

from localchat.app.protocol.sampling import SamplingDefaults
from localchat.engine.loading.recommended_sampling import RecommendedSampling

LOCALCHAT_DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.0,
                      "presence_penalty": 0.0, "frequency_penalty": 0.0}
LOCALCHAT_SOURCE = "localchat's defaults"
# a fork exists to show different replies: its replies sample at least this hot (or at the model's recommended
# temperature, where that is higher), unless the fork's request sets a temperature of its own
FORK_MIN_TEMPERATURE = 0.7


def sampling_defaults(recommended: RecommendedSampling | None) -> SamplingDefaults:
    """The values in effect for a model that recommends these (None: it recommends nothing localchat knows)."""
    values = LOCALCHAT_DEFAULTS | (recommended.values() if recommended else {})
    source = recommended.source if recommended else LOCALCHAT_SOURCE
    if recommended and set(LOCALCHAT_DEFAULTS) - set(recommended.values()):
        source += f", the rest {LOCALCHAT_SOURCE}"
    return SamplingDefaults(**values, source=source,
                            fork_temperature=max(values["temperature"], FORK_MIN_TEMPERATURE))


UNKNOWN_MODEL = sampling_defaults(None)  # a model whose recommendations are not known (a remote engine's)
