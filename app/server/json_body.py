"""How the engine process reads a JSON request body: every JSON endpoint reads its body through JSONBodyRequest.

- The body's nesting is measured before it is decoded, in one pass over its bytes: decoding recurses once per
  level, and a body nested a thousand levels deep would end in a RecursionError (a 500).
- It is decoded strictly into the handler's `data` type, as its OpenAPI schema states it: Litestar's own conversion
  is lax (it takes "3" for 3 and 0 for false).
- A number with no fraction (3.0) is taken for an integer field, as JSON Schema counts it an integer (and Ollama's
  clients send them so); 3.5 is not.
- A body that does not decode gets a message that says why, where msgspec's own would mislead, and names the field
  where it can (NaN or Infinity, which JSON does not have).
- A body must say it is JSON (Content-Type application/json, or a type that ends in +json): one sent as text or as a
  form gets a 415 that names the type expected. Ollama's routes (their controller's opt FORM_JSON) also take a body
  that names no type or curl's default for `-d`, application/x-www-form-urlencoded: Ollama's own documentation sends
  its examples so, and Ollama reads the body as JSON whatever its type (its Python client sends application/json)."""

import json
import re

import msgspec
from litestar import Request
from litestar.exceptions import ClientException, HTTPException, SerializationException, ValidationException

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


JSON_MEDIA_TYPE = "application/json"
FORM_JSON = "form_json"  # a route handler's opt: it takes a JSON body sent with no type or as curl's default form
CURL_DEFAULT_TYPES = ("", "application/x-www-form-urlencoded")


class JSONBodyRequest(Request):
    """The app's request class: reads the body of a handler that takes `data`."""

    async def json(self):
        body = await self.body()
        data_field = self.route_handler.parsed_data_field
        if not body or data_field is None:
            return await super().json()  # no body: Litestar says that one is required
        self._check_media_type()
        if nesting_depth(body) > MAX_JSON_DEPTH:
            raise ClientException(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            return decoded(body, data_field.annotation)
        except msgspec.ValidationError as error:
            raise ValidationException(extra=[validation_problem(error)]) from None
        except msgspec.DecodeError as error:
            if has_lone_surrogate(body):
                raise ClientException("the JSON body is not valid Unicode: a string holds half of a UTF-16 "
                                      "surrogate pair (such as \\ud800)") from None
            at = _byte_at(error)
            if at is not None and (not_a_number := _NOT_A_NUMBER.match(body, at - (body[at - 1:at] == b"-"))):
                raise ClientException(f"{json_path(body, not_a_number.start())}: {not_a_number[0].decode()} is not "
                                      "a JSON number (JSON has no NaN or Infinity)") from None
            raise SerializationException(str(error)) from None

    def _check_media_type(self) -> None:
        media_type = self.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type == JSON_MEDIA_TYPE or media_type.endswith("+json"):
            return
        if self.route_handler.opt.get(FORM_JSON) and media_type in CURL_DEFAULT_TYPES:
            return
        raise HTTPException(status_code=415, detail=f"the body must be JSON, sent with Content-Type: "
                                                    f"{JSON_MEDIA_TYPE} (it came as {media_type or 'no type'})")


def decoded(body: bytes, annotation):
    """The body as `annotation`, strictly; where a float stands for an integer field, again with every number that
    has no fraction read as an integer (a float field takes an integer as it is)."""
    try:
        return msgspec.json.decode(body, type=annotation)
    except msgspec.ValidationError as error:
        if not _FLOAT_FOR_INT.match(str(error)):
            raise
    return msgspec.convert(_whole_numbers_as_ints(msgspec.json.decode(body)), annotation, strict=True)


def _whole_numbers_as_ints(value):
    """A decoded JSON value with 3.0 as 3 (nesting_depth bounds the recursion)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers_as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers_as_ints(item) for item in value]
    return value


_FLOAT_FOR_INT = re.compile(r"Expected `[^`]*\bint\b[^`]*`, got `float`")
_NOT_A_NUMBER = re.compile(rb"-?(NaN|Infinity|inf|nan)")
_BYTE = re.compile(r"\(byte (\d+)\)")
_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"|[\[\]{}:,]')


def _byte_at(error: msgspec.DecodeError) -> int | None:
    """Where msgspec found the body malformed (its message ends with `(byte N)`), if it says."""
    found = _BYTE.search(str(error))
    return int(found[1]) if found else None


def json_path(body: bytes, at: int) -> str:
    """The field the byte `at` of a JSON text is in, as msgspec names one (`messages[0].content`), read in one pass
    over the text before it; `the JSON body` for its top level."""
    path: list[list] = []  # per open container: [key or index]
    last_string = None
    for token in _TOKEN.finditer(body[:at]):
        kind = token[0][:1]
        if kind in b"{[":
            path.append([None if kind == b"{" else 0])
        elif kind in b"}]" and path:
            path.pop()
        elif kind == b":" and path:
            path[-1][0] = last_string
        elif kind == b"," and path and isinstance(path[-1][0], int):
            path[-1][0] += 1
        elif token[1] is not None:
            last_string = json.loads(token[0])
    parts = [f"[{key}]" if isinstance(key, int) else f".{key}" for (key,) in path if key is not None]
    return "".join(parts).removeprefix(".") or "the JSON body"
