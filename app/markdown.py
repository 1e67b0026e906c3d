"""Conversations and messages as Markdown, for people: the export (GET .../export) and the terminal UI's messages."""

from localchat.app.protocol.conversations import Conversation, Message


def author(message: Message) -> str:
    return {"user": "You", "assistant": "Assistant", "tool": "Tool result"}[message.role]


def message_markdown(message: Message) -> str:
    """The message as Markdown: tool calls and results as code blocks (a reply's thinking apart: thinking_markdown)."""
    if message.role == "tool":
        return f"```\n{message.content}\n```"
    calls = [f"Calls `{call.function.name}`:\n\n```json\n{call.function.arguments}\n```"
             for call in message.tool_calls or []]
    return "\n\n".join(part for part in (message.content, *calls) if part)


def thinking_markdown(message: Message) -> str:
    """A reply's thinking as a collapsed section (HTML's details, which Markdown renderers show folded); "" if none."""
    if not message.reasoning_content:
        return ""
    return f"<details>\n<summary>Thinking</summary>\n\n{message.reasoning_content}\n\n</details>"


def export_markdown(conversation: Conversation, path: list[Message]) -> str:
    """The branch `path` of the conversation, with its title and system prompt."""
    lines = [f"# {conversation.title}", ""]
    if conversation.system_prompt:
        lines += ["**System**", "", conversation.system_prompt, ""]
    for message in path:
        who = f"Assistant ({message.model})" if message.role == "assistant" and message.model else author(message)
        note = " — stopped" if message.stopped else ""
        thinking = thinking_markdown(message)
        lines += [f"**{who}**{note}", "", *([thinking, ""] if thinking else []), message_markdown(message), ""]
    return "\n".join(lines)
