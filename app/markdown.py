"""Conversations and messages as Markdown, for people: the export (GET .../export) and the terminal UI's messages."""

from localchat.app.protocol.conversations import SAMPLING_FIELDS, Conversation, Message, Variation


def author(message: Message) -> str:
    return {"user": "You", "assistant": "Assistant", "tool": "Tool result"}[message.role]


def message_markdown(message: Message) -> str:
    """The message as Markdown: tool calls and results as code blocks (a reply's thinking apart: thinking_markdown)."""
    if message.role == "tool":
        return f"```\n{message.content}\n```"
    calls = [f"Calls `{call.function.name}`:\n\n```json\n{call.function.arguments}\n```"
             for call in message.tool_calls or []]
    return "\n\n".join(part for part in (message.content, *calls) if part)


def variation_words(variation: Variation) -> str:
    """What a fork's reply was asked for, in a few words: its instruction, then its sampling values ("Shorter ·
    temperature 1.0"); "as the others" for a variation that names nothing."""
    values = [f"{name.replace('_', ' ')} {getattr(variation, name):g}" for name in (*SAMPLING_FIELDS, "seed")
              if getattr(variation, name) is not None]
    return " · ".join(filter(None, [variation.instruction, *values])) or "as the others"


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
        variation = message.variation
        if variation is not None and variation.keep and variation.instruction:  # a turn of the history
            lines += ["**You** — the fork's instruction, kept", "", variation.instruction, ""]
        elif variation is not None:
            note += f" — asked: {variation_words(variation)}"
        thinking = thinking_markdown(message)
        lines += [f"**{who}**{note}", "", *([thinking, ""] if thinking else []), message_markdown(message), ""]
    return "\n".join(lines)
