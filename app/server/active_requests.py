"""The requests in flight, from both APIs, so that stop, delete, a model switch and shutdown can abort them and wait
for their ends."""

import asyncio
from dataclasses import dataclass, field


@dataclass
class ActiveRequest:
    conversation_id: str | None  # None: an /v1 request
    message_ids: list[str]  # the replies it writes
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once its replies are saved


@dataclass
class ActiveRequests:
    requests: dict[str, ActiveRequest] = field(default_factory=dict)

    def add(self, request_id: str, conversation_id: str | None = None, message_ids: list[str] = ()) -> None:
        self.requests[request_id] = ActiveRequest(conversation_id, list(message_ids))

    def remove(self, request_id: str) -> None:
        request = self.requests.pop(request_id, None)
        if request is not None:
            request.done.set()

    def rename(self, request_id: str, new_id: str) -> None:
        """The same request, under the id of the engine request that now writes its replies."""
        if request_id in self.requests:
            self.requests[new_id] = self.requests.pop(request_id)

    def matching(self, conversation_id: str, message_id: str | None = None) -> dict[str, ActiveRequest]:
        return {rid: r for rid, r in self.requests.items()
                if r.conversation_id == conversation_id and (message_id is None or message_id in r.message_ids)}
