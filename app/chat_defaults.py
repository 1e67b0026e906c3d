"""What a chat starts with where its user sets nothing: the sampling settings (the model's, app/sampling_defaults.py)
and the system prompt that suit the model, by its size. The one place for them: the conversations API (a new
conversation, GET /api/conversation-defaults for the UIs) and `localchat chat` read them here.

Small models answer a newcomer's plain questions right far more often at a low temperature and told to be brief
(benchmarks/first_answers.py on the embedded 135M model, 12 questions, 8 seeded replies each: 70% right at
temperature 0.7 with the template's own system prompt, 88% at 0.3 with the short one below; greedy decoding 92%, but
then every regenerated or forked reply is the same). A small model whose authors recommend no temperature gets 0.3;
larger models keep their template's own system prompt."""

import msgspec

from localchat.app.protocol.conversations import ConversationDefaults, SamplingDefaults, SamplingSettings, filled
from localchat.app.sampling_defaults import LOCALCHAT_SOURCE

SMALL_MODEL_PARAMETERS = 1_000_000_000  # fewer weights than this: a small model
SMALL_MODEL_TEMPERATURE = 0.3
SMALL_MODEL_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and accurately."


def chat_defaults(parameters: int | None, sampling: SamplingDefaults) -> ConversationDefaults:
    """The defaults for a model with this many weights (None: not known, such as a remote engine's model) and these
    sampling defaults."""
    settings = filled(SamplingSettings(), sampling)
    if parameters is None or parameters >= SMALL_MODEL_PARAMETERS:
        return ConversationDefaults(system_prompt="", settings=settings, small_model=False, sampling=sampling)
    if sampling.source == LOCALCHAT_SOURCE:
        settings = msgspec.structs.replace(settings, temperature=SMALL_MODEL_TEMPERATURE)
    return ConversationDefaults(system_prompt=SMALL_MODEL_SYSTEM_PROMPT, settings=settings, small_model=True,
                                sampling=sampling)
