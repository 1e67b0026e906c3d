"""Above the open chat, where it comes from and where it goes on: "Started from a summary of ‹title›" (a chat that
POST .../summarize began) and "Continued in ‹title›" (the chats begun from a summary of it). A click on one opens
that chat; the screen's key opens the newest continuation, else the origin."""

import asyncio
from dataclasses import dataclass

from textual.containers import Vertical
from textual.message import Message as WidgetMessage
from textual.widgets import Static


@dataclass(frozen=True)
class ChatLink:
    conversation_id: str
    title: str | None  # None: the chat was deleted
    continued: bool  # True: a chat begun from a summary of this one; False: the one this chat began from

    def __str__(self) -> str:
        title = f"“{self.title}”" if self.title is not None else "a deleted chat"
        return f"↳ Continued in {title}" if self.continued else f"↰ Started from a summary of {title}"


class ChatLinkLine(Static):
    def __init__(self, link: ChatLink, key: str | None):
        """key: the one that opens it, to hint at (None: a click only)."""
        super().__init__(f"{link}  ({key} opens it)" if key else str(link), markup=False, classes="chat-link")
        self.link = link
        self.set_class(link.title is None, "-deleted")

    def on_click(self) -> None:
        if self.link.title is not None:
            self.post_message(ChatLinks.Opened(self.link.conversation_id))


class ChatLinks(Vertical):
    """Hidden where the chat has no link."""

    class Opened(WidgetMessage):
        def __init__(self, conversation_id: str):
            super().__init__()
            self.conversation_id = conversation_id

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.links: list[ChatLink] = []
        self.replacing = asyncio.Lock()  # one show() at a time: the chat opened and the chat list both show links

    async def show(self, links: list[ChatLink], key: str) -> None:
        """links: the origin first, then the continuations, oldest first; key: the one that opens a linked chat."""
        async with self.replacing:
            if links == self.links:
                return
            self.links = links
            await self.remove_children()
            target = self.target
            await self.mount_all(ChatLinkLine(link, key if link == target else None) for link in links)
            self.display = bool(links)

    @property
    def target(self) -> ChatLink | None:
        """The chat the key opens: the newest continuation, else the origin (a deleted one: none)."""
        continued = [link for link in self.links if link.continued and link.title is not None]
        origin = [link for link in self.links if not link.continued and link.title is not None]
        return (continued or origin or [None])[-1]
