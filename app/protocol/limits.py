"""The limits of the values in a request, as the types of their fields (msgspec checks them as it decodes a body),
and GET /api/limits, which states them for the UIs."""

from typing import Annotated

import msgspec
from msgspec import Struct

from localchat.engine.sampling_limits import LIMITS, MAX_STOP_LENGTH, MAX_STOP_STRINGS, MIN_TEMPERATURE

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # msgspec checks the bounds of integers within these


def limited(name: str) -> msgspec.Meta:
    """The range of the sampling setting `name` (engine/sampling_params.py LIMITS). A range msgspec cannot check
    (the seed's, up to 2**64 - 1) is stated in the schema only: SamplingParams checks it."""
    low, high = LIMITS[name]
    if any(isinstance(bound, int) and not INT64_MIN <= bound <= INT64_MAX for bound in (low, high)):
        return msgspec.Meta(extra_json_schema={"minimum": low, "maximum": high})
    return msgspec.Meta(ge=low, le=high)


# the sampling settings, each with its range
ReplyCount = Annotated[int, limited("n")]
# a temperature is 0 (greedy) or at least MIN_TEMPERATURE: stated in the schema, checked by SamplingParams
Temperature = Annotated[float, limited("temperature"), msgspec.Meta(
    extra_json_schema={"not": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": MIN_TEMPERATURE}})]
TopP = Annotated[float, limited("top_p")]
TopK = Annotated[int, limited("top_k")]
MinP = Annotated[float, limited("min_p")]
RepetitionPenalty = Annotated[float, limited("repetition_penalty")]
PresencePenalty = Annotated[float, limited("presence_penalty")]
FrequencyPenalty = Annotated[float, limited("frequency_penalty")]
MaxTokens = Annotated[int, limited("max_tokens")]
Seed = Annotated[int, limited("seed")]
Logprobs = Annotated[int, limited("logprobs")]
ThinkingBudget = Annotated[int, limited("thinking_token_budget")]
StopString = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STOP_LENGTH)]
StopStrings = Annotated[list[StopString], msgspec.Meta(max_length=MAX_STOP_STRINGS)]

# texts, without NUL characters
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = r"^\s*[^\s\x00][^\x00]*$"  # some text that is not space, and no NUL
# what a text that fails a pattern lacks, as an error message says it
PATTERN_MEANINGS = {NO_NUL: "must not contain NUL characters", NOT_BLANK: "must have text (and no NUL characters)"}
Text = Annotated[str, msgspec.Meta(pattern=NO_NUL)]
NonBlankText = Annotated[str, msgspec.Meta(pattern=NOT_BLANK)]


class Limit(Struct):
    min: int | float
    max: int | float | None  # None: no upper bound


class Limits(Struct, kw_only=True):
    """GET /api/limits: the range of each sampling setting (n, temperature, ...), as the server checks them."""

    sampling: dict[str, Limit]
    min_temperature: float  # a temperature is 0 (greedy) or at least this
    max_stop_strings: int
    max_document_bytes: int  # of an upload to /api/documents
    max_documents: int  # that a conversation starts with, or one message carries
    max_instruction_chars: int  # of a fork's variation's instruction
