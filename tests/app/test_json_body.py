"""json_body in process: a number without fraction read for an integer field (and only then), the field a byte of a
JSON text is in, as an error message names it."""

import re

import msgspec
import pytest

from localchat.app.protocol.ollama import GenerateRequest
from localchat.app.protocol.openai import ChatCompletionRequest
from localchat.app.server.json_body import decoded, json_path


def test_a_number_without_fraction_is_an_integer_where_an_integer_is_expected():
    request = decoded(b'{"model": "m", "options": {"seed": -31974.0, "num_predict": 5.0, "temperature": 1}}',
                      GenerateRequest)
    assert (request.options.seed, request.options.num_predict, request.options.temperature) == (-31974, 5, 1.0)
    assert type(request.options.seed) is int and type(request.options.temperature) is float
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int \| null`, got `float` - at `\$.options.seed`"):
        decoded(b'{"model": "m", "options": {"seed": 0.5}}', GenerateRequest)


def test_other_problems_are_reported_as_before():
    with pytest.raises(msgspec.ValidationError, match=re.escape("Expected `array` of length >= 1 - at `$.messages`")):
        decoded(b'{"messages": []}', ChatCompletionRequest)
    with pytest.raises(msgspec.ValidationError, match=re.escape("Expected `float | null`, got `str`")):
        decoded(b'{"messages": [{"role": "user", "content": "Hi"}], "temperature": "1"}', ChatCompletionRequest)


@pytest.mark.parametrize("text, before, path", [
    (b'{"temperature": NaN}', b"NaN", "temperature"),
    (b'{"a": {"b": [1, 2, {"c": NaN}]}}', b"NaN", "a.b[2].c"),
    (b'{"stop": ["x\\",]", NaN]}', b"NaN", "stop[1]"),
    (b'{"a": [1], "b": NaN}', b"NaN", "b"),
    (b'NaN', b"NaN", "the JSON body"),
])
def test_the_field_a_byte_is_in(text, before, path):
    assert json_path(text, text.index(before)) == path
