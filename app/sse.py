"""The one reader of server-sent events' `data:` lines, for every client of an event stream (the engine's
own clients, and the engine reading a remote OpenAI-compatible server)."""

from collections.abc import AsyncIterator, Iterable, Iterator

DONE = "[DONE]"  # OpenAI's end of stream


def data_payload(line: str) -> str | None:
    """The payload of a `data:` line; None for other lines and for OpenAI's closing `data: [DONE]`."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    return None if payload == DONE else payload


def data_lines(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if (payload := data_payload(line)) is not None:
            yield payload


async def async_data_lines(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    async for line in lines:
        if (payload := data_payload(line)) is not None:
            yield payload
