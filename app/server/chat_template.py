"""The token ids one message contributes to a prompt, cut out of the model's own chat template.

A message's segment is the text the template adds for it: render(history + [message]) minus
render(history), tokenized on its own. Concatenated along a branch, the segments give a prompt whose
turn k is an exact prefix of turn k + 1, so the engine's prefix cache finds every earlier turn.

An assistant segment is the generation prompt (the role header), the exact ids the model generated, and
whatever the template writes after a reply that the model did not generate (for ChatML the newline after
<|im_end|>; the whole <|im_end|>\\n when the reply was cut by max_tokens or stopped).
"""

from transformers import PreTrainedTokenizerBase

from localchat.app.server.tool_calls import ToolSyntax, tool_syntax

Chat = list[dict]  # {"role", "content"}, and an assistant's "tool_calls" or a tool message's "tool_call_id"


class ChatTemplate:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, tools: list[dict] | None = None,
                 syntax: ToolSyntax | None = None):
        self.tokenizer, self.tools = tokenizer, tools
        self.tool_syntax = syntax or tool_syntax(tokenizer.chat_template)  # how this model writes a tool call

    def with_tools(self, tools: list[dict] | None) -> "ChatTemplate":
        """The same template, rendering these function tools (for a template that renders tools)."""
        return ChatTemplate(self.tokenizer, tools, self.tool_syntax) if tools else self

    def render(self, chat: Chat, add_generation_prompt: bool = False) -> str:
        if not chat and not add_generation_prompt:
            return ""
        try:
            return self.tokenizer.apply_chat_template(chat, tools=self.tools, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt)
        except Exception:  # some templates refuse an empty or system-only chat
            if chat:
                raise
            return ""

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def segment(self, history: Chat, message: dict[str, str]) -> list[int]:
        """The ids the template writes for `message` after `history` (user and system messages)."""
        return self.encode(_added_text(self.render(history), self.render(history + [message])))

    def generation_prompt(self, history: Chat) -> list[int]:
        """The header that opens a reply after `history` (for ChatML: <|im_start|>assistant\\n)."""
        return self.encode(self.header_text(history))

    def header_text(self, history: Chat) -> str:
        return _added_text(self.render(history), self.render(history, add_generation_prompt=True))

    def assistant_segment(self, history: Chat, content: str, generated_ids: list[int]) -> list[int]:
        """Header + the generated ids + the template's closing text that the model did not generate."""
        header = self.header_text(history)
        written = _added_text(self.render(history), self.render(history + [{"role": "assistant",
                                                                             "content": content}]))
        at = written.rfind(content, len(header) if written.startswith(header) else 0) if content else -1
        closing = written[at + len(content):] if at != -1 else written[len(header):]
        generated = self.tokenizer.decode(generated_ids[-1:], skip_special_tokens=False) if generated_ids else ""
        special = set(self.tokenizer.all_special_ids)
        if generated_ids and generated_ids[-1] in special and closing.startswith(generated):
            closing = closing[len(generated):]  # the model wrote the end-of-turn token itself
        return self.encode(header) + list(generated_ids) + self.encode(closing)


def _added_text(before: str, after: str) -> str:
    """What `after` adds to `before`: the suffix past their common prefix (all of it past `before`
    when the template only appends, as chat templates do for every message but a changed last one)."""
    if after.startswith(before):
        return after[len(before):]
    common = 0
    for a, b in zip(before, after):
        if a != b:
            break
        common += 1
    return after[common:]
