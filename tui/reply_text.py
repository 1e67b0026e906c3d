"""A message's Markdown as the terminal shows it: with the line breaks and indents it was written with. Markdown joins
the lines of a paragraph into one and drops their indents, which flattens what a model writes without a fence (code
indented under a line, a poem, an address); here each line of a paragraph ends in a hard break and keeps its indent.
Fenced code, indented code blocks, lists, quotes, headings and tables are Markdown's own and left as they are."""

import re

from localchat.app.markdown import message_markdown
from localchat.app.protocol.conversations import Message

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
BLOCK_START = re.compile(r"^ {0,3}([-*+]\s|\d{1,9}[.)]\s|>|#{1,6}\s|\||([-*_]\s*){3,}$)")  # a list item, a quote...
HARD_BREAK = "  "
# an indent's space that survives: Markdown strips a line's leading spaces, and Textual's Markdown joins runs of
# whitespace into one; a no-break space followed by a zero-width one is neither leading ASCII space nor a run
KEPT_SPACE = "\u00a0\u200b"


def shown_markdown(message: Message) -> str:
    return keep_lines(message_markdown(message))


def keep_lines(markdown: str) -> str:
    lines = markdown.split("\n")
    kept: list[str] = []
    fence: str | None = None  # the fence's marker while inside fenced code
    indented_code = False  # inside an indented code block (4 spaces after a blank line)
    for line in lines:
        previous = kept[-1] if kept else ""
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            kept.append(line)
            continue
        if opened := FENCE.match(line):
            fence = opened.group(1)[0] * 3
            kept.append(line)
            continue
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip():
            indented_code = False
        elif indent >= 4 and (not previous.strip() or indented_code):
            indented_code = True
        elif previous.strip() and not indented_code and not BLOCK_START.match(previous) \
                and not BLOCK_START.match(line) and not line.lstrip().startswith("|"):
            # a line of a paragraph after another: a hard break ends the one before, the indent is kept
            kept[-1] = previous + HARD_BREAK
            line = KEPT_SPACE * indent + line.lstrip(" ")
        kept.append(line)
    return "\n".join(kept)
