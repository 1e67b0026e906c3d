"""How the engine process reads a JSON request body: every JSON endpoint reads its body through JSONBodyRequest.

- The body's nesting is measured before it is decoded, in one pass over its bytes: decoding recurses once per
  level, and a body nested a thousand levels deep would end in a RecursionError (a 500).
- It is decoded strictly into the handler's `data` type, as its OpenAPI schema states it: Litestar's own conversion
  is lax (it takes "3" for 3 and 0 for false).
- A body that does not decode gets a message that says why, where msgspec's own would mislead."""

import json
import re

import msgspec
from litestar import Request
from litestar.exceptions import ClientException, SerializationException, ValidationException

from localchat.app.server.config import MAX_JSON_DEPTH

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)  # a JSON string; one left open runs to the end
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENING = b"[{"


def nesting_depth(body: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest: its brackets outside strings, counted in one pass
    (no recursion, however deep the text)."""
    depth = deepest = 0
    for bracket in _STRING.sub(b"", body).translate(None, _NOT_BRACKETS):
        depth += 1 if bracket in _OPENING else -1
        deepest = max(deepest, depth)
    return deepest


def has_lone_surrogate(body: bytes) -> bool:
    """Whether the body is JSON but for a string with half of a UTF-16 surrogate pair (`"\\ud800"`), which is no
    Unicode text (msgspec calls that "Input data was truncated")."""
    try:
        json.dumps(json.loads(body), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    except ValueError:
        return False
    return False


def validation_problem(error: msgspec.ValidationError) -> dict:
    """msgspec's `what is wrong - at `$.path`` as one of Litestar's validation problems (app._problem words it)."""
    message, at, path = str(error).rpartition(" - at `$")
    if not at:  # the body itself
        return {"message": path, "key": "data", "source": "body"}
    return {"message": message, "key": path.removeprefix(".").removesuffix("`") or "data", "source": "body"}


class JSONBodyRequest(Request):
    """The app's request class: reads the body of a handler that takes `data`."""

    async def json(self):
        body = await self.body()
        data_field = self.route_handler.parsed_data_field
        if not body or data_field is None:
            return await super().json()  # no body: Litestar says that one is required
        if nesting_depth(body) > MAX_JSON_DEPTH:
            raise ClientException(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            return msgspec.json.decode(body, type=data_field.annotation)
        except msgspec.ValidationError as error:
            raise ValidationException(extra=[validation_problem(error)]) from None
        except msgspec.DecodeError as error:
            if has_lone_surrogate(body):
                raise ClientException("the JSON body is not valid Unicode: a string holds half of a UTF-16 "
                                      "surrogate pair (such as \\ud800)") from None
            raise SerializationException(str(error)) from None
