"""A new chat's defaults by the model's size (app/chat_defaults.py)."""

from localchat.app.chat_defaults import SMALL_MODEL_PARAMETERS, SMALL_MODEL_TEMPERATURE, chat_defaults
from localchat.app.protocol.conversations import SAMPLING_FIELDS
from localchat.app.sampling_defaults import LOCALCHAT_DEFAULTS, UNKNOWN_MODEL, sampling_defaults
from localchat.engine.loading.model_catalog import EMBEDDED_NAME, chosen_model
from localchat.engine.loading.recommended_sampling import RecommendedSampling

SMOLLM2 = sampling_defaults(RecommendedSampling("SmolLM2's model card", temperature=0.2, top_p=0.9))


def settings_values(defaults) -> dict:
    return {name: getattr(defaults.settings, name) for name in SAMPLING_FIELDS}


def test_a_small_model_gets_a_short_system_prompt_and_a_low_temperature_where_its_authors_say_none():
    small = chat_defaults(SMALL_MODEL_PARAMETERS - 1, UNKNOWN_MODEL)
    assert small.small_model and small.system_prompt and small.settings.temperature == SMALL_MODEL_TEMPERATURE
    assert small.settings.temperature < LOCALCHAT_DEFAULTS["temperature"]
    recommended = chat_defaults(SMALL_MODEL_PARAMETERS - 1, SMOLLM2)
    assert settings_values(recommended) == LOCALCHAT_DEFAULTS | {"temperature": 0.2, "top_p": 0.9}
    assert recommended.sampling == SMOLLM2 and recommended.system_prompt == small.system_prompt
    for parameters in (SMALL_MODEL_PARAMETERS, 8 * 10**9, None):  # a larger model, or one whose size is not known
        usual = chat_defaults(parameters, SMOLLM2)
        assert (usual.small_model, usual.system_prompt) == (False, "")
        assert settings_values(usual) == LOCALCHAT_DEFAULTS | {"temperature": 0.2, "top_p": 0.9}


def test_a_fork_samples_at_least_at_the_fork_temperature():
    assert SMOLLM2.fork_temperature == 0.7 and SMOLLM2.source == "SmolLM2's model card, the rest localchat's defaults"
    gemma = sampling_defaults(RecommendedSampling("Gemma 3's", temperature=1.0, top_p=0.95, top_k=64, min_p=0.0))
    assert gemma.fork_temperature == 1.0


def test_the_embedded_model_is_found_by_its_name_and_by_default():
    embedded = chosen_model(None)
    assert embedded is not None and embedded.name == EMBEDDED_NAME and chosen_model(EMBEDDED_NAME) == embedded
    assert 100e6 < embedded.parameters < 200e6  # SmolLM2-135M
    assert chosen_model(str(embedded.path)).parameters == embedded.parameters  # by its path, as --model names it
    assert chosen_model("/no/such/model.gguf") is None
