"""The chat screen's actions on one message of the branch on screen, the focused one (else the last): copy it, copy
its code blocks one by one, edit one of yours and send it again, edit a reply and save it as a branch to go on from,
continue a reply cut short, write it again, show its previous or next sibling, move the focus between messages. Each
is a message's key (keys.py's MESSAGE_KEYS, the screen's message_key action, which hands it here), and needs a
modifier key (or a click), so that typing never sets one off; which of them the footer shows depends on the focused
message (Continue on a reply cut short) and on whether a reply is being written (nothing is regenerated, edited,
continued or switched meanwhile)."""

from typing import Protocol

from textual.widget import Widget

from localchat.app.protocol.conversations import continuable
from localchat.tui.chat.host import ChatHost
from localchat.tui.chat.keys import key_of
from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.widgets.message_view import ChatMessage

WRITING_ACTIONS = {"regenerate", "edit", "switch_branch", "continue_reply"}  # refused while a reply is written


class Replies(Protocol):
    """What of the reply writer (reply_writer.py) a message's keys use."""

    generating_in: str | None  # the chat whose replies are being written

    def can_generate(self) -> bool: ...

    def regenerate(self, message_id: str, n: int, focus_reply: bool) -> None: ...

    def resend(self, message_id: str, content: str) -> None: ...

    def continue_reply(self, message_id: str, focus_reply: bool) -> None: ...


class Branches(Protocol):
    """What of the moves between branches (branch_navigation.py) a message's keys use."""

    def switch(self, message_id: str, delta: int) -> object: ...


class MessageActions(Widget):
    DEFAULT_CSS = "MessageActions { display: none; }"

    def __init__(self, host: ChatHost, replies: Replies, branches: Branches):
        super().__init__()
        self.host, self.replies, self.branches = host, replies, branches

    @property
    def target(self) -> ChatMessage | None:
        """The message a key acts on: the focused one, else the last one on screen."""
        if isinstance(self.host.focused, ChatMessage):
            return self.host.focused
        views = self.host.view.views
        return views[-1] if views else None

    @property
    def target_focused(self) -> bool:
        """The target is focused: a reply it makes takes the focus (its keys stay at hand)."""
        return isinstance(self.host.focused, ChatMessage)

    def available(self, action: str, *parameters) -> bool:
        """Whether a message's key is shown and works now."""
        if action in WRITING_ACTIONS and self.replies.generating_in is not None:
            return False
        target = self.target
        if action == "edit":
            return target is not None and target.message.role in ("user", "assistant")
        if action == "continue_reply":
            return target is not None and continuable(target.message)
        if action == "switch_branch":
            return target is not None and len(self.host.session.tree.siblings(target.message.id)) > 1
        return True

    def act(self, action: str, *parameters) -> None:
        """Do a message's key: `action` is the name of the method here that does it."""
        getattr(self, action)(*parameters)

    def copy_message(self) -> None:
        if self.target is not None:
            self.app.copy_to_clipboard(self.target.message.content)
            self.notify("Copied the message")

    def copy_code(self) -> None:
        """The message's code blocks, one per press (the first, then the next, ...)."""
        target = self.target
        if target is None:
            return
        if (code := target.next_code()) is None:
            self.notify("This message has no code block", severity="warning")
            return
        index, block = code
        self.app.copy_to_clipboard(block)
        self.notify(f"Copied code block {index + 1} of {len(target.code_blocks)}")

    def regenerate(self) -> None:
        if self.target is not None:
            self.replies.regenerate(self.target.message.id, 1, focus_reply=self.target_focused)

    def switch_branch(self, delta: int) -> None:
        if self.target is not None:
            self.branches.switch(self.target.message.id, delta)

    def edit(self) -> None:
        """Your message, edited in a dialog, sent again as a new branch beside it; a reply, edited, saved beside it as
        the branch to go on from."""
        target = self.target
        if target is None or not self.replies.can_generate():
            return
        message = target.message
        if message.role == "tool":
            self.notify("A tool's result cannot be edited", severity="warning")
            return

        def resend(content: str | None) -> None:
            if content:
                self.host.composer.focus()  # the edited message makes way for its new branch: typing goes on below
                self.replies.resend(message.id, content)

        self.app.push_screen(EditMessageScreen(message.content, reply=message.role == "assistant"), resend)

    def continue_reply(self) -> None:
        """The reply, cut short, goes on where it ended (in the same message)."""
        target = self.target
        if target is None or not self.replies.can_generate():
            return
        if not continuable(target.message):
            self.notify(f"Only a reply cut at max tokens, stopped or edited goes on; {key_of(self.app, 'regenerate')} "
                        "writes a new one", severity="warning")
            return
        self.replies.continue_reply(target.message.id, focus_reply=self.target_focused)

    def focus_message(self, delta: int) -> None:
        """The message before or after the focused one; from anywhere else, the last message. Past the last one, the
        message box."""
        views, focused = self.host.view.views, self.host.focused
        at = views.index(focused) + delta if focused in views else len(views) - 1
        if 0 <= at < len(views):
            views[at].focus()
            views[at].scroll_visible()
        elif at >= len(views):
            self.host.composer.focus()
