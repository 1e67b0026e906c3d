"""Search every chat's messages (the engine's FTS5 index); choosing a hit opens its branch."""

import re

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from localchat.app.client.engine_client import EngineClient, EngineError
from localchat.app.protocol.conversations import SearchHit
from localchat.tui.engine_work import engine_work

MATCH_STYLE = "bold $text-accent"  # the query's words in a snippet, readable on the highlighted row's colour too


def hit_label(hit: SearchHit) -> Content:
    """Two lines: the chat's title and who wrote the message, then its snippet with the query's words marked. The
    title on a line of its own: a long one does not push the snippet away, and every title is cut (wrapped) alike."""
    who = "You" if hit.role == "user" else "Assistant"
    snippet = Content("").join(Content.styled(re.sub(r"\s+", " ", run.text), MATCH_STYLE if run.match else "")
                               for run in hit.snippet)
    return Content.assemble((hit.conversation_title, "bold"), (f" · {who}", "dim"), "\n", snippet)


class SearchScreen(ModalScreen[SearchHit | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="cancel"),
                Binding("down", "to_hits", "Results", show=False)]  # from the query box (the list takes its own ↓)

    def __init__(self, client: EngineClient):
        super().__init__()
        self.client = client
        self.hits: list[SearchHit] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="search"):
            yield Label("Search messages", classes="dialog-title")
            yield Input(placeholder="words to find (FTS5: \"a phrase\", prefix*, a OR b)", id="query")
            yield OptionList(id="hits")
            yield Label("", id="search-status")

    def on_input_changed(self, event: Input.Changed) -> None:
        self.search(event.value.strip())

    def on_input_submitted(self) -> None:
        self.action_to_hits()

    def action_to_hits(self) -> None:
        hits = self.query_one(OptionList)
        if self.hits:
            hits.focus()
            hits.highlighted = hits.highlighted or 0

    @engine_work(exclusive=True)
    async def search(self, query: str) -> None:
        status = self.query_one("#search-status", Label)
        try:
            self.hits = await self.client.search(query) if query else []
        except EngineError as error:
            self.hits = []
            status.update(f"not a query: {error}")
        else:
            status.update(f"{len(self.hits)} found" if query else "")
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(Option(hit_label(hit)) for hit in self.hits)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.hits[event.option_index])
