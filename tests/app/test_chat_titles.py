"""Chat titles (issue 56): after a chat's first reply the model names it in a few words, in the background and never
ahead of a reply: the title's request waits while replies are written and is aborted the moment one starts, then
asked again. A scripted backend plays the engine, so that what runs when is the test's to decide; what the tiny model
writes is cleaned into one short line."""

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from localchat.app.protocol.conversations import SamplingSettings, filled
from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.active_requests import ActiveRequests
from localchat.app.server.backends import Update
from localchat.app.server.chat_titles import TITLE_CHARS, TITLE_REQUEST, clean_title, first_words_title
from localchat.app.server.conversations import Conversations
from localchat.app.server.store import Store
from localchat.app.server.tool_calls import IN_SYSTEM_PROMPT
from localchat.engine.frontend.outputs import CompletionOutput
from support import stream_api

QUESTION = "What is the capital of France?"


class Request:
    """One request the backend was given: the test writes its reply (say) and ends it (end)."""

    def __init__(self, prompt: list[dict], request_id: str):
        self.prompt, self.request_id, self.updates, self.aborted = prompt, request_id, asyncio.Queue(), False

    def say(self, text: str) -> None:
        self.updates.put_nowait(Update([CompletionOutput(0, text=text, token_ids=[1])], prompt_tokens=10))

    def end(self) -> None:
        self.updates.put_nowait(Update([CompletionOutput(0, finish_reason="stop")], prompt_tokens=10, finished=True))

    @property
    def asks_for_a_title(self) -> bool:
        return self.prompt[-1]["content"] == TITLE_REQUEST


class ScriptedBackend:
    """A backend that takes chat messages (as a remote one does) and answers as the test says."""

    kind, renders_templates, model_name, tool_syntax, sampling = "remote", False, "scripted", IN_SYSTEM_PROMPT, \
        UNKNOWN_MODEL
    max_model_len = template = None

    def __init__(self):
        self.requests: list[Request] = []
        self.opened = asyncio.Event()

    def check_chat(self) -> None:
        pass

    def check_text_size(self, num_chars: int) -> None:
        pass

    async def check_request(self, prompt, params) -> None:
        pass

    async def open(self, prompt, params, request_id, draft_sources=()) -> AsyncIterator[Update]:
        request = Request(prompt, request_id)
        self.requests.append(request)
        self.opened.set()
        return self._stream(request)

    async def _stream(self, request: Request) -> AsyncIterator[Update]:
        while not request.aborted:
            update = await request.updates.get()
            if update is None:
                return
            yield update
            if update.finished:
                return

    async def abort(self, request_id: str) -> None:
        for request in self.requests:
            if request.request_id == request_id and not request.aborted:
                request.aborted = True
                request.updates.put_nowait(None)

    async def next_request(self) -> Request:
        while True:
            self.opened.clear()
            count = len(self.requests)
            await asyncio.wait_for(self.opened.wait(), 10)
            if len(self.requests) > count:
                return self.requests[-1]


async def until(condition, timeout: float = 10.0) -> None:
    """Let the loop run until condition() holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def reply(conversations: Conversations, conversation, parent, text: str, backend: ScriptedBackend) -> None:
    """A reply to `parent`, written as `text` and read to its end, as a client of the stream would."""
    replies = await conversations.start_replies(conversation, parent, 1)
    request = backend.requests[-1]
    request.say(text)
    request.end()
    async for _ in replies.events():
        pass


@pytest.mark.asyncio
async def test_a_title_waits_for_replies_and_gives_way_to_one_that_starts(tmp_path):
    store, backend, active = Store(tmp_path / "chats.db"), ScriptedBackend(), ActiveRequests()
    conversations = Conversations(store, backend, active)
    settings = filled(SamplingSettings(max_tokens=32), UNKNOWN_MODEL)
    chat = store.create_conversation("New chat", "", settings)
    user = await conversations.add_user_message(chat, None, QUESTION)
    assert store.get_conversation(chat.id).title == first_words_title(QUESTION) == QUESTION

    await reply(conversations, chat, user, "Paris.", backend)  # the first reply ends: the title is asked for
    title = await backend.next_request()
    assert title.asks_for_a_title and [m["content"] for m in title.prompt] == [QUESTION, "Paris.", TITLE_REQUEST]
    title.say("Capital")

    chat = store.get_conversation(chat.id)
    second = await conversations.add_user_message(chat, None, "And of Italy?")
    replies = await conversations.start_replies(chat, second, 1)  # a reply starts: the title gives way at once
    await until(lambda: title.aborted)
    assert active.busy.is_set() and len(backend.requests) == 3  # and is not asked for while the reply is written
    backend.requests[-1].say("Rome.")
    backend.requests[-1].end()
    async for _ in replies.events():
        pass

    again = await backend.next_request()  # the reply ended: the title is asked for again
    assert again.asks_for_a_title and again.prompt == title.prompt
    before = store.get_conversation(chat.id)
    named = asyncio.ensure_future(conversations.titles.named(chat.id))  # what a UI awaits
    again.say('# Title: "Paris, the capital')
    again.say(' of France".\nMore text the model should not have written.')
    again.end()
    assert (await asyncio.wait_for(named, 10)).title == "Paris, the capital of France"
    assert store.get_conversation(chat.id).updated_at == before.updated_at  # a title is not an activity


@pytest.mark.asyncio
async def test_a_chat_the_user_renamed_is_not_named_again(tmp_path):
    store, backend = Store(tmp_path / "chats.db"), ScriptedBackend()
    conversations = Conversations(store, backend, ActiveRequests())
    chat = store.create_conversation("New chat", "", filled(SamplingSettings(max_tokens=32), UNKNOWN_MODEL))
    user = await conversations.add_user_message(chat, None, QUESTION)
    await reply(conversations, chat, user, "Paris.", backend)
    title = await backend.next_request()
    store.update_conversation(chat.id, title="Trip planning")  # renamed while the title is being written
    title.say("Capital of France")
    title.end()
    assert (await conversations.titles.named(chat.id)).title == "Trip planning"
    assert (await conversations.titles.named(chat.id)).title == "Trip planning"  # and not asked again
    assert sum(r.asks_for_a_title for r in backend.requests) == 1


@pytest.mark.parametrize("written, title", [
    ("Rain: A Wonderful World of Water", "Rain: A Wonderful World of Water"),
    ('Here\'s a possible title:\n\n"Sorting a List in Python:', "Sorting a List in Python"),
    ('# **Title:** "Paris".', "Paris"),
    ("The Cat's Delight: A Cat's Delight: A Cat's Del", "The Cat's Delight: A Cat's Delight"),
    ("In the morning, a cup of tea, a moment of pure bliss, a", "In the morning, a cup of tea, a moment of pure…"),
    ("Why is the sky blue?", "Why is the sky blue?"),
    ("Here's a 3-to-6-word title:\n\n*", None),
    ("\n\n  \"\"  \n", None),
    ("", None),
])
def test_what_the_model_writes_is_cleaned_into_one_short_line(written, title):
    cleaned = clean_title(written)
    assert cleaned == title
    assert cleaned is None or (len(cleaned) <= TITLE_CHARS and "\n" not in cleaned and '"' not in cleaned)


@pytest.mark.slow  # a real `localchat serve`
def test_the_server_names_a_chat_by_itself_after_its_first_reply(api):
    cid = api.post("/api/conversations", json={}).json()["id"]
    stream_api(api, f"/api/conversations/{cid}/messages", {"content": QUESTION})
    deadline = time.monotonic() + 60
    while (title := api.get(f"/api/conversations/{cid}").json()["conversation"]["title"]) == QUESTION:
        assert time.monotonic() < deadline, "no title"
        time.sleep(0.1)
    assert title == clean_title(title) and len(title) <= TITLE_CHARS
    assert api.post(f"/api/conversations/{cid}/title").json()["title"] == title  # named already: as it is

    renamed = api.post("/api/conversations", json={"title": "Mine"}).json()["id"]  # a title of the user's own
    stream_api(api, f"/api/conversations/{renamed}/messages", {"content": QUESTION})
    assert api.post(f"/api/conversations/{renamed}/title").json()["title"] == "Mine"
    assert api.post("/api/conversations/c_nope/title").status_code == 404
