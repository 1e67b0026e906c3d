"""The chat screen's actions on one message of the branch on screen, the focused one (else the last): copy it, copy
its code blocks one by one, edit one of yours and send it again, move the focus between messages. Each needs a
modifier key (or a click), so that typing never sets one off; which of them the footer shows depends on the focused
message (Edit on yours) and on whether a reply is being written (nothing is regenerated or edited meanwhile)."""

from typing import TYPE_CHECKING

from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.widgets.message_view import ChatMessage

if TYPE_CHECKING:
    from localchat.tui.screens.chat import ChatScreen

WRITING_ACTIONS = {"regenerate", "edit", "switch_branch"}  # refused while a reply is written: hidden then


class MessageActions:
    def __init__(self, screen: "ChatScreen"):
        self.screen = screen

    @property
    def target(self) -> ChatMessage | None:
        """The message a key acts on: the focused one, else the last one on screen."""
        if isinstance(self.screen.focused, ChatMessage):
            return self.screen.focused
        views = self.screen.view.views
        return views[-1] if views else None

    def available(self, action: str, parameters: tuple) -> bool:
        """Whether a message's key is shown and works now."""
        if action in WRITING_ACTIONS and self.screen.generating_in is not None:
            return False
        target = self.target
        if action == "edit":
            return target is not None and target.message.role == "user"
        if action == "switch_branch":
            return target is not None and len(self.screen.session.tree.siblings(target.message.id)) > 1
        return True

    def copy(self) -> None:
        if self.target is not None:
            self.screen.app.copy_to_clipboard(self.target.message.content)
            self.screen.notify("Copied the message")

    def copy_code(self) -> None:
        """The message's code blocks, one per press (the first, then the next, ...)."""
        target = self.target
        if target is None:
            return
        blocks = target.code_blocks
        if not blocks:
            self.screen.notify("This message has no code block", severity="warning")
            return
        index = target.next_code_block % len(blocks)
        target.next_code_block = index + 1
        self.screen.app.copy_to_clipboard(blocks[index])
        self.screen.notify(f"Copied code block {index + 1} of {len(blocks)}")

    def edit(self) -> None:
        """Your message, edited in a dialog, sent again as a new branch beside it."""
        target, screen = self.target, self.screen
        if target is None or not screen.reply_writer.can_generate():
            return
        if target.message.role != "user":
            screen.notify(f"Only your messages can be edited; {screen.key_of('regenerate')} writes a new reply",
                          severity="warning")
            return
        message_id = target.message.id

        def resend(content: str | None) -> None:
            if content:
                screen.composer.focus()  # the edited message makes way for its new branch: typing goes on below
                screen.reply_writer.resend(message_id, content)

        screen.app.push_screen(EditMessageScreen(target.message.content), resend)

    def focus_message(self, delta: int) -> None:
        """The message before or after the focused one; from anywhere else, the last message. Past the last one, the
        message box."""
        views, focused = self.screen.view.views, self.screen.focused
        at = views.index(focused) + delta if focused in views else len(views) - 1
        if 0 <= at < len(views):
            views[at].focus()
            views[at].scroll_visible()
        elif at >= len(views):
            self.screen.composer.focus()
