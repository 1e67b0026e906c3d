"""What a refused request is told, in words, whichever API it came through: Litestar's and msgspec's messages for a
body that does not decode or a value outside its field's limits, rewritten for a person."""

import re

from litestar.exceptions import HTTPException, SerializationException, ValidationException

from localchat.app.protocol.limits import PATTERN_MEANINGS


def error_message(error: HTTPException) -> str:
    """A 4xx's message: a malformed body says so; each validation problem as `field: what is wrong`."""
    message = error.detail
    if isinstance(error.__cause__, SerializationException):
        message = f"malformed JSON: {message}"
    elif isinstance(error, ValidationException) and isinstance(error.extra, list) and error.extra:
        message = "; ".join(_problem(item) for item in error.extra if isinstance(item, dict))
    return message


def _problem(item: dict) -> str:
    """One of Litestar's validation problems, in words: `field: what is wrong`, or `field must ...` for a value
    outside the limits on its field."""
    key, detail = item.get("key"), item.get("message", "")
    if key == "data" and detail == "'data'":
        return "a JSON request body is required"
    unknown = re.fullmatch(r"Object contains unknown field `(.+)`", detail)
    if unknown:
        detail = f"`{unknown[1]}` is not supported"
    limit = _limit_words(detail)
    if limit:
        return f"{key} {limit}"
    return detail if key == "data" else f"{key}: {detail}"


_LIMIT = re.compile(r"Expected `(?P<type>\w+)`(?P<length> of length)? (?P<op>>=|<=) (?P<bound>\S+)")
_LENGTH_UNITS = {"str": ("character", "characters"), "array": ("item", "items"), "object": ("entry", "entries")}
_PATTERN_FAILURES = {f"Expected `str` matching regex {pattern!r}": meaning
                     for pattern, meaning in PATTERN_MEANINGS.items()}


def _limit_words(detail: str) -> str | None:
    """msgspec's message for a value outside its field's limits (a Meta), in words; None for another message."""
    if detail in _PATTERN_FAILURES:
        return _PATTERN_FAILURES[detail]
    limit = _LIMIT.fullmatch(detail)
    if limit is None:
        return None
    most = "at least" if limit["op"] == ">=" else "at most"
    if not limit["length"]:
        return f"must be {most} {limit['bound']}"
    one, many = _LENGTH_UNITS.get(limit["type"], ("entry", "entries"))
    return f"must have {most} {limit['bound']} {one if limit['bound'] == '1' else many}"
