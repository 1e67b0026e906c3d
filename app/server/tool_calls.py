"""Tool calls in the model's own words: how its chat template is given the tools and the calls of earlier turns,
how the model writes a call (ToolSyntax), the grammar that makes it write one (tool_choice "required" or a named
function), and reading the calls back out of a reply.

Templates that know tools (Qwen 2.5 and 3, Hermes: `<tool_call>{...}</tool_call>`; Llama 3.1+: a bare JSON object
with "parameters") get them as the `tools` argument and structured messages. A template that does not (SmolLM2,
Gemma 3) gets them in a system message that asks for Hermes' syntax, and the calls and results of earlier turns as
text in that syntax."""

import json
import uuid
from dataclasses import dataclass

from localchat.app.protocol.openai import FunctionCall, Tool, ToolCall
from localchat.app.server.config import quoted
from localchat.app.server.template_messages import TemplateMessage
from localchat.engine.frontend.structured_output import StructuredOutput


@dataclass(frozen=True)
class ToolSyntax:
    prefix: str  # before each call's JSON object
    suffix: str  # after it
    arguments_key: str  # the object's arguments field: {"name": ..., <arguments_key>: {...}}
    separator: str  # between two calls
    template_renders_tools: bool  # else the tools go into a system message (tools_system_text)


NO_PARAMETERS = {"type": "object", "properties": {}}  # a function's parameters when its definition gives none

HERMES = ToolSyntax("<tool_call>\n", "\n</tool_call>", "arguments", "\n", template_renders_tools=True)
LLAMA3 = ToolSyntax("", "", "parameters", "; ", template_renders_tools=True)
IN_SYSTEM_PROMPT = ToolSyntax("<tool_call>\n", "\n</tool_call>", "arguments", "\n", template_renders_tools=False)


def tool_syntax(template_source: str | None) -> ToolSyntax:
    """The syntax the model's chat template was trained on, judged from the template's source."""
    if not template_source or "tools" not in template_source:
        return IN_SYSTEM_PROMPT
    return HERMES if "<tool_call>" in template_source else LLAMA3


def tools_system_text(tools: list[Tool]) -> str:
    """The system message that teaches a template without tools to call them (Hermes' wording)."""
    signatures = "\n".join(json.dumps({"type": "function", "function": _function(t)}) for t in tools)
    return ("You may call one or more functions to assist with the user query. The functions are described within "
            f"<tools></tools> XML tags:\n<tools>\n{signatures}\n</tools>\n\nFor each function call, return a JSON "
            "object with the function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def check_tool_choice(tools: list[Tool], required: bool, named: str | None, other_grammar: str | None) -> None:
    """A ValueError where the tools cannot be used as asked: two of one name, a call required (`required`, or of
    the function `named`) of no tools or of one not among them, or while `other_grammar` (a JSON format, by the
    name the request gave it) would shape the reply too."""
    names = [tool.function.name for tool in tools]
    if len(set(names)) < len(names):
        raise ValueError("tools: two functions have the same name")
    if named is not None and named not in names:
        raise ValueError(f"tool_choice names {quoted(named)}, which is not among the tools")
    if required and not names:
        raise ValueError('tool_choice "required" needs tools')
    if (required or named is not None) and other_grammar:
        raise ValueError(f"{other_grammar} and a required tool call cannot both shape the reply")


def template_tools(tools: list[Tool] | None, syntax: ToolSyntax) -> list[dict] | None:
    """The tools as the chat template's `tools` argument, for a template that renders them (else None)."""
    if not (tools and syntax.template_renders_tools):
        return None
    return [{"type": "function", "function": _function(t)} for t in tools]


def template_chat(messages: list[TemplateMessage], tools: list[Tool] | None, syntax: ToolSyntax
                  ) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) as the chat template takes them: an assistant's tool calls and a tool message's result in the
    model's syntax, its thinking as reasoning_content (the template decides whether it is kept)."""
    chat = []
    for message in messages:
        entry = {"role": message.role, "content": message.content}
        if message.reasoning_content:
            entry["reasoning_content"] = message.reasoning_content
        if calls := message.tool_calls:
            if syntax.template_renders_tools:
                entry["tool_calls"] = [{"type": "function", "id": call.id, "function": {
                    "name": call.function.name, "arguments": _arguments(call)}} for call in calls]
            else:
                entry["content"] = "\n".join(filter(None, [entry["content"], *(
                    written_call(syntax, call.function.name, _arguments(call)) for call in calls)]))
        if message.role == "tool":
            if syntax.template_renders_tools:
                entry["tool_call_id"] = message.tool_call_id
            else:
                entry["content"] = f"<tool_response>\n{entry['content']}\n</tool_response>"
        chat.append(entry)
    if not tools or syntax.template_renders_tools:
        return chat, template_tools(tools, syntax)
    text = tools_system_text(tools)
    if chat and chat[0]["role"] == "system":
        chat[0] = {**chat[0], "content": f"{chat[0]['content']}\n\n{text}"}
    else:
        chat.insert(0, {"role": "system", "content": text})
    return chat, None


def written_call(syntax: ToolSyntax, name: str, arguments: dict) -> str:
    return f"{syntax.prefix}{json.dumps({'name': name, syntax.arguments_key: arguments})}{syntax.suffix}"


def call_grammar(tools: list[Tool], syntax: ToolSyntax, only: str | None, parallel: bool) -> StructuredOutput:
    """The reply must be calls (one, or with `parallel` one or more) of the tools, or of the one named `only`."""
    functions = {t.function.name: t.function.parameters or NO_PARAMETERS
                 for t in tools if only in (None, t.function.name)}
    return StructuredOutput.tool_calls(functions, syntax.prefix, syntax.suffix, arguments_key=syntax.arguments_key,
                                       separator=syntax.separator if parallel else None)


def parse_tool_calls(text: str, syntax: ToolSyntax, names: set[str]) -> tuple[str | None, list[ToolCall]]:
    """(the reply's text without its calls, or None if nothing else is left; the calls). A call is a JSON object in
    the syntax that names one of the tools; anything else stays text. Objects are read by a JSON decoder, so a
    string argument holding "}", the closing tag or the separator does not end the call early."""
    calls, spans = [], []
    if syntax.prefix:
        opening, closing = syntax.prefix.strip(), syntax.suffix.strip()
        at = text.find(opening)
        while at != -1:
            found = _object_at(text, at + len(opening), syntax, names)
            end = found and _after(text, found[1], closing)
            if found and end is not None:
                calls.append(found[0])
                spans.append((at, end))
            at = text.find(opening, end if found and end is not None else at + len(opening))
    else:  # Llama 3: the whole reply is the call objects (after <|python_tag|>), separated by ";"
        body = text.strip().removeprefix("<|python_tag|>")
        position, separator = 0, syntax.separator.strip()
        while (found := _object_at(body, position, syntax, names)) is not None:
            calls.append(found[0])
            position = _skip_space(body, found[1])
            if not body.startswith(separator, position):
                break
            position += len(separator)
        if calls and body[position:].strip():
            calls = []  # something other than calls follows: the reply is text
        spans = [(0, len(text))] if calls else []
    rest = text
    for start, end in reversed(spans):
        rest = rest[:start] + rest[end:]
    return ((rest.strip() or None) if calls else text), calls


_DECODER = json.JSONDecoder()


def _object_at(text: str, position: int, syntax: ToolSyntax, names: set[str]) -> tuple[ToolCall, int] | None:
    """The call whose JSON object starts at `position` (after any whitespace) and where that object ends."""
    try:
        obj, end = _DECODER.raw_decode(text, _skip_space(text, position))
    except ValueError:
        return None
    call = _call(obj, syntax, names)
    return (call, end) if call is not None else None


def _after(text: str, position: int, closing: str) -> int | None:
    """Where a call that ended at `position` is over: past its closing tag, or at the end of a reply that was cut
    before it; None if something else follows."""
    position = _skip_space(text, position)
    if text.startswith(closing, position):
        return position + len(closing)
    return position if position == len(text) else None


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


class CallReader:
    """Reads the calls of these tools out of replies, whole (read) or streamed (stream: one StreamedReply each);
    with only_calls, a streamed reply is held back whole (a required call: nothing in it is content)."""

    def __init__(self, syntax: ToolSyntax, tools: list[Tool], only_calls: bool = False):
        self.syntax, self.names, self.only_calls = syntax, {t.function.name for t in tools}, only_calls

    def read(self, text: str) -> tuple[str | None, list[ToolCall]]:
        return parse_tool_calls(text, self.syntax, self.names)

    def stream(self) -> "StreamedReply":
        return StreamedReply(self.syntax, self.names, self.only_calls)


class StreamedReply:
    """One streamed reply that may hold tool calls: feed() gives the text that is surely not part of a call (to
    send as content now), finish() the rest of the text and the calls."""

    def __init__(self, syntax: ToolSyntax, names: set[str], only_calls: bool):
        self.syntax, self.names, self.only_calls = syntax, names, only_calls
        self.text = ""
        self.sent = 0  # characters of text already given out as content

    def feed(self, delta: str) -> str:
        self.text += delta
        if self.only_calls:
            return ""
        if self.syntax.prefix:
            opening = self.syntax.prefix.strip()
            at = self.text.find(opening, self.sent)
            end = at if at != -1 else len(self.text) - _partial_suffix(self.text, opening)
        else:  # a reply that opens with an object may be a call: held back whole
            start = self.text.lstrip()
            held = not start or start[0] == "{" or "<|python_tag|>".startswith(start[:14])
            end = self.sent if held and self.sent == 0 else len(self.text)
        if end <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:end], end
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The text not yet given out (its calls removed) and the calls."""
        content, calls = parse_tool_calls(self.text, self.syntax, self.names)
        if not calls:
            return self.text[self.sent:], []
        rest = (content or "")
        return rest[self.sent:] if rest.startswith(self.text[:self.sent]) else "", calls


def _partial_suffix(text: str, opening: str) -> int:
    """How many of text's last characters could begin `opening`."""
    for size in range(min(len(opening) - 1, len(text)), 0, -1):
        if opening.startswith(text[-size:]):
            return size
    return 0


def finish_reason(reason: str | None, calls: list[ToolCall]) -> str | None:
    """A reply that ended by itself with calls ends with "tool_calls" (one cut by max_tokens stays "length")."""
    return "tool_calls" if calls and reason == "stop" else reason


def _call(obj, syntax: ToolSyntax, names: set[str]) -> ToolCall | None:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    arguments = obj.get(syntax.arguments_key, obj.get("arguments", {}))
    if not isinstance(arguments, dict):
        return None
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=FunctionCall(name=obj["name"],
                                                                               arguments=json.dumps(arguments)))


def _function(tool: Tool) -> dict:
    f = tool.function
    return {"name": f.name, "description": f.description or "",
            "parameters": f.parameters or NO_PARAMETERS}


def _arguments(call: ToolCall) -> dict:
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError:
        raise ValueError(f"tool call {call.id}: arguments must be JSON text of an object") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call {call.id}: arguments must be a JSON object")
    return arguments
