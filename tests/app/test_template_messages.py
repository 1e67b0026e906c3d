"""The messages a chat template takes (template_messages.py), built in one place from each API's messages: /v1's,
Ollama's (its calls numbered, a tool's result answering the last call of its tool_name), and a conversation's branch
(its documents written into it). No model."""

from localchat.app.protocol import ollama
from localchat.app.protocol.conversations import Conversation, Message, SamplingSettings, filled
from localchat.app.protocol.openai import ChatMessageIn, ContentPart, FunctionCall, ToolCall
from localchat.app.sampling_defaults import UNKNOWN_MODEL
from localchat.app.server.documents import placed
from localchat.app.server.template_messages import (
    TemplateMessage,
    branch_messages,
    ollama_messages,
    openai_messages,
    prompt_messages,
)

CALL = ToolCall(id="call_9", function=FunctionCall(name="get_weather", arguments='{"city": "Oslo"}'))


def test_openai_messages_a_developer_message_is_a_system_message_and_parts_are_joined():
    made = openai_messages([
        ChatMessageIn(role="developer", content="Be brief."),
        ChatMessageIn(role="user", content=[ContentPart(type="text", text="Weather "),
                                            ContentPart(type="text", text="in Oslo?")]),
        ChatMessageIn(role="assistant", tool_calls=[CALL], reasoning_content="Look it up."),
        ChatMessageIn(role="tool", content="sunny", tool_call_id="call_9")])
    assert made == [TemplateMessage("system", "Be brief."), TemplateMessage("user", "Weather in Oslo?"),
                    TemplateMessage("assistant", "", [CALL], None, "Look it up."),
                    TemplateMessage("tool", "sunny", None, "call_9")]


def test_ollama_messages_number_the_calls_and_a_result_answers_its_tools_last_call():
    def call(name: str) -> ollama.ToolCall:
        return ollama.ToolCall(function=ollama.FunctionCall(name=name, arguments={"city": "Oslo"}))

    made = ollama_messages([
        ollama.Message(role="user", content="Weather and time?"),
        ollama.Message(role="assistant", tool_calls=[call("get_weather"), call("get_time")], thinking="Both."),
        ollama.Message(role="tool", content="sunny", tool_name="get_weather"),
        ollama.Message(role="tool", content="noon", tool_name="no_such_tool")])
    assert [c.id for c in made[1].tool_calls] == ["call_1_0", "call_1_1"]
    assert made[1].tool_calls[0].function.arguments == '{"city": "Oslo"}' and made[1].reasoning_content == "Both."
    assert (made[2].tool_call_id, made[3].tool_call_id) == ("call_1_0", "call_1_1")  # else the last call
    assert prompt_messages("Be brief.", "Hi") == [TemplateMessage("system", "Be brief."), TemplateMessage("user", "Hi")]
    assert prompt_messages(None, "Hi") == [TemplateMessage("user", "Hi")]


def test_a_branch_carries_its_system_prompt_and_each_messages_documents():
    settings = filled(SamplingSettings(), UNKNOWN_MODEL)
    conversation = Conversation(id="c", title="t", system_prompt="Be brief.", settings=settings, created_at=0.0,
                                updated_at=0.0, documents=["d_chat"])
    path = [Message(id="m1", conversation_id="c", parent_id=None, role="user", content="Sum it up.", created_at=1.0,
                    documents=["d_note"]),
            Message(id="m2", conversation_id="c", parent_id="m1", role="assistant", content="Done.", created_at=2.0,
                    tool_calls=[CALL])]
    texts = {"d_chat": ("chat.txt", "for the chat"), "d_note": ("note.txt", "for the message")}
    made = branch_messages(conversation, path, lambda ids: [texts[i] for i in ids])
    assert made == [TemplateMessage("system", f"Be brief.\n\n{placed('chat.txt', 'for the chat')}"),
                    TemplateMessage("user", f"{placed('note.txt', 'for the message')}\n\nSum it up."),
                    TemplateMessage("assistant", "Done.", [CALL])]
    bare = Conversation(id="c", title="t", system_prompt="", settings=settings, created_at=0.0, updated_at=0.0)
    assert branch_messages(bare, [], lambda ids: []) == []
