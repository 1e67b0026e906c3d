"""The header of the chat screen, with the open chat's use of the model's context on its right ("3.4k / 8k"): in the
warning colour from 80% on, with the key that starts a new chat from a summary (a click on it does the same); while a
summary is written, how long it has taken so far."""

import time

from textual.app import ComposeResult
from textual.message import Message as WidgetMessage
from textual.timer import Timer
from textual.widgets import Header, Static
from textual.widgets._header import HeaderIcon, HeaderTitle

from localchat.app.protocol.conversations import ContextUse
from localchat.tui.context_budget import gauge_text, near_limit


class ContextGauge(Static):
    """Empty where there is nothing to show (a new chat), taking the space Header leaves for its clock."""

    class SummaryAsked(WidgetMessage):
        """A click on the gauge near the limit: a new chat from a summary of this one."""

    def __init__(self, **kwargs):
        super().__init__(markup=False, **kwargs)
        self.use: ContextUse | None = None
        self.summary_key: str | None = None
        self.summarizing_since: float | None = None  # time.monotonic() of the summary being written
        self.clock: Timer | None = None  # counts the summary's seconds

    @property
    def near_limit(self) -> bool:
        return self.use is not None and near_limit(self.use)

    def show(self, use: ContextUse | None, summary_key: str) -> None:
        """The open chat's use (None: nothing to show); summary_key: the key that summarizes, as the footer shows
        it."""
        self.use, self.summary_key = use, summary_key
        self.render_gauge()

    def summarizing(self, writing: bool) -> None:
        """A summary is being written (the gauge counts its seconds), or it is done."""
        self.summarizing_since = time.monotonic() if writing else None
        if self.clock is not None:
            self.clock.stop()
        self.clock = self.set_interval(1, self.render_gauge) if writing else None
        self.render_gauge()

    def render_gauge(self) -> None:
        near = self.summarizing_since is None and self.near_limit
        self.set_class(near, "-near-limit")
        self.set_class(self.summarizing_since is not None, "-summarizing")
        self.tooltip = f"{self.summary_key}: a new chat that starts from a summary of this one" if near else None
        if self.summarizing_since is not None:
            self.update(f"summarizing… {time.monotonic() - self.summarizing_since:.0f} s")
        elif self.use is None:
            self.update("")
        elif near:
            self.update(f"⚠ {gauge_text(self.use)} · {self.summary_key} summarize")
        else:
            self.update(gauge_text(self.use))

    def on_click(self) -> None:
        if self.has_class("-near-limit"):
            self.post_message(self.SummaryAsked())


class ChatHeader(Header):
    """Textual's header (icon, title and sub-title), the context gauge where its clock would be."""

    def __init__(self, gauge: ContextGauge, **kwargs):
        super().__init__(**kwargs)
        self.gauge = gauge

    def compose(self) -> ComposeResult:
        yield HeaderIcon().data_bind(Header.icon)
        yield HeaderTitle()
        yield self.gauge
