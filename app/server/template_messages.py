"""The messages a chat template takes, typed (TemplateMessage), and the one place they are built: from /v1's messages,
from Ollama's (/api/chat, and /api/generate's system and prompt), and from a conversation's branch (its documents
written into it). tool_calls.template_chat writes them as the template's own dicts, their tool calls and results in the
model's syntax."""

import json
from collections.abc import Callable
from dataclasses import dataclass

from localchat.app.protocol import ollama
from localchat.app.protocol.conversations import Conversation, Message
from localchat.app.protocol.openai import ChatMessageIn, FunctionCall, ToolCall
from localchat.app.server.documents import message_with_documents, system_with_documents


@dataclass(frozen=True)
class TemplateMessage:
    role: str  # system, user, assistant or tool
    content: str
    tool_calls: list[ToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool result's: the call it answers
    reasoning_content: str | None = None  # an assistant's thinking (the template decides whether it is kept)


def openai_messages(messages: list[ChatMessageIn]) -> list[TemplateMessage]:
    """/v1's messages (a developer message is a system message)."""
    return [TemplateMessage(m.template_role, m.text(), m.tool_calls, m.tool_call_id, m.reasoning_content)
            for m in messages]


def ollama_messages(messages: list[ollama.Message]) -> list[TemplateMessage]:
    """Ollama's messages: their calls numbered (Ollama's have no ids), and a tool's result answering the last call of
    its tool_name before it (else the last call)."""
    made, calls = [], []  # calls: (id, name) of every call so far
    for index, message in enumerate(messages):
        call_id = None
        if message.role == "tool":
            call_id = next((cid for cid, name in reversed(calls) if name == message.tool_name),
                           calls[-1][0] if calls else None)
        own = [ToolCall(id=f"call_{index}_{k}", function=FunctionCall(
            name=c.function.name, arguments=json.dumps(c.function.arguments)))
            for k, c in enumerate(message.tool_calls or [])]
        calls += [(call.id, call.function.name) for call in own]
        made.append(TemplateMessage(message.role, message.content, own, call_id, message.thinking))
    return made


def prompt_messages(system: str | None, prompt: str) -> list[TemplateMessage]:
    """Ollama's generate: its system message, if any, and its prompt as the user's message."""
    return [*([TemplateMessage("system", system)] if system else []), TemplateMessage("user", prompt)]


def kept_instruction(message: Message) -> str | None:
    """The instruction of a fork's reply that the chat keeps as a turn before it (Variation.keep), if any."""
    variation = message.variation
    return variation.instruction if variation is not None and variation.keep else None


def branch_messages(conversation: Conversation, path: list[Message],
                    document_texts: Callable[[list[str]], list[tuple[str, str]]]) -> list[TemplateMessage]:
    """A conversation's branch: its system prompt and documents as the system message (none where it has neither),
    then each message of `path`, its own documents before its text (a fork's reply whose instruction was kept: that
    instruction as a user message before it). document_texts(ids): (name, text) of each of those documents."""
    system = system_with_documents(conversation.system_prompt, document_texts(conversation.documents))
    messages = [TemplateMessage("system", system)] if system else []
    for m in path:
        if instruction := kept_instruction(m):
            messages.append(TemplateMessage("user", instruction))
        messages.append(TemplateMessage(m.role, message_with_documents(m.content, document_texts(m.documents))
                                        if m.documents else m.content, m.tool_calls, m.tool_call_id,
                                        m.reasoning_content))
    return messages
