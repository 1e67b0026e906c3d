"""The chat screen's actions on one message of the branch on screen, the focused one (else the last): copy it, copy
its code blocks one by one, edit one of yours and send it again, edit a reply and save it as a branch to go on from,
continue a reply cut short, move the focus between messages. Each needs a modifier key (or a click), so that typing
never sets one off; which of them the footer shows depends on the focused message (Continue on a reply cut short) and
on whether a reply is being written (nothing is regenerated, edited or continued meanwhile)."""

from typing import TYPE_CHECKING

from localchat.app.protocol.conversations import continuable
from localchat.tui.screens.edit_message import EditMessageScreen
from localchat.tui.widgets.message_view import ChatMessage

if TYPE_CHECKING:
    from localchat.tui.screens.chat import ChatScreen

WRITING_ACTIONS = {"regenerate", "edit", "switch_branch", "continue_reply"}  # refused while a reply is written


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
            return target is not None and target.message.role in ("user", "assistant")
        if action == "continue_reply":
            return target is not None and continuable(target.message)
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
        """Your message, edited in a dialog, sent again as a new branch beside it; a reply, edited, saved beside it as
        the branch to go on from."""
        target, screen = self.target, self.screen
        if target is None or not screen.reply_writer.can_generate():
            return
        message = target.message
        if message.role == "tool":
            screen.notify("A tool's result cannot be edited", severity="warning")
            return

        def resend(content: str | None) -> None:
            if content:
                screen.composer.focus()  # the edited message makes way for its new branch: typing goes on below
                screen.reply_writer.resend(message.id, content)

        screen.app.push_screen(EditMessageScreen(message.content, reply=message.role == "assistant"), resend)

    def continue_reply(self) -> None:
        """The reply, cut short, goes on where it ended (in the same message)."""
        target, screen = self.target, self.screen
        if target is None or not screen.reply_writer.can_generate():
            return
        if not continuable(target.message):
            screen.notify(f"Only a reply cut at max tokens, stopped or edited goes on; {screen.key_of('regenerate')} "
                          "writes a new one", severity="warning")
            return
        screen.reply_writer.continue_reply(target.message.id, focus_reply=isinstance(screen.focused, type(target)))

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
