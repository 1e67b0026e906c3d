"""The requests in flight, from both APIs, so that stop, delete, a model switch and shutdown can abort them and wait
for their ends. EngineJob (engine_job.py) adds and removes every one."""

import asyncio
from dataclasses import dataclass, field


@dataclass
class ActiveRequest:
    conversation_id: str | None  # None: an /v1 or Ollama request, or a chat's title
    message_ids: list[str]  # the replies it writes
    gives_way: bool = False  # a chat's title: no request waits for it (idle and busy leave it out)
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once its replies are saved


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass
class ActiveRequests:
    """The requests in flight; `idle` is set while there are none but those that give way, and `busy` while there are
    some (one state, two things to wait for: a chat's title waits for idle, and gives way at busy)."""

    requests: dict[str, ActiveRequest] = field(default_factory=dict)
    idle: asyncio.Event = field(default_factory=_set_event)
    busy: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, request_id: str, conversation_id: str | None = None, message_ids: list[str] = (),
            gives_way: bool = False) -> None:
        self.requests[request_id] = ActiveRequest(conversation_id, list(message_ids), gives_way)
        self._changed()

    def remove(self, request_id: str) -> None:
        request = self.requests.pop(request_id, None)
        if request is not None:
            request.done.set()
        self._changed()

    def _changed(self) -> None:
        if any(not request.gives_way for request in self.requests.values()):
            self.idle.clear()
            self.busy.set()
        else:
            self.busy.clear()
            self.idle.set()

    def matching(self, conversation_id: str, message_id: str | None = None) -> dict[str, ActiveRequest]:
        return {rid: r for rid, r in self.requests.items()
                if r.conversation_id == conversation_id and (message_id is None or message_id in r.message_ids)}
