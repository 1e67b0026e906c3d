"""The client the user interfaces use to talk to the engine process.

    client = await EngineClient.connect(on_progress=show)   # finds the engine or starts it, waits for the model
    conversation = await client.create_conversation()
    async for event in client.send(conversation.id, "Hello", n=2):
        ...  # UserEvent, StartEvent, DeltaEvent (by message_id), DoneEvent, ErrorEvent
"""

import asyncio
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import msgspec

from localchat.app import paths
from localchat.app.client import engine_process
from localchat.app.engine_state import read_state
from localchat.app.protocol.conversations import (
    ContinueReply,
    Conversation,
    ConversationCreate,
    ConversationTree,
    ConversationUpdate,
    EditMessage,
    EndThinkingResult,
    Regenerate,
    SamplingSettings,
    SearchHit,
    SendMessage,
    StopRequest,
    StopResult,
    StreamEvent,
    SummarizeRequest,
    Variation,
)
from localchat.app.protocol.documents import Document, DocumentText
from localchat.app.protocol.limits import Limits
from localchat.app.protocol.models import ModelCatalog, ModelChoice, ModelPull, PullRequest
from localchat.app.protocol.system import Health, LoginCode, SessionsRevoked
from localchat.app.sse import async_data_lines


class EngineError(RuntimeError):
    """The engine answered with an error; status is the HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class EngineClient:
    def __init__(self, base_url: str, token: str, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.http = httpx.AsyncClient(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"},
                                      timeout=httpx.Timeout(timeout, read=None))

    @classmethod
    async def connect(cls, on_progress: Callable[[Health], None] | None = None, serve_args: list[str] = (),
                      timeout: float = 600.0, started: subprocess.Popen | None = None) -> "EngineClient":
        """Find the running engine (or `started`) or start one in the background; returns once its model is
        loaded."""
        state = await asyncio.to_thread(engine_process.ensure_engine, list(serve_args), on_progress, timeout, started)
        return cls(state.url, paths.load_or_create_token())

    @classmethod
    def running(cls) -> "EngineClient":
        """A client of the engine that runs now (none is started)."""
        state = read_state()
        if state is None:
            raise RuntimeError("no engine is running")
        return cls(state.url, paths.load_or_create_token())

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> "EngineClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method: str, path: str, body=None, kind=None, **params):
        response = await self.http.request(method, path, content=None if body is None else msgspec.json.encode(body),
                                           params=params or None,
                                           headers={"Content-Type": "application/json"} if body is not None else None)
        raise_for_status(response.status_code, response.content)
        if kind is None:
            return response.content
        return msgspec.json.decode(response.content, type=kind)

    async def _events(self, path: str, body) -> AsyncIterator[StreamEvent]:
        async with self.http.stream("POST", path, content=msgspec.json.encode(body),
                                    headers={"Content-Type": "application/json"}) as response:
            if response.status_code >= 400:
                raise_for_status(response.status_code, await response.aread())
            async for data in async_data_lines(response.aiter_lines()):
                yield msgspec.json.decode(data, type=StreamEvent)

    # --- the engine ---

    async def health(self) -> Health:
        return await self._call("GET", "/health", kind=Health)

    async def limits(self) -> Limits:
        """The range of every sampling setting, as the engine checks them."""
        return await self._call("GET", "/api/limits", kind=Limits)

    async def models(self) -> ModelCatalog:
        """The models on this machine; `current` is the one the engine runs."""
        return await self._call("GET", "/api/models", kind=ModelCatalog)

    async def switch_model(self, name: str) -> ModelCatalog:
        """Stop the running replies and load `name` (health() shows the progress)."""
        return await self._call("POST", "/api/models/current", ModelChoice(model=name), kind=ModelCatalog)

    async def pull_model(self, repo: str, file: str | None = None) -> ModelPull:
        """Start pulling a GGUF file from the Hugging Face Hub (model_pull() follows it)."""
        return await self._call("POST", "/api/models/pull", PullRequest(repo=repo, file=file), kind=ModelPull)

    async def model_pull(self) -> ModelPull:
        """The pull last started, as far as it got."""
        return await self._call("GET", "/api/models/pull", kind=ModelPull)

    async def metrics(self) -> dict[str, float]:
        """/metrics as {name without the localchat_ prefix: value}."""
        text = (await self._call("GET", "/metrics")).decode()
        pairs = (line.split() for line in text.splitlines() if line.startswith("localchat_"))
        return {name.removeprefix("localchat_"): float(value) for name, value in pairs}

    async def login_code(self) -> LoginCode:
        """A one-time code and the URL that signs a browser in with it."""
        return await self._call("POST", "/api/auth/login-code", kind=LoginCode)

    async def revoke_browser_sessions(self) -> int:
        """Sign every browser out; how many sessions there were."""
        return (await self._call("DELETE", "/api/auth/sessions", kind=SessionsRevoked)).revoked

    # --- conversations ---

    async def list_conversations(self) -> list[Conversation]:
        return await self._call("GET", "/api/conversations", kind=list[Conversation])

    async def create_conversation(self, title: str | None = None, system_prompt: str | None = None,
                                  settings: SamplingSettings | None = None, documents: list[str] = ()
                                  ) -> Conversation:
        """documents: the ids of the documents it starts with (upload_document), after the system prompt; the system
        prompt and settings left None: the model's defaults."""
        return await self._call("POST", "/api/conversations", ConversationCreate(
            title=title, system_prompt=system_prompt, settings=settings, documents=list(documents)),
            kind=Conversation)

    async def conversation(self, conversation_id: str, token_ids: bool = False) -> ConversationTree:
        params = {"token_ids": "true"} if token_ids else {}
        return await self._call("GET", f"/api/conversations/{conversation_id}", kind=ConversationTree, **params)

    async def update_conversation(self, conversation_id: str, **fields) -> Conversation:
        """title=..., system_prompt=..., settings=SamplingSettings(...), active_leaf=message id"""
        return await self._call("PATCH", f"/api/conversations/{conversation_id}", ConversationUpdate(**fields),
                                kind=Conversation)

    async def rename(self, conversation_id: str, title: str) -> Conversation:
        return await self.update_conversation(conversation_id, title=title)

    async def delete_conversation(self, conversation_id: str) -> None:
        await self._call("DELETE", f"/api/conversations/{conversation_id}")

    def send(self, conversation_id: str, content: str, parent_id: str | None = None, n: int = 1,
             settings: SamplingSettings | None = None, tool_call_id: str | None = None,
             reply: bool = True, documents: list[str] = (),
             variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        """A user message (or, with tool_call_id, a tool's result) under parent_id, then n replies (none without
        reply), or one per variation. documents: the ids of the documents the message carries, before its text."""
        return self._events(f"/api/conversations/{conversation_id}/messages",
                            SendMessage(content=content, parent_id=parent_id, n=n, settings=settings,
                                        tool_call_id=tool_call_id, reply=reply, documents=list(documents),
                                        variations=variations))

    def regenerate(self, conversation_id: str, message_id: str, n: int = 1, settings: SamplingSettings | None = None,
                   variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        """n more replies beside `message_id`, or one per variation (each with its instruction and sampling)."""
        return self._events(f"/api/conversations/{conversation_id}/messages/{message_id}/regenerate",
                            Regenerate(n=n, settings=settings, variations=variations))

    def edit(self, conversation_id: str, message_id: str, content: str, n: int = 1,
             settings: SamplingSettings | None = None,
             variations: list[Variation] | None = None) -> AsyncIterator[StreamEvent]:
        """Your message edited: a new branch beside it and its n replies (or one per variation); a reply edited: the
        edited reply beside it (an EditedEvent), nothing generated."""
        return self._events(f"/api/conversations/{conversation_id}/messages/{message_id}/edit",
                            EditMessage(content=content, n=n, settings=settings, variations=variations))

    async def pin(self, conversation_id: str) -> Conversation:
        """Keep the chat warm (its KV blocks evicted last), within the pin budget (/health): an EngineError 409
        beyond it."""
        return await self._call("POST", f"/api/conversations/{conversation_id}/pin", kind=Conversation)

    async def unpin(self, conversation_id: str) -> Conversation:
        return await self._call("DELETE", f"/api/conversations/{conversation_id}/pin", kind=Conversation)

    def continue_reply(self, conversation_id: str, message_id: str, settings: SamplingSettings | None = None
                       ) -> AsyncIterator[StreamEvent]:
        """The reply `message_id` (cut at max_tokens, stopped or edited) goes on in the same message."""
        return self._events(f"/api/conversations/{conversation_id}/messages/{message_id}/continue",
                            ContinueReply(settings=settings))

    async def stop(self, conversation_id: str, message_id: str | None = None) -> StopResult:
        return await self._call("POST", f"/api/conversations/{conversation_id}/stop",
                                StopRequest(message_id=message_id), kind=StopResult)

    async def end_thinking(self, conversation_id: str, message_id: str | None = None) -> EndThinkingResult:
        """The running replies (or the one `message_id`) close their thinking now and go on with their answer."""
        return await self._call("POST", f"/api/conversations/{conversation_id}/end-thinking",
                                StopRequest(message_id=message_id), kind=EndThinkingResult)

    async def name_chat(self, conversation_id: str) -> Conversation:
        """The chat once the model has named it after its first reply (it waits while replies are written)."""
        return await self._call("POST", f"/api/conversations/{conversation_id}/title", kind=Conversation)

    async def summarize(self, conversation_id: str, leaf: str | None = None) -> Conversation:
        """A new conversation that starts from the model's summary of the branch that ends at `leaf` (None: the one
        shown), linked to this one (summary_of); answers once the summary is written (seconds)."""
        return await self._call("POST", f"/api/conversations/{conversation_id}/summarize",
                                SummarizeRequest(leaf=leaf), kind=Conversation)

    async def export(self, conversation_id: str, format: str = "markdown", leaf: str | None = None) -> str:
        params = {"format": format} | ({"leaf": leaf} if leaf else {})
        return (await self._call("GET", f"/api/conversations/{conversation_id}/export", **params)).decode()

    async def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        return await self._call("GET", "/api/search", kind=list[SearchHit], q=query, limit=limit)


    # --- documents ---

    async def upload_document(self, path: str | Path) -> Document:
        """Read a file into a document (its text, counted in tokens) that chats start from or messages carry."""
        path = Path(path)
        content = await asyncio.to_thread(path.read_bytes)
        response = await self.http.post("/api/documents", files={"file": (path.name, content)})
        raise_for_status(response.status_code, response.content)
        return msgspec.json.decode(response.content, type=Document)

    async def documents(self) -> list[Document]:
        return await self._call("GET", "/api/documents", kind=list[Document])

    async def document_text(self, document_id: str) -> DocumentText:
        """A document and its text, as a prompt holds it."""
        return await self._call("GET", f"/api/documents/{document_id}", kind=DocumentText)

    async def delete_document(self, document_id: str) -> None:
        await self._call("DELETE", f"/api/documents/{document_id}")


def raise_for_status(status: int, body: bytes) -> None:
    if status < 400:
        return
    try:
        message = msgspec.json.decode(body)["error"]["message"]
    except (msgspec.DecodeError, KeyError, TypeError):
        message = body.decode(errors="replace")[:300]
    raise EngineError(status, message)
