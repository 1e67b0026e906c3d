"""The requests in flight, from both APIs, so that stop, delete, a model switch and shutdown can abort them and wait
for their ends."""

import asyncio
from dataclasses import dataclass, field


@dataclass
class ActiveRequest:
    conversation_id: str | None  # None: an /v1 request
    message_ids: list[str]  # the replies it writes
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once its replies are saved


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass
class ActiveRequests:
    """The requests in flight; `idle` is set while there are none and `busy` while there are some (one state, two
    things to wait for: a chat's title waits for idle, and gives way at busy)."""

    requests: dict[str, ActiveRequest] = field(default_factory=dict)
    idle: asyncio.Event = field(default_factory=_set_event)
    busy: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, request_id: str, conversation_id: str | None = None, message_ids: list[str] = ()) -> None:
        self.requests[request_id] = ActiveRequest(conversation_id, list(message_ids))
        self.idle.clear()
        self.busy.set()

    def remove(self, request_id: str) -> None:
        request = self.requests.pop(request_id, None)
        if request is not None:
            request.done.set()
        if not self.requests:
            self.busy.clear()
            self.idle.set()

    def rename(self, request_id: str, new_id: str) -> None:
        """The same request, under the id of the engine request that now writes its replies."""
        if request_id in self.requests:
            self.requests[new_id] = self.requests.pop(request_id)

    def matching(self, conversation_id: str, message_id: str | None = None) -> dict[str, ActiveRequest]:
        return {rid: r for rid, r in self.requests.items()
                if r.conversation_id == conversation_id and (message_id is None or message_id in r.message_ids)}
