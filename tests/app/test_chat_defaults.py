"""A new chat's defaults by the model's size (app/chat_defaults.py)."""

from localchat.app.chat_defaults import SMALL_MODEL_PARAMETERS, SMALL_MODEL_TEMPERATURE, chat_defaults
from localchat.app.protocol.conversations import SamplingSettings
from localchat.engine.model_catalog import EMBEDDED_NAME, chosen_model


def test_a_small_model_gets_a_lower_temperature_and_a_short_system_prompt():
    small = chat_defaults(SMALL_MODEL_PARAMETERS - 1)
    assert small.small_model and small.system_prompt and small.settings.temperature == SMALL_MODEL_TEMPERATURE
    assert small.settings.temperature < SamplingSettings().temperature
    for parameters in (SMALL_MODEL_PARAMETERS, 8 * 10**9, None):  # a larger model, or one whose size is not known
        usual = chat_defaults(parameters)
        assert (usual.small_model, usual.system_prompt, usual.settings) == (False, "", SamplingSettings())


def test_the_embedded_model_is_found_by_its_name_and_by_default():
    embedded = chosen_model(None)
    assert embedded is not None and embedded.name == EMBEDDED_NAME and chosen_model(EMBEDDED_NAME) == embedded
    assert 100e6 < embedded.parameters < 200e6  # SmolLM2-135M
    assert chosen_model(str(embedded.path)).parameters == embedded.parameters  # by its path, as --model names it
    assert chosen_model("/no/such/model.gguf") is None
