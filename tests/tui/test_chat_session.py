"""The terminal's chat session without a UI: the scenarios of chat_session_scenarios.json (a stream of n replies
interleaved, an error mid-stream, a stop, a regenerate making a sibling, an edit, switching branches, opening a chat),
step by step. tests/webui/test_web_chat_session.py runs the same file through the web UI's twin."""

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest

from localchat.app.protocol.conversations import Conversation, ConversationTree, Message, StreamEvent
from localchat.tui.chat_session import ChatSession, Fork

SCENARIOS = json.loads((Path(__file__).parent / "chat_session_scenarios.json").read_text())


def stored(message: dict) -> dict:
    """A message of the file, as the engine sends it (in the scenarios' conversation)."""
    return {"conversation_id": SCENARIOS["conversation"]["id"], **message}


def plain(value):
    """A change's field as the scenarios write it: a message as its id, a fork as {parent_id, ids}."""
    if isinstance(value, Message):
        return value.id
    if isinstance(value, Fork):
        return {"parent_id": value.parent_id, "ids": list(value.ids)}
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    return value


def summary(change) -> dict | None:
    if change is None:
        return None
    fields = {field.name: plain(getattr(change, field.name)) for field in dataclasses.fields(change)}
    return {"change": type(change).__name__, **fields}


def act(session: ChatSession, scenario: dict, step: dict):
    """Do the step's action; what it answered (an event: its change, as the scenarios write it)."""
    [(action, argument)] = [(key, value) for key, value in step.items() if key != "expect"]
    match action:
        case "open":
            conversation = {**SCENARIOS["conversation"], "active_leaf": argument.get("active_leaf")}
            messages = [stored(message) for message in scenario["messages"]]
            tree = msgspec.convert({"conversation": conversation, "messages": messages}, ConversationTree)
            return session.open(tree, argument.get("message_id"))
        case "new_chat":
            return session.new_chat(msgspec.convert(SCENARIOS["conversation"], Conversation))
        case "event":
            if isinstance(argument.get("message"), dict):  # a user or done event's message
                argument = {**argument, "message": stored(argument["message"])}
            return summary(session.apply(msgspec.convert(argument, StreamEvent)))
        case _:
            return getattr(session, action)(*(argument if isinstance(argument, list) else [argument]))


def observe(session: ChatSession, step: dict, answer) -> dict:
    """What the step's `expect` asks about, as the session has it now."""
    expect = step["expect"]
    seen = {"leaf": session.leaf, "fork": plain(session.fork), "path": [message.id for message in session.path()]}
    if "event" in step:
        seen["change"] = answer
    if "returns" in expect:
        seen["returns"] = answer
    if "content" in expect:
        seen["content"] = {message_id: session.tree.messages[message_id].content for message_id in expect["content"]}
    if "siblings" in expect:
        seen["siblings"] = {message_id: session.tree.siblings(message_id) for message_id in expect["siblings"]}
    if "variation" in expect:
        seen["variation"] = {message_id: msgspec.to_builtins(session.tree.messages[message_id].variation)
                             for message_id in expect["variation"]}
    return seen


@pytest.mark.parametrize("scenario", SCENARIOS["scenarios"], ids=[s["name"] for s in SCENARIOS["scenarios"]])
def test_the_session_follows_the_scenario(scenario):
    session = ChatSession()
    for number, step in enumerate(scenario["steps"], 1):
        assert observe(session, step, act(session, scenario, step)) == step["expect"], f"step {number}"


def test_a_streamed_reply_grows_in_the_tree_not_in_the_message_a_view_holds():
    """The terminal's views keep the message they were given and stream the text themselves (a MarkdownStream)."""
    session = ChatSession()
    session.new_chat(msgspec.convert(SCENARIOS["conversation"], Conversation))
    started = session.apply(msgspec.convert({"type": "start", "parent_id": "u1", "message_ids": ["a1"]}, StreamEvent))
    session.apply(msgspec.convert({"type": "delta", "message_id": "a1", "index": 0, "text": "Hi"}, StreamEvent))
    assert started.replies[0].content == "" and session.tree.messages["a1"].content == "Hi"


def test_a_thinking_reply_grows_its_reasoning_apart_from_its_answer():
    """A thinking model's deltas carry reasoning before the answer; one delta may end the one and begin the other."""
    session = ChatSession()
    session.new_chat(msgspec.convert(SCENARIOS["conversation"], Conversation))
    session.apply(msgspec.convert({"type": "start", "parent_id": "u1", "message_ids": ["a1"]}, StreamEvent))

    def delta(text: str, reasoning: str = "", tokens: int = 0):
        return summary(session.apply(msgspec.convert({"type": "delta", "message_id": "a1", "index": 0, "text": text,
                                                      "reasoning": reasoning, "reasoning_tokens": tokens},
                                                     StreamEvent)))

    assert delta("", "Hmm, ", 2) == {"change": "ThinkingAdded", "message_id": "a1", "reasoning": "Hmm, ",
                                     "reasoning_tokens": 2, "text": ""}
    assert delta("Hi", "cats.", 3) == {"change": "ThinkingAdded", "message_id": "a1", "reasoning": "cats.",
                                       "reasoning_tokens": 3, "text": "Hi"}
    assert delta("!", tokens=3) == {"change": "TextAdded", "message_id": "a1", "text": "!"}
    reply = session.tree.messages["a1"]
    assert (reply.reasoning_content, reply.content) == ("Hmm, cats.", "Hi!")
