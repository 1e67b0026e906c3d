"""The token ids one message contributes to a prompt, cut out of the model's own chat template.

A message's segment is the text the template adds for it: render(history + [message]) minus
render(history), tokenized on its own. Concatenated along a branch, the segments give a prompt whose
turn k is an exact prefix of turn k + 1, so the engine's prefix cache finds every earlier turn.

An assistant segment is the generation prompt (the role header), the exact ids the model generated, and
whatever the template writes after a reply that the model did not generate (for ChatML the newline after
<|im_end|>; the whole <|im_end|>\\n when the reply was cut by max_tokens or stopped).

A thinking model's template (one that writes <think>...</think>) renders a reply differently once the chat goes on:
most drop an earlier reply's thinking, some keep it. Its prompts are the template's rendering of the whole branch,
tokenized (prompt()); the prefix cache then serves every token up to where the rendering changed.
"""

import os

from transformers import PreTrainedTokenizerBase

from localchat.app.server.tool_calls import ToolSyntax, tool_syntax
from localchat.engine.frontend.reasoning import find_markers

Chat = list[dict]  # {"role", "content"}, and an assistant's "tool_calls" or a tool message's "tool_call_id"
# names a template's own arguments take, which chat_template_kwargs may not set
RESERVED_TEMPLATE_ARGUMENTS = frozenset({"messages", "conversation", "tools", "documents", "add_generation_prompt",
                                         "tokenize", "return_dict", "continue_final_message", "chat_template"})


class ChatTemplate:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, tools: list[dict] | None = None,
                 syntax: ToolSyntax | None = None, variables: dict | None = None):
        """variables: values for the template's own variables (enable_thinking, ...), as chat_template_kwargs."""
        self.tokenizer, self.tools, self.variables = tokenizer, tools, variables or {}
        self.tool_syntax = syntax or tool_syntax(tokenizer.chat_template)  # how this model writes a tool call
        self.thinks = find_markers(tokenizer) is not None  # a thinking model's template

    def with_options(self, tools: list[dict] | None, variables: dict | None = None) -> "ChatTemplate":
        """The same template, rendering these function tools (for a template that renders tools) and with these
        values of its variables."""
        if not tools and not variables:
            return self
        return ChatTemplate(self.tokenizer, tools, self.tool_syntax, variables)

    def prompt(self, chat: Chat) -> list[int]:
        """A reply's prompt as the template renders the whole chat, tokenized (a thinking model's: see the module
        docstring); the same token ids as transformers' apply_chat_template(tokenize=True)."""
        return self.encode(self.render(chat, add_generation_prompt=True))

    def history(self, chat: Chat) -> list[int]:
        """What a thinking model's next prompt after `chat` starts with, whatever its next message says: the
        template's rendering of the chat once a user message follows it (most drop the last reply's thinking then),
        up to that message's text, tokenized."""
        one, two = (self.render([*chat, {"role": "user", "content": text}]) for text in ("a", "b"))
        return self.encode(os.path.commonprefix([one, two]))

    def render(self, chat: Chat, add_generation_prompt: bool = False) -> str:
        if not chat and not add_generation_prompt:
            return ""
        try:
            return self.tokenizer.apply_chat_template(chat, tools=self.tools, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt, **self.variables)
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

    def generated_ids(self, history: Chat, content: str, segment: list[int]) -> list[int] | None:
        """The ids a reply that did not end its turn (cut at max_tokens, stopped, edited) wrote after its header, cut
        out of its stored segment (assistant_segment's, with the template's whole closing text): the tail of the
        prompt that continues it. None where the segment is not of that shape (stored without ids, or by another
        template)."""
        header = self.generation_prompt(history)
        closing = self.assistant_segment(history, content, [])[len(header):]
        body = len(segment) - len(closing)
        if body < len(header) or segment[:len(header)] != header or segment[body:] != closing:
            return None
        return segment[len(header):body]


def template_variables(template: ChatTemplate | None, values: dict | None, reasoning_effort: str | None) -> dict:
    """The values of a template's own variables for a /v1 request: its chat_template_kwargs, and OpenAI's
    reasoning_effort as the template's variable of that name, or for "none", enable_thinking false. A ValueError for a
    name the template's own arguments take."""
    variables = dict(values or {})
    taken = RESERVED_TEMPLATE_ARGUMENTS & variables.keys()
    if taken:
        raise ValueError(f"chat_template_kwargs may not set {', '.join(sorted(taken))}: the request's own fields do")
    source = template.tokenizer.chat_template if template is not None else None
    if reasoning_effort is not None and isinstance(source, str):
        if "reasoning_effort" in source:
            variables.setdefault("reasoning_effort", reasoning_effort)
        elif "enable_thinking" in source and reasoning_effort == "none":
            variables.setdefault("enable_thinking", False)
    return variables


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
